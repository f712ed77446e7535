#!/usr/bin/env bash
# The main job: set up, build, then report every discovered device and run the samples on them.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${HAL_BUILD_DIR:-$root/build}"

"$root/scripts/setup.sh"
"$root/scripts/build.sh" "$build" -DCMAKE_BUILD_TYPE=Release -DHAL_BUILD_TESTS=OFF

echo "== halinfo"
"$build/bin/halinfo"
echo "== samples"
"$build/bin/vector_add"
