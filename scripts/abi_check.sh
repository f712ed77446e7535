#!/usr/bin/env bash
# Checks the public headers (and libhal's exports) against the committed ABI
# baseline: scripts/abi_check.sh [--library LIBHAL] [--include DIR] [--baseline FILE]
# Additions pass; anything removed, moved, resized or renumbered fails.
# abi/README.md explains the table and how the baseline moves at a release.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
include="$root/api"
baseline="$root/abi/baseline.txt"
library=""
while (($#)); do
  case "$1" in
    --library) library="$2"; shift 2 ;;
    --include) include="$2"; shift 2 ;;
    --baseline) baseline="$2"; shift 2 ;;
    *) echo "usage: $0 [--library LIBHAL] [--include DIR] [--baseline FILE]" >&2; exit 2 ;;
  esac
done
cc="$(command -v clang-14 || command -v clang)"
current="$(mktemp)"
filtered="$(mktemp)"
trap 'rm -f "$current" "$filtered"' EXIT
python3 "$root/abi/abi_table.py" generate --cc "$cc" --include "$include" \
  ${library:+--library "$library"} >"$current"
if [[ -z "$library" ]]; then
  # Without a library there is nothing to compare the exports with.
  grep -v '^export ' "$baseline" >"$filtered"
  baseline="$filtered"
fi
python3 "$root/abi/abi_table.py" compare "$baseline" "$current"
