#!/usr/bin/env bash
# python.wheel (the packaging tier): builds the self-contained wheel a user gets from
# `pip wheel ./bindings/python` (libhal, the cpu and opencl plugins and the extension in one
# file), installs it into a fresh virtual environment, and runs the bindings' test suite against
# the installed package with no compiler on PATH and none of the build tree in sight.
#
#   tests/install/python_wheel.sh BUILD_DIR                 (the default tier)
#   tests/install/python_wheel.sh BUILD_DIR --from-source   (the slow tier)
#
# By default the wheel bundles the libhal and plugins of BUILD_DIR, installed into a prefix of
# its own (HAL_PYTHON_BUNDLE_FROM): pip compiles only the extension, and the prefix is removed
# before the tests, so the wheel must carry all it needs. --from-source is the plain
# `pip wheel ./bindings/python`, which compiles this whole source tree again inside pip (two
# minutes on two cores: the full tier runs it).
#
# The environment sees the system's site-packages (numpy, pytest: no network
# is needed), never the build tree's package: PYTHONPATH is unset, the run is
# in a scratch directory, and `hal` must import from the environment.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(cd "$1" && pwd)"
from_source=0
case "${2:-}" in
  "") ;;
  --from-source) from_source=1 ;;
  *)
    echo "usage: tests/install/python_wheel.sh BUILD_DIR [--from-source]" >&2
    exit 2
    ;;
esac
work="$build/tests/install/wheel"
((from_source)) && work+="-from-source"
rm -rf "$work/dist" "$work/env" "$work/run" "$work/bin" "$work/prefix"
mkdir -p "$work/dist" "$work/run" "$work/bin" "$work/home"
python="$(command -v python3)"
start=$SECONDS

# 1. The wheel (tests/install/wheel_build.sh: through ccache, its log checked).
name=python.wheel
# shellcheck source=tests/install/wheel_build.sh
source "$root/tests/install/wheel_build.sh"
if ((from_source)); then
  build_wheel "$root/bindings/python" \
    "hal python: no installed HAL found; building the source tree into the wheel"
else
  install_hal_prefix
  build_wheel "$root/bindings/python" "hal python: bundling the installed HAL at $work/prefix" \
    -Ccmake.define.HAL_PYTHON_BUNDLE_FROM="$work/prefix"
fi
wheel=("$work"/dist/hal_accel-*.whl)
[[ -f "${wheel[0]}" ]] || { echo "python.wheel: no hal_accel wheel in $work/dist"; exit 1; }
contents="$("$python" -m zipfile -l "${wheel[0]}")"
for carried in hal/lib/libhal.so.1 hal/lib/hal/plugins/hal_plugin_cpu.so; do
  grep -qF "$carried" <<< "$contents" || { echo "python.wheel: the wheel lacks $carried"; exit 1; }
done
# What the wheel was built from is gone before anything imports it.
rm -rf "$work/prefix"
built=$SECONDS
echo "python.wheel: built $(basename "${wheel[0]}") ($(du -k "${wheel[0]}" | cut -f1) KiB) in $((built - start)) s"

# 2. A fresh environment with the wheel installed (from the file: no index).
# (venv bootstraps pip with ensurepip, a pip run too.)
HOME="$work/home" "$python" -m venv --system-site-packages "$work/env"
HOME="$work/home" "$work/env/bin/python" -m pip install --no-deps --no-index \
  --disable-pip-version-check -q "${wheel[0]}"
installed=$SECONDS

# 3. The suite against it, PATH holding the environment and nothing that compiles.
for tool in c++ g++ gcc cc clang clang++; do
  if PATH="$work/env/bin:$work/bin" command -v "$tool" > /dev/null; then
    echo "python.wheel: $tool is on the test's PATH"
    exit 1
  fi
done
cd "$work/run"
# The driver is a file, not standard input: the suite's multi-process tests
# start their ranks with multiprocessing's spawn, which re-imports the main
# module by its path (the guard keeps a rank from running the suite again).
cat > "$work/run/run_suite.py" << 'PY'
import os, sys
if __name__ == "__main__":
    import hal
    where = os.path.dirname(hal.__file__)
    print(f"hal {hal.version()} from {where}")
    if not where.startswith(sys.prefix):
        sys.exit(f"hal was imported from {where}, not from the environment {sys.prefix}")
    import pytest
    sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-rs", sys.argv[1]]))
PY
set +e
# A CPU shared-object kernel needs no compiler at run time: the samples' one is the user's.
vector_add_so=""
[[ -f "$build/lib/vector_add_cpu.so" ]] && vector_add_so="$build/lib/vector_add_cpu.so"
env -i HOME="$work/home" PATH="$work/env/bin:$work/bin" LANG=C.UTF-8 \
  HAL_PLUGINS=cpu HAL_CPU_DEVICES=2 HAL_TEST_NO_COMPILER=1 PYTHONDONTWRITEBYTECODE=1 \
  HAL_TEST_VECTOR_ADD_SO="$vector_add_so" \
  "$work/env/bin/python" "$work/run/run_suite.py" "$root/bindings/python/tests" \
  > "$work/pytest.log" 2>&1
status=$?
set -e
tested=$SECONDS
cat "$work/pytest.log" | tail -40
# Every skip is one the suite knows: no compiler for a dialect kernel, or an optional framework.
unexpected=$(grep '^SKIPPED' "$work/pytest.log" |
  grep -v -e 'needs a C++ compiler' -e 'could not import' || true)
if [[ -n "$unexpected" ]]; then
  echo "python.wheel: unexpected skips:"
  echo "$unexpected"
  status=1
fi
echo "python.wheel: wheel $((built - start)) s, install $((installed - built)) s, tests $((tested - installed)) s"
if ((status != 0)); then
  echo "python.wheel: FAILED"
  exit 1
fi
echo "python.wheel: the installed wheel passed the bindings' tests with no compiler on PATH"
