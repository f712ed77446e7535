#!/usr/bin/env bash
# The cuda plugin on a real NVIDIA GPU, in one command, in a few minutes:
# halinfo, halconform --profile all over the cuda plugin, bench/cuda_peer
# (the plugin beside the raw Driver API: D2D copy bandwidth, launch latency)
# and bench/cuda_allreduce (allreduce busbw on the GPUs present, the plugin's
# NCCL collectives beside NCCL called directly; needs libnccl.so.2).
#
#   scripts/gpu_check.sh --bundle DIR [BUILD]   (here, no GPU needed)
#       builds the Release targets in BUILD (default _build-rel, configured if
#       needed) and copies the few files the check runs into DIR (a few MiB:
#       carry it to the GPU machine; DIR under _* is git-ignored)
#   scripts/gpu_check.sh [DIR]                  (on the GPU machine)
#       runs from DIR (a bundle or a Release build tree, default _build-gpu);
#       builds DIR first when it lacks the binaries
#
# Results go to $OUT (the device machine's return folder) or DIR/gpu-check:
# halinfo.txt, halinfo.json, cuda.json (the certification record), cuda.xml,
# halconform.txt, cuda_peer.txt, cuda_allreduce.txt. The exit status is halconform's.
# The GPU machine needs the NVIDIA driver (libcuda.so.1); without NVRTC
# (libnvrtc.so.13) dialect modules, and so the kernels profile, are skipped.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
targets=(hal hal_plugin_cuda halinfo halconform bench_cuda_peer bench_cuda_allreduce)
files=(lib/libhal.so.1 lib/hal/plugins/hal_plugin_cuda.so bin/halinfo bin/halconform
  bench/cuda_peer bench/cuda_allreduce)

build_release() {  # BUILD_DIR
  if [[ ! -f "$1/build.ninja" ]]; then
    cmake -S "$root" -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHAL_BUILD_TESTS=OFF \
      -DHAL_BUILD_SAMPLES=OFF -DHAL_BUILD_BENCH=ON >/dev/null || return 1
  fi
  cmake --build "$1" --target "${targets[@]}" --parallel "$(nproc)" || return 1
  [[ -f "$1/lib/hal/plugins/hal_plugin_cuda.so" ]] || {
    echo "gpu_check: the cuda plugin was not built (no CUDA toolkit headers?)" >&2
    return 1
  }
}

if [[ "${1:-}" == "--bundle" ]]; then
  bundle="${2:?usage: scripts/gpu_check.sh --bundle DIR [BUILD]}"
  build="${3:-$root/_build-rel}"
  build_release "$build" || exit 1
  rm -rf "$bundle"
  for f in "${files[@]}"; do
    mkdir -p "$bundle/$(dirname "$f")"
    cp -L "$build/$f" "$bundle/$f"
  done
  echo "gpu_check: bundle in $bundle ($(du -sh "$bundle" | cut -f1)); on the GPU machine:"
  echo "  scripts/gpu_check.sh $bundle"
  exit 0
fi

dir="${1:-$root/_build-gpu}"
if [[ ! -x "$dir/bin/halconform" || ! -f "$dir/lib/hal/plugins/hal_plugin_cuda.so" ]]; then
  echo "gpu_check: no binaries in $dir; building Release there"
  build_release "$dir" || exit 1
fi
dir="$(cd "$dir" && pwd)"
out="${OUT:-$dir/gpu-check}"
mkdir -p "$out"
plugin="$dir/lib/hal/plugins/hal_plugin_cuda.so"
# The binaries' run paths name the tree they were built in: point at this one.
export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export HAL_PLUGINS="$plugin" HAL_LOG=0
unset HAL_CUDA_DRIVER_PATH

{
  echo "== $(date -u +%FT%TZ) $(uname -n)"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total \
    --format=csv,noheader
  ldconfig -p 2>/dev/null | grep -E "libcuda\.so\.1|libnvrtc\.so\.13|libnccl\.so\.2" || echo "(ldconfig: no libcuda/libnvrtc/libnccl listed)"
} | tee "$out/environment.txt"

echo "== halinfo"
"$dir/bin/halinfo" | tee "$out/halinfo.txt"
"$dir/bin/halinfo" --json >"$out/halinfo.json"

echo "== halconform --plugin cuda --profile all"
timeout 420 "$dir/bin/halconform" --plugin "$plugin" --profile all --timeout 60 --duration 2 \
  --report "$out/cuda.json" --junit "$out/cuda.xml" 2>&1 | tee "$out/halconform.txt"
status=${PIPESTATUS[0]}
echo "halconform exit status: $status" | tee -a "$out/halconform.txt"

echo "== bench/cuda_peer"
timeout 120 "$dir/bench/cuda_peer" --reps 7 2>&1 | tee "$out/cuda_peer.txt"

echo "== bench/cuda_allreduce"
if [[ -x "$dir/bench/cuda_allreduce" ]]; then
  timeout 120 "$dir/bench/cuda_allreduce" --reps 5 2>&1 | tee "$out/cuda_allreduce.txt"
else
  echo "(bench/cuda_allreduce not in $dir)" | tee "$out/cuda_allreduce.txt"
fi

echo "gpu_check: results in $out"
exit "$status"
