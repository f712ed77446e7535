#!/usr/bin/env python3
"""PyTorch's CPU decode attention beside bench/paged_attention: the same shapes (one new token
per sequence, batch, heads, kv heads, head dim, cache dtype), as a framework without a paged
kernel runs it: the sequence's keys and values gathered from a block cache through its block
table (index_select), then F.scaled_dot_product_attention over the dense copy (GQA through
enable_gqa). Prints the SDPA time alone (PyTorch's best case: the cache already dense) and the
gather + SDPA time, and read GB/s over the same byte count bench/paged_attention uses.

  python3 bench/python/paged_attention_torch.py 1024 8192 32768 [--batch 1] [--heads 32]
    [--kv 8] [--dim 128] [--dtype bf16] [--block 16] [--threads 2] [--mla]

--mla: FlashMLA's shape as bench/paged_attention's mla (one latent head of 576, the values its
first 512 dims, blocks of 64, 16 heads unless --heads says): the read bytes are the latent
cache's once."""
import argparse
import time

import torch
import torch.nn.functional as F


def median_ms(fn, reps):
    """Median wall and process-CPU milliseconds (the CPU time counts every thread: a per-core
    rate that a machine shared with other jobs does not distort, as bench/paged_attention's)."""
    fn()  # warm-up
    wall, cpu = [], []
    for _ in range(reps):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - start) * 1e3)
        cpu.append((time.process_time() - start_cpu) * 1e3)
    wall.sort()
    cpu.sort()
    return wall[len(wall) // 2], cpu[len(cpu) // 2]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("lens", type=int, nargs="*", default=[1024, 8192, 32768])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=None)
    parser.add_argument("--kv", type=int, default=8)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--block", type=int, default=16)
    parser.add_argument("--dtype", default="bf16", choices=["f32", "f16", "bf16"])
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--mla", action="store_true")
    args = parser.parse_args()
    dim_v = args.dim
    if args.mla:
        args.kv, args.dim, dim_v, args.block = 1, 576, 512, 64
        args.heads = args.heads or 16
    args.heads = args.heads or 32
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    print(f"torch {torch.__version__} on {torch.get_num_threads()} threads: decode, batch "
          f"{args.batch}, heads {args.heads}, kv heads {args.kv}, dim {args.dim}/{dim_v}, "
          f"{args.dtype}{' (MLA)' if args.mla else ''}")
    print(f"{'len':>8} {'sdpa ms':>10} {'GB/s':>8} {'GB/cpu-s':>9} {'gather+sdpa ms':>15} "
          f"{'GB/s':>8} {'GB/cpu-s':>9}")
    gen = torch.Generator().manual_seed(7)
    for length in args.lens:
        blocks = (length + args.block - 1) // args.block
        num_blocks = args.batch * blocks
        shape = (num_blocks, args.block, args.kv, args.dim)
        k_cache = (torch.rand(shape, generator=gen) - 0.5).to(dtype)
        v_cache = (k_cache[..., :dim_v] if args.mla else
                   (torch.rand(shape, generator=gen) - 0.5).to(dtype))
        table = torch.randperm(num_blocks, generator=gen).view(args.batch, blocks)
        q = (torch.rand(args.batch, args.heads, 1, args.dim, generator=gen) - 0.5).to(dtype)

        def gather(cache):
            rows = cache.index_select(0, table.reshape(-1))  # [batch * blocks, block, kv, dim]
            rows = rows.reshape(args.batch, blocks * args.block, args.kv, -1)[:, :length]
            return rows.transpose(1, 2)  # [batch, kv, len, dim]

        k, v = gather(k_cache).contiguous(), gather(v_cache).contiguous()
        gqa = args.heads != args.kv
        sdpa = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)
        both = lambda: F.scaled_dot_product_attention(q, gather(k_cache), gather(v_cache),
                                                      enable_gqa=gqa)
        reps = max(3, min(50, int(200e6 / (k.numel() * k.element_size() * 2))))
        read = args.batch * length * args.kv * (args.dim + (0 if args.mla else dim_v)) * \
            k.element_size()
        with torch.no_grad():
            sdpa_ms, sdpa_cpu = median_ms(sdpa, reps)
            both_ms, both_cpu = median_ms(both, reps)
        print(f"{length:8d} {sdpa_ms:10.3f} {read / sdpa_ms / 1e6:8.2f} "
              f"{read / sdpa_cpu / 1e6:9.2f} {both_ms:15.3f} {read / both_ms / 1e6:8.2f} "
              f"{read / both_cpu / 1e6:9.2f}")


if __name__ == "__main__":
    main()
