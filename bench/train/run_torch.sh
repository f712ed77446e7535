#!/usr/bin/env bash
# Installs PyTorch (CPU, from PyPI) when it is missing and runs
# bench/train/train_torch.py with the given arguments. Benchmarks only: CI
# never installs PyTorch.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if ! python3 -c "import torch" 2> /dev/null; then
  echo "run_torch.sh: installing torch from PyPI (a few hundred MB)" >&2
  python3 -m pip install --quiet torch || pip install --quiet --break-system-packages torch || {
    echo "run_torch.sh: cannot install torch" >&2
    exit 1
  }
fi
exec python3 "$here/train_torch.py" "$@"
