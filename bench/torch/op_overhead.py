#!/usr/bin/env python3
"""Per-op dispatch overhead of the hal device beside PyTorch's CPU eager, same process: small
tensors, where the op's arithmetic is negligible and the figure is what one eager call costs
(dispatcher, the binding's plan cache lookup, HAL's enqueue and the stream's execution).

  PYTHONPATH=<build>/python HAL_PLUGINS=cpu python3 bench/torch/op_overhead.py
    [--ops add mm add_ mul relu sum] [--size 8] [--calls 2000] [--rounds 7]

Each round runs every op `--calls` times on `cpu`, then on `hal`, in the same loop order
(interleaved rounds, so load drifts hit both). On hal the loop queues the calls and
synchronizes once at its end (asynchronous eager, as a training step runs); the figure is the
median over the rounds of microseconds per call. Not a test: no assertion on speed."""
import argparse
import statistics
import time

import torch

import hal_torch  # noqa: F401  (registers the hal device)


def make_op(name, device, size):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=g).to(device)
    b = torch.randn(size, size, generator=g).to(device)
    ops = {
        "add": lambda: torch.add(a, b),
        "add_": lambda: a.add_(b, alpha=1e-9),
        "add_1": lambda: a.add_(b),  # add_ without alpha: what alpha costs beyond it
        "mul_s": lambda: torch.mul(b, 1e-9),  # b times a host scalar
        "mul": lambda: torch.mul(a, b),
        "relu": lambda: torch.relu(a),
        "sum": lambda: a.sum(),
        "mm": lambda: torch.mm(a, b),
        "view": lambda: a.view(-1),
    }
    return ops[name]


def synchronize(device):
    if device == "hal":
        torch.hal.synchronize()


def time_calls(op, device, calls):
    start = time.perf_counter()
    for _ in range(calls):
        op()
    synchronize(device)
    return (time.perf_counter() - start) / calls * 1e6


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", nargs="*", default=["add", "mul", "add_", "relu", "sum", "mm",
                                                     "view"])
    parser.add_argument("--size", type=int, default=8, help="square tensors of size x size")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, "
          f"{args.size}x{args.size} f32, {args.calls} calls x {args.rounds} rounds")
    ops = {(n, d): make_op(n, d, args.size) for n in args.ops for d in ("cpu", "hal")}
    for (name, device), op in ops.items():  # warm-up: plans, caches, allocator
        time_calls(op, device, 50)
    samples = {key: [] for key in ops}
    for _ in range(args.rounds):
        for name in args.ops:
            for device in ("cpu", "hal"):
                samples[(name, device)].append(time_calls(ops[(name, device)], device,
                                                          args.calls))
    print(f"{'op':<6} {'cpu us/op':>10} {'hal us/op':>10} {'hal/cpu':>8}")
    for name in args.ops:
        cpu = statistics.median(samples[(name, "cpu")])
        hal = statistics.median(samples[(name, "hal")])
        print(f"{name:<6} {cpu:>10.2f} {hal:>10.2f} {hal / cpu:>7.2f}x", flush=True)


if __name__ == "__main__":
    main()
