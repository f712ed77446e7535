#!/usr/bin/env python3
"""Under mpirun, a peer of the cpu plugin's MPI ranks fails mid-run: the
survivors must fail their collective and then exit, in bounded time.

    mpi_failed_peer.py MPIEXEC NP WORKER kill|stop

Rank 1 dies (kill: SIGKILL) or hangs (stop: SIGSTOP; a stopped process is a
peer that neither answers nor ends, as a rank on a lost host is). mpirun runs
with --enable-recovery, so it lets the survivors go on instead of killing
them itself. MPI_Finalize waits for every rank: a survivor whose plugin
called it unconditionally would hang at exit for good (issue 32). The
survivors' processes must all have ended within the bound; then the stopped
rank is killed so that mpirun ends too. Exit status 0 when they did.
"""
import os
import re
import select
import signal
import subprocess
import sys
import time

BOUND_S = 60  # the survivors' exit, from the start (their timeout is 2 s)


def ended(pid):
    """Whether process |pid| has exited (gone, or a zombie not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def main():
    mpiexec, np, worker, how = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    command = [mpiexec, "-np", str(np), "--allow-run-as-root", "--oversubscribe",
               "--bind-to", "none", "--enable-recovery"]
    for name in ("HAL_PLUGINS", "HAL_CPU_DEVICES", "HAL_COMM_SHM", "ASAN_OPTIONS",
                 "TSAN_OPTIONS", "LSAN_OPTIONS"):
        if name in os.environ:
            command += ["-x", name]
    command += [worker, "mpi", how, "1"]
    start = time.monotonic()
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           start_new_session=True)
    stream = job.stdout.fileno()
    output, pids = "", {}
    survivors_done = None
    while time.monotonic() - start < BOUND_S:
        chunk = b""
        if select.select([stream], [], [], 0.05)[0]:
            chunk = os.read(stream, 65536)
        if chunk:
            output += chunk.decode(errors="replace")
            for rank, pid in re.findall(r"collectives_worker: rank (\d+) pid (\d+)", output):
                pids[int(rank)] = int(pid)
        survivors = [r for r in range(np) if r != 1]
        if all(r in pids for r in survivors) and all(ended(pids[r]) for r in survivors):
            survivors_done = time.monotonic() - start
            break
        if job.poll() is not None and not chunk:
            break
    # The stopped (or any left) rank goes now, so that mpirun ends.
    for pid in pids.values():
        if not ended(pid):
            os.kill(pid, signal.SIGKILL)
    try:
        rest, _ = job.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        rest, _ = job.communicate()
    output += (rest or b"").decode(errors="replace")
    sys.stdout.write(output)
    saw = len(re.findall(r"rank \d+ saw HAL_ERROR_\w+ / HAL_ERROR_\w+", output))
    failures = re.findall(r"collectives_worker: (?!rank \d+ pid).*", output)
    if survivors_done is None:
        print(f"mpi_failed_peer: the survivors had not all exited after {BOUND_S} s "
              f"(pids {pids})")
        return 1
    if saw != np - 1 or failures:
        print(f"mpi_failed_peer: {saw} of {np - 1} survivors saw the failure; {failures}")
        return 1
    what = {"kill": "killed", "stop": "stopped"}[how]
    print(f"mpi_failed_peer: {np - 1} survivors of a {what} peer failed and exited "
          f"within {survivors_done:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
