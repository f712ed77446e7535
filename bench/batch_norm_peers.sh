#!/usr/bin/env bash
# Batch norm at ResNet-18's shapes, NCHW f32: HAL's cpu plugin
# (bench/batch_norm.cpp), the same bench on an earlier build of the plugin
# when BEFORE_PLUGIN_DIR names a folder holding its libhal_plugin_cpu.so
# (found first through HAL_PLUGIN_PATH: the oneDNN kernels before cpu.native
# served batch norm), and PyTorch CPU (bench/python/batch_norm_torch.py), in
# the same run; speed = torch ms / HAL ms (>= 1.0 is issue 34's goal), with
# the load average before each batch.
# Usage: bench/batch_norm_peers.sh [BUILD_DIR] (env: BATCHES="16 32" REPS=10 BEST=1
#        BEFORE_PLUGIN_DIR=...). OMP_WAIT_POLICY defaults to PASSIVE (as bench/torch's
#        scripts run): PyTorch's and oneDNN's OpenMP teams otherwise spin at their barriers,
#        and on a machine other work shares their times swung 10-100x run to run.
set -euo pipefail
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/_build-rel}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
touch "$tmp/before"
for batch in ${BATCHES:-16 32}; do
  echo "# load before batch $batch: $(cut -d' ' -f1-3 /proc/loadavg)"
  args=(--batch "$batch" --reps "${REPS:-10}")
  [[ -n "${BEST:-}" ]] && args+=(--best)
  HAL_PLUGINS=cpu "$build/bench/batch_norm" "${args[@]}" | grep '^hal ' >>"$tmp/hal"
  if [[ -n "${BEFORE_PLUGIN_DIR:-}" ]]; then
    HAL_PLUGINS=cpu HAL_PLUGIN_PATH="$BEFORE_PLUGIN_DIR" "$build/bench/batch_norm" "${args[@]}" |
      grep '^hal ' >>"$tmp/before"
  fi
  python3 "$root/bench/python/batch_norm_torch.py" "${args[@]}" | grep '^torch ' >>"$tmp/torch"
done
python3 - "$tmp/hal" "$tmp/before" "$tmp/torch" <<'PY'
import sys
def table(path, col):
    out = {}
    for line in open(path):
        f = line.split()
        out[tuple(f[1:4])] = float(f[col])
    return out
before, torch = table(sys.argv[2], 4), table(sys.argv[3], 4)
print(f"{'batch':>5} {'shape':8} {'op':8} {'HAL ms':>8} {'before ms':>9} {'torch ms':>8} "
      f"{'speed':>6}  implementation")
for line in open(sys.argv[1]):
    f = line.split()
    key, hal = tuple(f[1:4]), float(f[4])
    t, b = torch.get(key, float("nan")), before.get(key, float("nan"))
    print(f"{f[1]:>5} {f[2]:8} {f[3]:8} {hal:8.3f} {b:9.3f} {t:8.3f} {t / hal:6.2f}  {f[5]}")
PY
