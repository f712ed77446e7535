#!/usr/bin/env python3
"""@hal.kernel against the same kernels written in the dialect by hand: the tiled matmul
(16x16 shared tiles, two barriers per k step) and a flash-attention forward (one work-item
per query row, keys and values staged through shared memory, online softmax), on every device
that compiles dialect source (cpu; opencl when PoCL is there). Best of a few runs each,
GFLOP/s and the ratio Python/hand (goal: within 1.2x, i.e. ratio of times <= 1.2).

  PYTHONPATH=<build>/python HAL_PLUGINS=cpu,opencl python3 bench/python/kernel_vs_dialect.py
    [--size 512] [--seq 512] [--reps 5]
"""
import argparse
import os
import sys
import time

import numpy as np

import hal

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "samples", "python"))
import kernels_in_python as py  # noqa: E402


def best_seconds(run, stream, reps):
    run()
    stream.synchronize()
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        run()
        stream.synchronize()
        best = min(best, time.perf_counter() - start)
    return best


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    n = args.size
    print(f"{'device':<28} {'kernel':<22} {'python ms':>10} {'hand ms':>10} {'GFLOP/s':>9} {'ratio':>7}")
    for device in hal.devices():
        name = f"{device.index}: {device.properties.name}"[:28]
        try:
            hand = hal.Module(device, source=py.HAND_WRITTEN)
            py.matmul.compile(device)
        except hal.Error as error:
            print(f"{name:<28} skipped: {error}")
            continue
        stream = hal.Stream(device)
        a = hal.to_device(rng.random((n, n), dtype=np.float32), device)
        b = hal.to_device(rng.random((n, n), dtype=np.float32), device)
        c = hal.empty((n, n), np.float32, device)
        grid, block = ((n + 15) // 16, (n + 15) // 16), (16, 16)
        t_py = best_seconds(lambda: py.matmul.launch(grid, block, a, b, c, n, n, n, stream=stream),
                            stream, args.reps)
        hand_matmul = hand.kernel("matmul_hand")
        t_hand = best_seconds(lambda: hand_matmul.launch(grid, block, a, b, c, n, n, n,
                                                         stream=stream), stream, args.reps)
        print(f"{name:<28} {'matmul ' + str(n):<22} {t_py * 1e3:>10.2f} {t_hand * 1e3:>10.2f} "
              f"{2 * n ** 3 / t_py / 1e9:>9.2f} {t_py / t_hand:>6.2f}x")
        s, d = args.seq, 64
        q, k, v = (hal.to_device(rng.standard_normal((s, d), dtype=np.float32), device)
                   for _ in range(3))
        out = hal.empty((s, d), np.float32, device)
        scale = float(1 / np.sqrt(d))
        block = 64
        grid = (s + block - 1) // block
        t_py = best_seconds(lambda: py.attention.launch(grid, block, q, k, v, out, s, scale,
                                                        stream=stream), stream, args.reps)
        hand_attention = hand.kernel("attention_hand")
        t_hand = best_seconds(lambda: hand_attention.launch(grid, block, q, k, v, out, s, scale,
                                                            stream=stream), stream, args.reps)
        flops = 4.0 * s * s * d
        print(f"{name:<28} {'attention s=' + str(s):<22} {t_py * 1e3:>10.2f} {t_hand * 1e3:>10.2f} "
              f"{flops / t_py / 1e9:>9.2f} {t_py / t_hand:>6.2f}x")


if __name__ == "__main__":
    main()
