#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention beside bench/attention on the same
GPU: the same shapes (batch, heads, head dim, causal), bf16 by default,
forward and forward+backward timed with CUDA events, the median of a few
runs. GFLOP/s counts the causal half, as bench/attention does (forward 2
matmuls, backward 5: FlashAttention's accounting).

  python3 bench/python/attention_sdpa.py 1024 2048 [--dim 128] [--heads 16]
    [--batch 1] [--dtype bf16|f16|f32] [--reps 5] [--device cuda|cpu]

scripts/gpu_check.sh runs it after bench/attention when torch imports there.
Exit status 3 (and one line saying why) when torch is absent or has no CUDA
device, so the caller can report "not tested"; --device cpu (the check's dry
run) runs the same path on the CPU with wall-clock timing."""
import argparse
import statistics
import sys
import time


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("lengths", nargs="*", type=int, default=[1024, 2048])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--dtype", choices=["bf16", "f16", "f32"], default="bf16")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    args = parser.parse_args()
    try:
        import torch
    except ImportError as error:  # the caller reports "not tested"
        print(f"not tested: torch does not import ({error})")
        return 3
    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"not tested: torch {torch.__version__} sees no CUDA device")
        return 3
    device = torch.device(args.device)
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[args.dtype]
    torch.manual_seed(0)
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    print(f"torch {torch.__version__} SDPA on {name}: batch {args.batch}, heads {args.heads}, "
          f"head dim {args.dim}, causal, {args.dtype}, median of {args.reps}")
    print(f"{'seq':>6} {'fwd ms':>10} {'bwd ms':>10} {'fwd GF/s':>10} {'bwd GF/s':>10}")

    def timed_ms(fn):
        fn()  # warm-up (kernel selection, allocator)
        samples = []
        for _ in range(args.reps):
            if args.device == "cuda":
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                samples.append(start.elapsed_time(end))
            else:
                start = time.perf_counter()
                fn()
                samples.append((time.perf_counter() - start) * 1e3)
        return statistics.median(samples)

    sdpa = torch.nn.functional.scaled_dot_product_attention
    for s in args.lengths:
        shape = (args.batch, args.heads, s, args.dim)
        q, k, v = (torch.randn(shape, device=device, dtype=dtype, requires_grad=True)
                   for _ in range(3))
        grad = torch.randn(shape, device=device, dtype=dtype)

        def forward():
            with torch.no_grad():
                sdpa(q, k, v, is_causal=True)

        def forward_backward():
            out = sdpa(q, k, v, is_causal=True)
            out.backward(grad)

        fwd = timed_ms(forward)
        both = timed_ms(forward_backward)
        bwd = max(both - fwd, 1e-9)
        flops = 4.0 * args.batch * args.heads * s * s * args.dim / 2  # causal half
        print(f"{s:>6} {fwd:>10.3f} {bwd:>10.3f} {flops / fwd / 1e6:>10.1f} "
              f"{2.5 * flops / bwd / 1e6:>10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
