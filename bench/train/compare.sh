#!/usr/bin/env bash
# Trains samples/train's model through HAL on cpu (1 device; 2 devices in one
# process; 2 MPI ranks) and the same model in PyTorch on CPU, with the same
# hyper-parameters, batches and initial weights, then prints one table
# (tokens/s, ratio to PyTorch, validation loss) and writes loss.svg and the
# per-op profile of the 1-device run. A benchmark, not a test: CI does not
# run it (it installs PyTorch).
#
#   bench/train/compare.sh [BUILD_DIR or INSTALL_PREFIX] [extra train arguments...]
#   STEPS=300 OUT=/tmp/bench-train bench/train/compare.sh _build-rel
#   OUT=/tmp/bench-train bench/train/compare.sh /opt/hal
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(cd "${1:-$root/_build-rel}" && pwd)"
shift $(($# > 0 ? 1 : 0))
out="${OUT:-$build/bench-train}"
steps="${STEPS:-300}"
mkdir -p "$out"
# A build tree and an install prefix both hold bin/train (cmake --install puts the samples
# there); TRAIN=path picks another binary.
train="${TRAIN:-$build/bin/train}"
[ -x "$train" ] || {
  echo "compare.sh: no $train: give a Release build tree (scripts/build.sh $build -DCMAKE_BUILD_TYPE=Release)" \
    "or an install prefix (cmake --install BUILD --prefix DIR installs bin/train), or TRAIN=path" >&2
  exit 2
}
common=(--steps "$steps" --eval-every 50 --quiet "$@")

echo "== HAL, 1 device (with the trace summary: the share of each op)"
HAL_PLUGINS=cpu HAL_CPU_DEVICES=1 HAL_TRACE_SUMMARY=1 "$train" "${common[@]}" --devices 1 \
  --log "$out/hal_1_device.jsonl" --label "HAL cpu, 1 device" --sample 300 \
  2> "$out/hal_1_device_ops.txt" | tee "$out/hal_1_device.txt"
echo "== HAL, 2 devices in one process"
HAL_PLUGINS=cpu HAL_CPU_DEVICES=2 "$train" "${common[@]}" --devices 2 \
  --log "$out/hal_2_devices.jsonl" --label "HAL cpu, 2 devices" | tee "$out/hal_2_devices.txt"
logs=("$out/hal_1_device.jsonl" "$out/hal_2_devices.jsonl")
if command -v mpirun > /dev/null; then
  echo "== HAL, 2 ranks under mpirun"
  HAL_PLUGINS=cpu HAL_CPU_DEVICES=1 mpirun -np 2 --allow-run-as-root --oversubscribe --bind-to none \
    -x HAL_PLUGINS -x HAL_CPU_DEVICES "$train" "${common[@]}" --mpi \
    --log "$out/hal_2_ranks.jsonl" --label "HAL cpu, 2 ranks" | tee "$out/hal_2_ranks.txt"
  logs+=("$out/hal_2_ranks.jsonl")
fi
echo "== PyTorch on CPU"
if "$root/bench/train/run_torch.sh" --steps "$steps" --eval-every 50 --threads "$(nproc)" \
    --log "$out/pytorch.jsonl" --label "PyTorch cpu" "$@" | tee "$out/pytorch.txt"; then
  logs+=("$out/pytorch.jsonl")
else
  echo "compare.sh: the PyTorch run failed; the table has HAL only" >&2
fi

python3 "$root/samples/train/plot_loss.py" --out "$out/loss.svg" "${logs[@]}"
python3 "$root/bench/train/summarize.py" "${logs[@]}"
echo "per-op profile of the 1-device run: $out/hal_1_device_ops.txt"
sed -n '/stream operations executed/,$p' "$out/hal_1_device_ops.txt" | head -24
echo "loss curves: $out/loss.svg"
