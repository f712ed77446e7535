#!/usr/bin/env bash
# Installs everything HAL needs to build and test on Debian 12 (run as root).
# Idempotent: packages already present are left as they are.
#
#   scripts/setup.sh              the build, the main job and every test but those below
#   scripts/setup.sh --for-tests  also the tools only the test suite uses (mypy)
#   scripts/setup.sh --torch      also torch and torchvision (bindings/torch and its tests, which
#                                 only the Release suite builds: scripts/test.sh asks for them)
set -euo pipefail

for_tests=0
with_torch=0
for arg in "$@"; do
  case "$arg" in
    --for-tests) for_tests=1 ;;
    --torch) with_torch=1 ;;
    *) echo "setup: unknown argument $arg (only --for-tests, --torch)" >&2; exit 2 ;;
  esac
done

packages=(
  build-essential cmake ninja-build pkg-config git ccache
  clang clang-format libclang-rt-14-dev
  libboost-dev libboost-filesystem-dev libffi-dev catch2
  pocl-opencl-icd ocl-icd-opencl-dev opencl-headers clinfo
  python3 python3-jsonschema python3-pip python3-venv
  libopenmpi-dev openmpi-bin
  libdnnl-dev
  libamdhip64-dev hipcc
  libze-dev libze1
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
else
  echo "setup: all packages present"
fi

# Python packages for bindings/python (PyPI). Debian 12's python3 is "externally managed"
# (PEP 668): as root with no stdin, --break-system-packages installs into /usr/local, apart from
# apt's files, and needs no venv to be found by CMake (python3 -m nanobind) and by CTest.
python_packages=(nanobind scikit-build-core numpy pytest jax)
python_modules=(nanobind scikit_build_core numpy pytest jax)
if ((for_tests)); then
  # python.mypy type-checks samples/python with hal.mypy_plugin.
  python_packages+=(mypy)
  python_modules+=(mypy)
fi
python_missing=()
for i in "${!python_modules[@]}"; do
  python3 -c "import ${python_modules[$i]}" 2>/dev/null || python_missing+=("${python_packages[$i]}")
done
if ((${#python_missing[@]})); then
  echo "setup: pip installing ${python_missing[*]}"
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    --break-system-packages "${python_missing[@]}" </dev/null
else
  echo "setup: python packages present"
fi

# PyTorch for bindings/torch (PyPI). Its default wheel is a CUDA build that pulls about 2.8 GB of
# CUDA libraries (5.2 GB installed); there is no CPU wheel on PyPI. pip's wheel cache is kept
# between runs (HAL_PIP_CACHE_DIR, default ~/.cache/pip), so a reinstall never downloads again,
# and an installed torch is found without importing it (the import alone takes seconds).
if ((with_torch)); then
  torch_missing=()
  for module in torch torchvision expecttest; do
    python3 -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$module') is None)" ||
      torch_missing+=("$module")
  done
  if ((${#torch_missing[@]})); then
    echo "setup: pip installing ${torch_missing[*]}"
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
      --cache-dir "${HAL_PIP_CACHE_DIR:-$HOME/.cache/pip}" \
      --break-system-packages "${torch_missing[@]}" </dev/null
  else
    echo "setup: torch present"
  fi
fi
