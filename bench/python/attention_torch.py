#!/usr/bin/env python3
"""PyTorch's CPU attention beside bench/attention: the same shapes (batch,
heads, head dim, causal bottom-right = top-left for s_q == s_k), f32, the
best of a few runs of forward and of forward+backward, and the unfused
softmax(QK^T)V composed from torch.matmul (the score matrix materialised)
as the second peer. GFLOP/s counts the causal half, as bench/attention does.

  python3 bench/python/attention_torch.py 512 1024 2048 4096 [--dim 64] [--heads 4]
    [--batch 1] [--threads 2]

PyTorch comes from bench/train/run_torch.sh's install (benchmarks only)."""
import argparse
import time

import torch


def best_ms(fn, reps):
    fn()  # warm-up
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        best = min(best, (time.perf_counter() - start) * 1e3)
    return best


def unfused(q, k, v):
    scale = q.shape[-1] ** -0.5
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    s = q.shape[-2]
    mask = torch.ones(s, s, dtype=torch.bool).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("lengths", nargs="*", type=int, default=[512, 1024])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {args.threads} threads, batch {args.batch}, "
          f"heads {args.heads}, head dim {args.dim}, causal, f32")
    print(f"{'seq':>6} {'sdpa fwd ms':>12} {'sdpa f+b ms':>12} {'sdpa bwd ms':>12} "
          f"{'unfused fwd':>12} {'unfused f+b':>12} {'fwd GF/s':>9} {'bwd GF/s':>9}")
    for s in args.lengths:
        shape = (args.batch, args.heads, s, args.dim)
        q, k, v = (torch.randn(shape, requires_grad=True) for _ in range(3))
        grad = torch.randn(shape)
        reps = 5 if s <= 1024 else 3

        def sdpa_fwd():
            with torch.no_grad():
                torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

        def sdpa_both():
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            out.backward(grad)

        def unfused_fwd():
            with torch.no_grad():
                unfused(q, k, v)

        def unfused_both():
            unfused(q, k, v).backward(grad)

        fwd = best_ms(sdpa_fwd, reps)
        both = best_ms(sdpa_both, reps)
        u_fwd = best_ms(unfused_fwd, reps) if s <= 4096 else float("nan")
        u_both = best_ms(unfused_both, reps) if s <= 4096 else float("nan")
        flops = 2.0 * args.batch * args.heads * args.dim * s * s / 2.0  # one causal QK^T
        bwd = both - fwd
        print(f"{s:>6} {fwd:>12.2f} {both:>12.2f} {bwd:>12.2f} {u_fwd:>12.2f} {u_both:>12.2f} "
              f"{2 * flops / fwd / 1e6:>9.1f} {5 * flops / bwd / 1e6:>9.1f}")


if __name__ == "__main__":
    main()
