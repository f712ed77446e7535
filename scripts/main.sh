#!/usr/bin/env bash
# The main job: set up, build, report every discovered device, certify each one with halconform
# (every profile; the record, JUnit and HTML reports land in $build/conformance), run the samples.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${HAL_BUILD_DIR:-$root/build}"

"$root/scripts/setup.sh"
"$root/scripts/build.sh" "$build" -DCMAKE_BUILD_TYPE=Release -DHAL_BUILD_TESTS=OFF

echo "== halinfo"
"$build/bin/halinfo"
echo "== samples"
"$build/bin/vector_add"
echo "== halconform (every discovered device, every profile)"
mkdir -p "$build/conformance"
"$build/bin/halconform" --profile all --report "$build/conformance/certification.json" \
  --junit "$build/conformance/certification.xml" --html "$build/conformance/certification.html"
