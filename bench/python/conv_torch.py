#!/usr/bin/env python3
"""PyTorch CPU's convolution forward, backward data and backward weights at
bench/conv_peers.cpp's ResNet-50 layer shapes, on the same layouts and
dtypes (NHWC: torch.channels_last), the peer of HAL's cpu plugin and of
oneDNN called directly. The backwards are aten.convolution_backward with
one output of its mask each, as autograd calls it. Milliseconds are the
median of the repetitions after one warm-up (--best: the fastest); one line per shape and op:
"torch <layout> <dtype> <batch> <shape> <op> ms".

Usage: conv_torch.py [--batch 8] [--reps 5] [--layout nchw|nhwc] [--dtype f32|bf16] [--best]
"""
import argparse
import statistics
import time

import torch

SHAPES = [  # name, input channels, spatial size, output channels, kernel, stride
    ("conv1_7x7s2_3-64_224", 3, 224, 64, 7, 2),
    ("res2_1x1_256-64_56", 256, 56, 64, 1, 1),
    ("res2_3x3_64-64_56", 64, 56, 64, 3, 1),
    ("res3_3x3_128-128_28", 128, 28, 128, 3, 1),
    ("res4_3x3_256-256_14", 256, 14, 256, 3, 1),
    ("res5_1x1_512-2048_7", 512, 7, 2048, 1, 1),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--layout", choices=["nchw", "nhwc"], default="nchw")
    parser.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    parser.add_argument("--best", action="store_true", help="the fastest repetition")
    args = parser.parse_args()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    memory_format = torch.channels_last if args.layout == "nhwc" else torch.contiguous_format
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"{'fastest' if args.best else 'median'} ms of {args.reps} after a warm-up")
    for name, c, hw, k, r, stride in SHAPES:
        pad = r // 2
        x = torch.full((args.batch, c, hw, hw), 0.01, dtype=dtype).to(memory_format=memory_format)
        w = torch.full((k, c, r, r), 0.01, dtype=dtype).to(memory_format=memory_format)
        y = torch.nn.functional.conv2d(x, w, None, stride, pad)
        gy = torch.full_like(y, 0.01).to(memory_format=memory_format)
        ops = {
            "forward": lambda: torch.nn.functional.conv2d(x, w, None, stride, pad),
            "bwd-data": lambda: torch.ops.aten.convolution_backward(
                gy, x, w, None, [stride, stride], [pad, pad], [1, 1], False, [0, 0], 1,
                [True, False, False]),
            "bwd-weights": lambda: torch.ops.aten.convolution_backward(
                gy, x, w, None, [stride, stride], [pad, pad], [1, 1], False, [0, 0], 1,
                [False, True, False]),
        }
        for op, call in ops.items():
            samples = []
            with torch.no_grad():
                for rep in range(args.reps + 1):
                    start = time.perf_counter()
                    call()
                    if rep > 0:
                        samples.append((time.perf_counter() - start) * 1e3)
            print(f"torch {args.layout} {args.dtype} {args.batch} {name} {op} "
                  f"{(min if args.best else statistics.median)(samples):.3f}", flush=True)


if __name__ == "__main__":
    main()
