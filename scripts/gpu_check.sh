#!/usr/bin/env bash
# The cuda plugin on a real NVIDIA GPU, in one short command that builds
# nothing there. A GPU loan is short (minutes) and has no network, so:
#
#   scripts/gpu_check.sh --bundle DIR [BUILD]      (here, no GPU needed)
#       builds the Release targets in BUILD (default _build-rel, configured if
#       needed) and copies the few files the check runs into DIR (a few MiB;
#       DIR under _* is git-ignored): carry DIR to the GPU machine.
#   scripts/gpu_check.sh [--dry-run] DIR            (on the GPU machine)
#       runs from DIR (a bundle or a Release build tree). A DIR without the
#       binaries is an error naming the --bundle command: nothing is built.
#
# Steps, each under its own time cap (with halinfo's 10 s they sum to 540 s,
# at most 540, so a run and a rerun fit a 15-minute loan):
#   libraries   finds NVRTC, cuBLASLt, NCCL, cuDNN, cuBLAS and the CUDA headers
#               (ldconfig, the toolkit directories, Python wheels'
#               site-packages/nvidia/*/lib) and pins them for the plugin and the
#               benchmarks (HAL_CUDA_*_PATH), one line each
#   halinfo     what the plugin found (devices, load report)
#   ops         halinfo --ops: which implementation serves each operator on the
#               GPU (cuda.cublaslt, cuda.cudnn, portable ...) and why the others
#               decline, as text in the archive (halinfo-ops.txt)
#   core, kernels, operators, collectives, performance
#               halconform --profile P, one process per profile
#   peers       bench/cuda_peer: D2D copy vs cuMemcpyDtoDAsync (event-timed), empty-kernel
#               launch vs cuLaunchKernel (the plugin beside the raw Driver API)
#   gemm        bench/cuda_gemm_peer: HAL matmul bf16 and f32 at 4096^3 and
#               8192^3 vs cublasLtMatmul and cublasGemmEx called directly, in
#               one process, interleaved
#   attention   bench/attention (HAL, bf16) then bench/python/attention_sdpa.py
#               (PyTorch SDPA on the same GPU; "not tested" with torch's reason
#               when torch does not import or sees no GPU)
# GPU time of the benchmark steps, estimated from an H100's rates (cuBLAS f32
# without TF32 ~50 TFLOP/s, bf16 ~600): gemm runs 3 sides x 6 samples x 10
# calls per shape, 8192^3 f32 is 1.1 TFLOP a call (~22 ms), so ~4 s for it and
# ~1 s for the other three shapes, plus filling 2 x 2 GiB of operands from the
# host and the result check (~5 s): ~10-15 s of its 40 s cap. ops plans a few
# cases per op: where cuDNN is absent the portable convolution, pooling and
# channel-norm kernels are compiled (NVRTC, into the kernel cache the operators
# profile then reads; 6 s for two devices over the stand-in driver here). attention at
# 1024 and 2048 tokens, 16 heads of 128, is 2-17 GFLOP a forward: under 5 s for
# HAL's portable kernels even at 100 GFLOP/s, and torch's start (~10 s) for
# SDPA. peers: 7 x (2 x 256 MiB copies + 3 x 2000 launches) ~ 1 s.
# After every step the results archive (OUT/gpu-check.tar.gz: each profile's
# JSON record, JUnit XML and HTML report, the logs) is rewritten, so a
# time-out or a lost machine loses nothing already done. A summary table is
# printed last. OUT is $OUT (the device machine's return folder) or DIR/gpu-check.
#
# Exit status: 0 every step tested and passed; 1 a step was tested and failed
# (or reached its cap); 3 something could not be tested (no driver or no GPU,
# or a library a step needs is absent) and nothing failed; 2 usage or a
# missing bundle.
#
# --dry-run runs every path of the script against the stand-in driver
# (HAL_CUDA_DRIVER_PATH must name it) with one quick test per profile (the
# stand-in runs no kernels, so the kernels step fails there: the FAIL path).
# CTest runs it (cuda.gpu_check_dry_run, cuda.gpu_check_no_gpu).
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
targets=(hal hal_plugin_cuda halinfo halconform halconform_kernels bench_cuda_peer
  bench_cuda_gemm_peer bench_attention)
files=(lib/libhal.so.1 lib/hal/plugins/hal_plugin_cuda.so lib/hal/conformance/halconform_kernels.so
  bin/halinfo bin/halconform bench/cuda_peer bench/cuda_gemm_peer bench/attention)

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
  build_release "$build" || exit 2
  rm -rf "$bundle"
  for f in "${files[@]}"; do
    mkdir -p "$bundle/$(dirname "$f")"
    cp -L "$build/$f" "$bundle/$f" || exit 2
  done
  mkdir -p "$bundle/scripts" "$bundle/bench/python"
  cp "$root/scripts/gpu_check.sh" "$bundle/scripts/gpu_check.sh"
  cp "$root/bench/python/attention_sdpa.py" "$bundle/bench/python/attention_sdpa.py"
  echo "gpu_check: bundle in $bundle ($(du -sh "$bundle" | cut -f1)); on the GPU machine:"
  echo "  $bundle/scripts/gpu_check.sh $bundle"
  exit 0
fi

dry_run=0
if [[ "${1:-}" == "--dry-run" ]]; then
  dry_run=1
  shift
fi
dir="${1:-}"
if [[ -z "$dir" || ! -x "$dir/bin/halconform" || ! -f "$dir/lib/hal/plugins/hal_plugin_cuda.so" ]]; then
  echo "gpu_check: no bundle in '${dir}' (bin/halconform, lib/hal/plugins/hal_plugin_cuda.so)." >&2
  echo "  Make one where the sources are (the GPU machine builds nothing):" >&2
  echo "    scripts/gpu_check.sh --bundle _gpu-bundle   # then carry _gpu-bundle" >&2
  exit 2
fi
dir="$(cd "$dir" && pwd)"
out="${OUT:-$dir/gpu-check}"
mkdir -p "$out"
plugin="$dir/lib/hal/plugins/hal_plugin_cuda.so"
# The binaries' run paths name the tree they were built in: point at this one.
export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export HAL_PLUGINS="$plugin" HAL_PLUGIN_PATH="" HAL_LOG="${HAL_LOG:-0}"
if [[ $dry_run -eq 1 ]]; then
  [[ -n "${HAL_CUDA_DRIVER_PATH:-}" ]] || {
    echo "gpu_check: --dry-run needs HAL_CUDA_DRIVER_PATH (the stand-in driver)" >&2
    exit 2
  }
else
  unset HAL_CUDA_DRIVER_PATH
fi

# Caps in seconds; with halinfo's 10 they sum to at most 540.
declare -A cap=([ops]=20 [core]=110 [kernels]=70 [operators]=110 [collectives]=50
  [performance]=50 [peers]=30 [gemm]=40 [attention]=50)
total=10
for key in "${!cap[@]}"; do total=$((total + cap[$key])); done
if ((total > 540)); then
  echo "gpu_check: the caps sum to $total s, over 540" >&2
  exit 2
fi

summary=()  # "step|result|detail|seconds"
failed=0
untested=0
archive() {  # rewrites the results archive with everything written so far
  (cd "$out" && tar czf .gpu-check.tar.gz.new --exclude gpu-check.tar.gz \
    --exclude .gpu-check.tar.gz.new . 2>/dev/null && mv .gpu-check.tar.gz.new gpu-check.tar.gz)
}
note() {  # STEP RESULT DETAIL SECONDS
  summary+=("$1|$2|$3|$4")
  case "$2" in
    FAIL | TIMEOUT) failed=1 ;;
    "NOT TESTED") untested=1 ;;
  esac
  archive
}

# ---- libraries ---------------------------------------------------------------
# Where to look, after the dynamic linker's cache (ldconfig): the toolkit's
# directories, then each Python's wheels (site-packages/nvidia/*/lib: the CUDA
# 12 wheels' nvidia/cuda_nvrtc/lib, nvidia/cublas/lib, nvidia/nccl/lib, the
# CUDA 13 wheels' nvidia/cu13/lib).
wheel_dirs() {
  local python
  for python in python3 python; do
    command -v "$python" >/dev/null || continue
    "$python" - <<'EOF' 2>/dev/null
import glob, os, site, sys
roots = list(getattr(site, "getsitepackages", lambda: [])()) + [site.getusersitepackages()]
roots += [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
seen = set()
for root in roots:
    for lib in sorted(glob.glob(os.path.join(root, "nvidia", "*", "lib"))):
        if lib not in seen:
            seen.add(lib)
            print(lib)
EOF
    return 0
  done
}
toolkit_dirs() {
  local d
  for d in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda /usr/local/cuda-*; do
    [[ -n "$d" ]] || continue
    [[ -d "$d/lib64" ]] && echo "$d/lib64"
    [[ -d "$d/targets/x86_64-linux/lib" ]] && echo "$d/targets/x86_64-linux/lib"
    [[ -d "$d/targets/sbsa-linux/lib" ]] && echo "$d/targets/sbsa-linux/lib"
  done
  return 0
}
mapfile -t search_dirs < <(toolkit_dirs; wheel_dirs)
find_library() {  # FILE-NAME-REGEX: prints the first match's path
  local found d f
  found="$(ldconfig -p 2>/dev/null | awk -v re="^$1\$" '$1 ~ re {print $NF; exit}')"
  if [[ -n "$found" ]]; then
    echo "$found"
    return 0
  fi
  for d in "${search_dirs[@]}"; do
    for f in "$d"/*; do
      if [[ -f "$f" && "$(basename "$f")" =~ ^$1$ ]]; then
        echo "$f"
        return 0
      fi
    done
  done
  return 1
}
find_headers() {  # a directory with cuda_fp16.h (NVRTC compiles the dialect with it)
  local d
  for d in "${CUDA_HOME:-/usr/local/cuda}/include" /usr/local/cuda/include \
    "${search_dirs[@]/%\/lib/\/include}"; do
    if [[ -f "$d/cuda_fp16.h" ]]; then
      echo "$d"
      return 0
    fi
  done
  return 1
}
pin() {  # VARIABLE LABEL REGEX: exports VARIABLE and prints one line; 1 when not found
  local path message result=0
  if [[ -n "${!1:-}" ]]; then
    message="$2: ${!1} (given in $1)"
  elif path="$(find_library "$3")"; then
    export "$1=$path"
    message="$2: $path"
  else
    message="$2: not found (ldconfig, toolkit directories, Python wheels)"
    result=1
  fi
  echo "$message" | tee -a "$out/environment.txt"
  return $result
}

start=$SECONDS
{
  echo "== $(date -u +%FT%TZ) $(uname -n)"
  [[ $dry_run -eq 1 ]] && echo "dry run: the stand-in driver $HAL_CUDA_DRIVER_PATH"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total \
    --format=csv,noheader
  echo "== libraries (pinned for the plugin)"
} | tee "$out/environment.txt"
missing_nvrtc=0
missing_blas=0
missing_nccl=0
missing_dnn=0
pin HAL_CUDA_NVRTC_PATH NVRTC 'libnvrtc\.so\.[0-9]+' || missing_nvrtc=1
pin HAL_CUDA_CUBLASLT_PATH cuBLASLt 'libcublasLt\.so\.[0-9]+' || missing_blas=1
pin HAL_CUDA_NCCL_PATH NCCL 'libnccl\.so\.[0-9]+' || missing_nccl=1
# cuBLAS only for the gemm step's cublasGemmEx side (the plugin uses cuBLASLt).
missing_cublas=0
pin HAL_CUDA_CUBLAS_PATH cuBLAS 'libcublas\.so\.[0-9]+' || missing_cublas=1
# cuDNN serves the operators profile's convolutions where present; without it
# the portable implementation does, so it does not gate the libraries step.
pin HAL_CUDA_CUDNN_PATH cuDNN 'libcudnn\.so\.9' || missing_dnn=1
if [[ -z "${HAL_CUDA_INCLUDE_PATH:-}" ]] && headers="$(find_headers)"; then
  export HAL_CUDA_INCLUDE_PATH="$headers"
fi
echo "CUDA headers: ${HAL_CUDA_INCLUDE_PATH:-not found, the plugin tries the directory beside NVRTC}" |
  tee -a "$out/environment.txt"
libraries="nvrtc=$((1 - missing_nvrtc)) cublasLt=$((1 - missing_blas)) nccl=$((1 - missing_nccl)) cublas=$((1 - missing_cublas)) cudnn=$((1 - missing_dnn))"
if ((missing_nvrtc + missing_blas + missing_nccl == 0)); then
  note libraries PASS "$libraries" $((SECONDS - start))
else
  note libraries "NOT TESTED" "$libraries" $((SECONDS - start))
fi

# ---- halinfo -----------------------------------------------------------------
start=$SECONDS
echo "== halinfo"
# HAL_LOG=1: the plugin's lines say which NVRTC and NCCL it opened, and from where.
HAL_LOG=1 timeout -k 5 10 "$dir/bin/halinfo" 2>&1 | tee "$out/halinfo.txt"
timeout -k 5 10 "$dir/bin/halinfo" --json >"$out/halinfo.json" 2>/dev/null
devices="$(grep -o '"device_count":[0-9]*' "$out/halinfo.json" | head -1 | cut -d: -f2)"
devices="${devices:-0}"
if ((devices > 0)); then
  note halinfo PASS "$devices GPU(s)" $((SECONDS - start))
else
  note halinfo "NOT TESTED" \
    "no GPU: $(grep -o '"reason":"[^"]*"' "$out/halinfo.json" | head -1 | cut -c1-160)" \
    $((SECONDS - start))
fi

# ---- halinfo --ops --------------------------------------------------------------
# Which implementation serves each op on this GPU, and why the others decline:
# the first real run records it, whatever the profiles below find.
start=$SECONDS
echo "== halinfo --ops (cap ${cap[ops]} s)"
if ((devices == 0)); then
  note ops "NOT TESTED" "no GPU" 0
else
  timeout -k 5 "${cap[ops]}" "$dir/bin/halinfo" --ops >"$out/halinfo-ops.txt" 2>&1
  status=$?
  # The op kinds listed for device 0 (its lines up to the next device's).
  kinds="$(awk '/operators \(each kind/ { on = 1; next } on && /^  \[/ { exit }
    on && /^      [a-z_]+ +[a-z]/ { n++ } END { print n + 0 }' "$out/halinfo-ops.txt")"
  grep -E '^      matmul ' -A 3 "$out/halinfo-ops.txt" | head -n 4
  if ((status == 124 || status == 137)); then
    note ops TIMEOUT "the cap of ${cap[ops]} s" $((SECONDS - start))
  elif ((status == 0 && kinds > 0)); then
    note ops PASS "$kinds op kinds of device 0 in halinfo-ops.txt" $((SECONDS - start))
  else
    note ops FAIL "halinfo --ops exit status $status, $kinds op kinds listed" $((SECONDS - start))
  fi
fi

# ---- halconform, one profile at a time -----------------------------------------
declare -A dry_filter=([core]='core.events.*' [kernels]='kernels.dialect.saxpy'
  [operators]='operators.errors.*' [collectives]='collectives.abort.deadline'
  [performance]='performance.launch.*')
run_profile() {  # PROFILE [why it cannot be tested]
  local profile="$1" why="${2:-}" t=$SECONDS status counts
  local extra=()
  echo "== halconform --profile $profile (cap ${cap[$profile]} s)"
  if ((devices == 0)); then
    note "$profile" "NOT TESTED" "no GPU" 0
    return
  fi
  if [[ -n "$why" ]]; then
    echo "not tested: $why" | tee "$out/$profile.txt"
    note "$profile" "NOT TESTED" "$why" 0
    return
  fi
  [[ $dry_run -eq 1 ]] && extra=(--filter "${dry_filter[$profile]}")
  # Multi-rank tests size themselves to the devices present (a device's
  # max_ranks_per_device: NCCL puts one rank on a GPU), skipping with the
  # reason when there are too few: nothing is excluded here.
  timeout -k 10 "${cap[$profile]}" "$dir/bin/halconform" --plugin "$plugin" --device 0 \
    --profile "$profile" --timeout 60 --duration 2 "${extra[@]}" \
    --report "$out/$profile.json" --junit "$out/$profile.xml" --html "$out/$profile.html" \
    >"$out/$profile.txt" 2>&1
  status=$?
  tail -n 12 "$out/$profile.txt"
  counts="$(grep -E "^cuda:[0-9]+ +$profile " "$out/$profile.txt" | head -1 |
    awk '{print "pass " $3 ", fail " $4 ", skip " $5}')"
  if ((status == 124 || status == 137)); then
    note "$profile" TIMEOUT "the cap of ${cap[$profile]} s; ${counts:-no summary}" $((SECONDS - t))
  elif ((status == 0)); then
    note "$profile" PASS "$counts" $((SECONDS - t))
  else
    note "$profile" FAIL "exit $status; ${counts:-no summary}" $((SECONDS - t))
  fi
}
run_profile core
run_profile kernels "$([[ $missing_nvrtc -eq 1 ]] && echo 'NVRTC not found')"
run_profile operators "$([[ $missing_nvrtc -eq 1 ]] && echo 'NVRTC not found')"
run_profile collectives "$([[ $missing_nccl -eq 1 ]] && echo 'NCCL not found')"
run_profile performance

# ---- benchmarks: the plugin beside the vendor's own calls -------------------------
bench_step() {  # STEP WHY-NOT-TESTED COMMAND...: runs COMMAND under the step's cap
  local step="$1" why="$2" t=$SECONDS status
  shift 2
  echo "== $step (cap ${cap[$step]} s)"
  if ((devices == 0)); then
    note "$step" "NOT TESTED" "no GPU" 0
    return 1
  fi
  if [[ -n "$why" ]]; then
    echo "not tested: $why" | tee "$out/$step.txt"
    note "$step" "NOT TESTED" "$why" 0
    return 1
  fi
  timeout -k 5 "${cap[$step]}" "$@" >"$out/$step.txt" 2>&1
  status=$?
  cat "$out/$step.txt"
  if ((status == 124 || status == 137)); then
    note "$step" TIMEOUT "the cap of ${cap[$step]} s" $((SECONDS - t))
  elif ((status != 0)); then
    note "$step" FAIL "exit $status" $((SECONDS - t))
  else
    return 0
  fi
  return 1
}
# A dry run measures nothing meaningful (the stand-in runs no kernels): the
# smallest shapes, one repetition, so every path runs in seconds.
if [[ $dry_run -eq 1 ]]; then
  peer_args=(--reps 1 --bytes 1048576 --launches 20)
  gemm_args=(--sizes 64 --reps 1 --iters 1)
  attention_lengths=(64)
  attention_shape=(batch=1 heads=2 dim=64)
  sdpa_args=(--heads 2 --dim 64 --reps 1 --device cpu)
else
  peer_args=(--reps 7)
  gemm_args=(--sizes 4096,8192 --reps 5 --iters 10)
  attention_lengths=(1024 2048)
  attention_shape=(batch=1 heads=16 dim=128)
  sdpa_args=(--heads 16 --dim 128 --reps 5)
fi
start=$SECONDS
if bench_step peers "$([[ -x "$dir/bench/cuda_peer" ]] || echo "bench/cuda_peer is not in $dir")" \
  "$dir/bench/cuda_peer" "${peer_args[@]}"; then
  note peers PASS "figures in peers.txt" $((SECONDS - start))
fi
start=$SECONDS
gemm_why=""
[[ -x "$dir/bench/cuda_gemm_peer" ]] || gemm_why="bench/cuda_gemm_peer is not in $dir"
[[ -z "$gemm_why" && $missing_blas -eq 1 ]] && gemm_why="cuBLASLt not found"
if bench_step gemm "$gemm_why" "$dir/bench/cuda_gemm_peer" "${gemm_args[@]}"; then
  if grep -q "GemmEx side not measured" "$out/gemm.txt"; then
    note gemm "NOT TESTED" "HAL vs cublasLt in gemm.txt; cublasGemmEx: cuBLAS not found" \
      $((SECONDS - start))
  else
    note gemm PASS "figures in gemm.txt" $((SECONDS - start))
  fi
fi
start=$SECONDS
attention_why=""
[[ -x "$dir/bench/attention" ]] || attention_why="bench/attention is not in $dir"
[[ -z "$attention_why" && $missing_nvrtc -eq 1 ]] && attention_why="NVRTC not found"
if bench_step attention "$attention_why" "$dir/bench/attention" "${attention_lengths[@]}" bf16 \
  "${attention_shape[@]}"; then
  # PyTorch's SDPA with the same shapes, in the time left of the cap.
  left=$((cap[attention] - (SECONDS - start)))
  python="$(command -v python3 || command -v python)"
  if [[ -z "$python" ]]; then
    note attention "NOT TESTED" "HAL in attention.txt; SDPA: no python3" $((SECONDS - start))
  elif ((left < 5)); then
    note attention TIMEOUT "the cap of ${cap[attention]} s before SDPA" $((SECONDS - start))
  else
    echo "== attention: PyTorch SDPA (${left} s left of the cap)"
    timeout -k 5 "$left" "$python" "$root/bench/python/attention_sdpa.py" \
      "${attention_lengths[@]}" "${sdpa_args[@]}" >"$out/attention_sdpa.txt" 2>&1
    status=$?
    cat "$out/attention_sdpa.txt"
    if ((status == 0)); then
      note attention PASS "HAL in attention.txt, SDPA in attention_sdpa.txt" $((SECONDS - start))
    elif ((status == 3)); then
      note attention "NOT TESTED" "HAL in attention.txt; SDPA $(head -1 "$out/attention_sdpa.txt")" \
        $((SECONDS - start))
    elif ((status == 124 || status == 137)); then
      note attention TIMEOUT "SDPA reached the cap of ${cap[attention]} s" $((SECONDS - start))
    else
      note attention FAIL "SDPA exit $status" $((SECONDS - start))
    fi
  fi
fi

# ---- summary -------------------------------------------------------------------
{
  echo
  printf '%-12s %-11s %5s  %s\n' step result secs detail
  for row in "${summary[@]}"; do
    IFS='|' read -r step result detail secs <<<"$row"
    printf '%-12s %-11s %5s  %s\n' "$step" "$result" "$secs" "$detail"
  done
  echo "results: $out/gpu-check.tar.gz"
} | tee "$out/summary.txt"
archive
if ((failed)); then exit 1; fi
if ((untested)); then exit 3; fi
exit 0
