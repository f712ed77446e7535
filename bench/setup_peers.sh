#!/usr/bin/env bash
# Installs the peers the benchmarks compare HAL with, which CI does not need:
# OpenBLAS and BLIS (dlopened by bench/sgemm), numpy for
# bench/python/sgemm_numpy.py, and with --torch PyTorch on the CPU (the
# attention peer) and scikit-learn (its bundled 8x8 digits train
# bench/train/digits_resnet.py). Debian 12, as root, idempotent. Usage:
#   bench/setup_peers.sh [--torch]
set -euo pipefail
with_torch=0
for arg in "$@"; do
  case "$arg" in
    --torch) with_torch=1 ;;
    -h | --help)
      sed -n '2,7p' "$0"
      exit 0
      ;;
    *)
      echo "setup_peers: unknown argument $arg" >&2
      exit 2
      ;;
  esac
done

packages=(libopenblas0-pthread libblis4-pthread)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup_peers: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
fi

python_packages=(numpy)
((with_torch)) && python_packages+=(torch scikit-learn:sklearn)
for entry in "${python_packages[@]}"; do
  p="${entry%%:*}"       # the pip name
  module="${entry##*:}"  # the import name (the pip name unless given after a colon)
  python3 -c "import $module" 2>/dev/null && continue
  echo "setup_peers: pip installing $p"
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
    --break-system-packages "$p" </dev/null
done
echo "setup_peers: done (OpenBLAS: $(ldconfig -p | grep -c 'libopenblas.so.0 '), BLIS: $(ldconfig -p | grep -c 'libblis.so.4 '))"
