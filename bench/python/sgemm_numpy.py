"""numpy's sgemm (float32 a @ b, its bundled OpenBLAS) timed the way bench/sgemm
times the others: one warm-up, then the median of up to 20 runs (3 at least,
fewer for the big shapes), GFLOP/s = 2mnk / median.

usage: python3 bench/python/sgemm_numpy.py [--threads 1,2] [--quick]
Each thread count runs in a fresh interpreter, since OpenBLAS reads
OPENBLAS_NUM_THREADS (and OMP_NUM_THREADS) once, when numpy is imported.
"""
import os
import subprocess
import sys
import time

SHAPES = [(256, 256, 256), (512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048),
          (4096, 4096, 4096), (4096, 4096, 1024)]


def child(threads, quick):
    import numpy as np

    shapes = SHAPES[:3] if quick else SHAPES
    rng = np.random.default_rng(42)
    print(f"\n== numpy {np.__version__}, {threads} thread(s)")
    print("| shape | library | ms median [min-max] | GFLOP/s |")
    print("|---|---|---|---|")
    for m, n, k in shapes:
        a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
        b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
        d = np.empty((m, n), np.float32)
        flops = 2.0 * m * n * k
        reps = int(min(20, max(3, 2e10 / flops)))
        np.matmul(a, b, out=d)
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            np.matmul(a, b, out=d)
            times.append(time.perf_counter() - start)
        times.sort()
        median = times[len(times) // 2]
        shape = f"{m}^3" if m == n == k else f"{m}x{n}x{k}"
        print(f"| {shape} | numpy matmul | {median * 1e3:.2f} [{times[0] * 1e3:.2f}-"
              f"{times[-1] * 1e3:.2f}] | {flops / median / 1e9:.1f} |")
        sys.stdout.flush()


def main():
    args = sys.argv[1:]
    quick = "--quick" in args
    if "--child" in args:
        child(int(args[args.index("--child") + 1]), quick)
        return
    threads = args[args.index("--threads") + 1] if "--threads" in args else "1,2"
    for t in threads.split(","):
        env = dict(os.environ, OPENBLAS_NUM_THREADS=t, OMP_NUM_THREADS=t)
        command = [sys.executable, __file__, "--child", t] + (["--quick"] if quick else [])
        subprocess.run(command, env=env, check=True)


if __name__ == "__main__":
    main()
