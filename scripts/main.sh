#!/usr/bin/env bash
# The main job: set up, build, report every discovered device, run the samples, certify each
# device with halconform (every profile; the record, JUnit and HTML reports land in
# $build/conformance).
#
# The first sample is HAL's promise: dialect_kernels writes its kernels once, in the kernel
# dialect, and every discovered device compiles and runs them (cpu, PoCL's opencl, and the GPUs
# of the cuda, hip and level_zero plugins where a driver is present), its results compared
# across the devices. The second, vector_add, loads a native CPU shared object: the devices
# that take only their own binaries say so and are skipped.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${HAL_BUILD_DIR:-$root/build}"

"$root/scripts/setup.sh"
"$root/scripts/build.sh" "$build" -DCMAKE_BUILD_TYPE=Release -DHAL_BUILD_TESTS=OFF

echo "== halinfo"
"$build/bin/halinfo"
echo "== sample 1: one kernel source, every device (dialect_kernels)"
"$build/bin/dialect_kernels"
echo "== sample 2: a native CPU shared object (vector_add)"
"$build/bin/vector_add"
echo "== halconform (every discovered device, every profile)"
mkdir -p "$build/conformance"
"$build/bin/halconform" --profile all --report "$build/conformance/certification.json" \
  --junit "$build/conformance/certification.xml" --html "$build/conformance/certification.html"
