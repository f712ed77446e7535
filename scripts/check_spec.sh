#!/usr/bin/env bash
# Checks that SPEC.md's function reference and the public headers agree:
# every function declared in api/ has its SPEC entry with the same return type
# and parameters, and every SPEC entry has its function (scripts/check_spec.py).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
exec python3 "$root/scripts/check_spec.py" --spec "$root/SPEC.md" --include "$root/api" "$@"
