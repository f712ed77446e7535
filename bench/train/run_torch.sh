#!/usr/bin/env bash
# Installs PyTorch when it is missing and runs bench/train/train_torch.py with
# the given arguments. Benchmarks only: CI never installs PyTorch.
#
# What the install downloads: PyPI's torch wheel for Linux x86-64 pulls the
# CUDA libraries with it (nvidia-* wheels), about 2.8 GB in all, although this
# benchmark runs on the CPU. TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# installs PyTorch's CPU-only build instead (about 200 MB).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if ! python3 -c "import torch" 2> /dev/null; then
  index=()
  if [[ -n "${TORCH_INDEX_URL:-}" ]]; then
    index=(--index-url "$TORCH_INDEX_URL")
    echo "run_torch.sh: installing torch from $TORCH_INDEX_URL" >&2
  else
    echo "run_torch.sh: installing torch from PyPI: about 2.8 GB with its CUDA libraries" \
      "(TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu: the CPU build, about 200 MB)" >&2
  fi
  # pip's own progress bars show the download (no --quiet).
  python3 -m pip install "${index[@]}" torch ||
    python3 -m pip install --break-system-packages "${index[@]}" torch || {
    echo "run_torch.sh: cannot install torch" >&2
    exit 1
  }
fi
exec python3 "$here/train_torch.py" "$@"
