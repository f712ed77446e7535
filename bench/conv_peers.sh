#!/usr/bin/env bash
# Convolution at ResNet-50's layer shapes: HAL's cpu plugin beside oneDNN
# called directly (bench/conv_peers.cpp, interleaved in one process) and
# PyTorch CPU (bench/python/conv_torch.py) in the same run, for each layout,
# dtype and batch asked; prints the joined table with speed = best peer's ms /
# HAL's ms (>= 0.95 is the goal of issue 34) and the machine's load before
# each configuration.
# Usage: bench/conv_peers.sh [BUILD_DIR] (env: BATCHES="8 32" LAYOUTS="nchw nhwc"
#        DTYPES="f32 bf16" REPS=5 BEST=1: each figure the fastest repetition, not the
#        median, for a machine other work shares)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/_build-rel}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for batch in ${BATCHES:-8 32}; do
  for layout in ${LAYOUTS:-nchw nhwc}; do
    for dtype in ${DTYPES:-f32 bf16}; do
      echo "# load before batch $batch $layout $dtype: $(cut -d' ' -f1-3 /proc/loadavg)"
      args=(--batch "$batch" --layout "$layout" --dtype "$dtype" --reps "${REPS:-5}")
      [[ -n "${BEST:-}" ]] && args+=(--best)
      HAL_PLUGINS=cpu "$build/bench/conv_peers" "${args[@]}" | grep '^conv ' >>"$tmp/hal"
      python3 "$root/bench/python/conv_torch.py" "${args[@]}" | grep '^torch ' >>"$tmp/torch"
    done
  done
done
python3 - "$tmp/hal" "$tmp/torch" <<'PY'
import sys
torch = {}
for line in open(sys.argv[2]):
    f = line.split()
    torch[tuple(f[1:6])] = float(f[6])
print(f"{'layout':6} {'dtype':5} {'batch':>5} {'shape':22} {'op':11} {'HAL ms':>9} "
      f"{'oneDNN ms':>9} {'torch ms':>9} {'speed':>6}")
for line in open(sys.argv[1]):
    f = line.split()
    key = tuple(f[1:6])
    hal, dnnl = float(f[6]), float(f[7])
    t = torch.get(key, float("nan"))
    best = min(dnnl, t)
    print(f"{f[1]:6} {f[2]:5} {f[3]:>5} {f[4]:22} {f[5]:11} {hal:9.2f} {dnnl:9.2f} {t:9.2f} "
          f"{best / hal:6.2f}{'' if best / hal >= 0.95 else '  <'}")
PY
