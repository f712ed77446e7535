#!/usr/bin/env bash
# torch.wheel (the packaging tier): `pip install ./bindings/torch` against an installed HAL, as
# bindings/torch/README.md tells a user to: HAL is installed into a fresh prefix
# (`cmake --install`), the wheel is built with pip against that prefix (find_package(hal), so
# nothing of this source tree's libhal ships in it), installed into a fresh virtual environment
# that takes torch from the system's site-packages (torch from PyPI, installed once by
# `scripts/setup.sh --torch` and kept by pip's cache: no 2.8 GB download per run), and a tiny
# program checks that hal_torch imports from the environment, runs on the installed libhal and
# its cpu plugin, and computes a product and a sum natively that agree with float64.
#
#   tests/install/torch_wheel.sh BUILD_DIR [WORK]
#
# WORK (default BUILD_DIR/tests/install/torch-wheel) keeps the prefix and the environment after
# the run: a tree configured with HAL_TORCH_TESTS_ON_WHEEL runs hal_torch's suites in WORK/env.
#
# The wheel's scratch build directory is kept between runs (compiled through ccache): a rerun
# with unchanged sources costs a configure and a link check. The output gives each phase's time.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(cd "$1" && pwd)"
work="${2:-$build/tests/install/torch-wheel}"
rm -rf "$work/prefix" "$work/dist" "$work/env" "$work/run"
mkdir -p "$work/dist" "$work/run" "$work/home"
python="$(command -v python3)"
start=$SECONDS

name=torch.wheel
# shellcheck source=tests/install/wheel_build.sh
source "$root/tests/install/wheel_build.sh"

# 1. HAL installed into a prefix of its own.
install_hal_prefix
installed_hal=$SECONDS

# 2. The wheel, built against the prefix. No build isolation: an isolated build would fetch
# torch again (pyproject.toml).
# Build type None (Debian's convention: none of CMake's optimisation flags): the test checks the
# way in, not the code's speed (the Release tree's extension is the optimised one).
build_wheel "$root/bindings/torch" "hal_torch: against the installed HAL at $work/prefix" \
  -Ccmake.define.CMAKE_PREFIX_PATH="$work/prefix" -Ccmake.build-type=None
wheel=("$work"/dist/hal_torch-*.whl)
[[ -f "${wheel[0]}" ]] || { echo "torch.wheel: no hal_torch wheel in $work/dist"; exit 1; }
if "$python" -m zipfile -l "${wheel[0]}" | grep -q 'libhal\.so'; then
  echo "torch.wheel: the wheel bundles a libhal although it was built against an installed one"
  exit 1
fi
built=$SECONDS

# 3. A fresh environment (torch from the system's site-packages) with the wheel installed from
# the file: no index, no dependency resolution.
HOME="$work/home" "$python" -m venv --system-site-packages "$work/env"
HOME="$work/home" "$work/env/bin/python" -m pip install --no-deps --no-index \
  --disable-pip-version-check -q "${wheel[0]}"
installed=$SECONDS

# 4. A tiny program, away from the source and build trees, with no HAL variable but the plugin
# choice: the installed libhal finds its installed cpu plugin by itself.
cat > "$work/run/tiny.py" << 'PY'
import os, sys
import torch
import hal_torch

where = os.path.dirname(hal_torch.__file__)
if not where.startswith(sys.prefix):
    sys.exit(f"hal_torch was imported from {where}, not from the environment {sys.prefix}")
with open("/proc/self/maps") as maps:
    libhal = sorted({line.split()[-1] for line in maps if "/libhal.so" in line})
prefix = sys.argv[1]
if not libhal or not all(path.startswith(prefix) for path in libhal):
    sys.exit(f"libhal loaded from {libhal}, not from the installed prefix {prefix}")
g = torch.Generator().manual_seed(7)
a = torch.randn(17, 33, generator=g)
b = torch.randn(33, 9, generator=g)
hal_torch.reset_metrics()
product = (a.to("hal") @ b.to("hal")).sum(dim=0).cpu()
reference = (a.double() @ b.double()).sum(dim=0)
if not torch.allclose(product.double(), reference, rtol=1e-4, atol=1e-4):
    sys.exit(f"hal product {product} differs from the float64 reference {reference}")
ops = hal_torch.metrics()["ops"]
fell_back = sorted(name for name, op in ops.items() if op["fallback"])
if fell_back or not any(name.startswith("aten::mm") and op["native"] for name, op in ops.items()):
    sys.exit(f"the product did not run natively (fell back: {fell_back}): {sorted(ops)}")
print(f"torch.wheel: hal_torch on {torch.hal.device_count()} hal device(s), libhal {libhal[0]}")
PY
cd "$work/run"
env -i HOME="$work/home" PATH="$work/env/bin:/usr/bin:/bin" LANG=C.UTF-8 HAL_PLUGINS=cpu \
  TORCH_DEVICE_BACKEND_AUTOLOAD=0 PYTHONDONTWRITEBYTECODE=1 \
  "$work/env/bin/python" "$work/run/tiny.py" "$work/prefix"
ran=$SECONDS
echo "torch.wheel: install HAL $((installed_hal - start)) s, wheel $((built - installed_hal)) s," \
  "venv and install $((installed - built)) s, run $((ran - installed)) s, total $((ran - start)) s"
echo "torch.wheel: pip install ./bindings/torch against the installed HAL ran natively"
