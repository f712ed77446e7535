#!/usr/bin/env bash
# Runs the three benchmarks of an existing build tree and prints everything.
# Builds nothing. Usage: bench/run_all.sh BUILD_DIR [--json]
# Each program keeps its small defaults (a run takes well under a minute).
set -uo pipefail
if [[ $# -lt 1 || "$1" == "-h" || "$1" == "--help" ]]; then
  echo "usage: $0 BUILD_DIR [--json]   (runs BUILD_DIR/bench/{launch_latency,loader_overhead,copy_bandwidth})"
  exit 2
fi
bin="$1/bench"
shift
status=0
echo "# bench/run_all.sh: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(uname -srm), load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for prog in launch_latency loader_overhead copy_bandwidth; do
  echo
  echo "## $prog"
  if [[ ! -x "$bin/$prog" ]]; then
    echo "missing: $bin/$prog (build the bench first: cmake --build BUILD_DIR --target hal_bench)"
    status=1
    continue
  fi
  start=$(date +%s%N)
  "$bin/$prog" "$@"
  rc=$?
  end=$(date +%s%N)
  ms=$(((end - start) / 1000000))
  printf '# %s: exit %d, %d.%03d s\n' "$prog" "$rc" $((ms / 1000)) $((ms % 1000))
  ((rc == 0)) || status=1
done
exit $status
