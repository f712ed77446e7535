#!/usr/bin/env python3
"""PyTorch CPU's batch norm at bench/batch_norm.cpp's ResNet-18 shapes, NCHW
f32, the peer of HAL's cpu plugin: aten.native_batch_norm in training (the
running statistics updated, momentum 0.1) and aten.native_batch_norm_backward
(training, grad_input, grad_weight and grad_bias), as autograd calls them.
Milliseconds are the median of the repetitions after a warm-up (--best: the
fastest); one line per shape and op: "torch <batch> <shape> <op> ms".

Usage: batch_norm_torch.py [--batch 16] [--reps 10] [--best]
"""
import argparse
import statistics
import time

import torch

SHAPES = [("c64_112", 64, 112), ("c64_56", 64, 56), ("c128_28", 128, 28),
          ("c256_14", 256, 14), ("c512_7", 512, 7)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--best", action="store_true", help="the fastest repetition")
    args = parser.parse_args()
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{'fastest' if args.best else 'median'} ms of {args.reps} after a warm-up")
    for name, c, hw in SHAPES:
        count = args.batch * c * hw * hw
        x = (torch.arange(count, dtype=torch.float32) % 7 + 1).mul_(0.25)
        x = x.reshape(args.batch, c, hw, hw)
        gy = x * 0.5
        weight, bias = torch.ones(c), torch.zeros(c)
        run_mean, run_var = torch.zeros(c), torch.ones(c)
        _, save_mean, save_invstd = torch.ops.aten.native_batch_norm(
            x, weight, bias, run_mean, run_var, True, 0.1, 1e-5)
        ops = {
            "forward": lambda: torch.ops.aten.native_batch_norm(
                x, weight, bias, run_mean, run_var, True, 0.1, 1e-5),
            "backward": lambda: torch.ops.aten.native_batch_norm_backward(
                gy, x, weight, run_mean, run_var, save_mean, save_invstd, True, 1e-5,
                [True, True, True]),
        }
        for op, call in ops.items():
            samples = []
            with torch.no_grad():
                for rep in range(args.reps + 1):
                    start = time.perf_counter()
                    call()
                    if rep > 0:
                        samples.append((time.perf_counter() - start) * 1e3)
            ms = min(samples) if args.best else statistics.median(samples)
            print(f"torch {args.batch} {name} {op} {ms:.4f}", flush=True)


if __name__ == "__main__":
    main()
