#!/usr/bin/env python3
"""all_reduce over torch.distributed with the `hal` backend (hal tensors, one HAL device per
rank) beside `gloo` (CPU tensors), two ranks in two processes on this machine: the median time
of an all_reduce (SUM, f32) per size and its bus bandwidth (2 (n - 1) / n x bytes / time, NCCL's
convention), and the time of one all_reduce of a GPT's gradients (samples/torch/gpt.py's
default config, as DDP's buckets would reduce them, 25 MiB each).

  PYTHONPATH=<build>/python HAL_PLUGINS=cpu HAL_CPU_DEVICES=2 \\
    python3 bench/torch/ddp_allreduce.py [--sizes 4K,256K,4M,32M] [--reps 10] [--port 29533]

Not a test: no assertion on speed."""
import argparse
import datetime
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def worker(rank, world, backend, port, sizes, reps, gpt_bytes, results):
    import hal_torch  # noqa: F401  (registers the hal device and backend)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    device = f"hal:{rank}" if backend == "hal" else "cpu"
    if backend == "hal":
        torch.hal.set_device(rank)
    dist.init_process_group(backend, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))

    def sync():
        if backend == "hal":
            torch.hal.synchronize()

    def median_seconds(tensors):
        for t in tensors:  # warm-up (connections, plans)
            dist.all_reduce(t)
        sync()
        dist.barrier()
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            for t in tensors:
                dist.all_reduce(t)
            sync()
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    out = {}
    for size in sizes:
        out[size] = median_seconds([torch.ones(size // 4, device=device)])
    bucket = 25 << 20
    buckets = [torch.ones(min(bucket, gpt_bytes - b) // 4, device=device)
               for b in range(0, gpt_bytes, bucket)]
    out["gpt"] = median_seconds(buckets)
    dist.destroy_process_group()
    if rank == 0:
        results.put(out)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="4K,256K,4M,32M")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--port", type=int, default=29533)
    parser.add_argument("--backends", default="hal,gloo")
    args = parser.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "samples", "torch"))
    from gpt import GPT, GPTConfig
    gpt_bytes = 4 * sum(p.numel() for p in GPT(GPTConfig()).parameters())
    ctx = mp.get_context("spawn")
    table = {}
    for i, backend in enumerate(args.backends.split(",")):
        results = ctx.Queue()
        procs = [ctx.Process(target=worker, args=(r, 2, backend, args.port + i, sizes, args.reps,
                                                  gpt_bytes, results)) for r in range(2)]
        for p in procs:
            p.start()
        table[backend] = results.get(timeout=600)
        for p in procs:
            p.join()
    backends = list(table)
    print("all_reduce SUM f32, 2 ranks: median ms (bus GB/s)")
    print(f"{'bytes':>12} " + " ".join(f"{b:>20}" for b in backends))
    for size in sizes:
        cells = [f"{1e3 * table[b][size]:9.3f} ({size / table[b][size] / 1e9:6.2f})"
                 for b in backends]
        print(f"{size:>12} " + " ".join(f"{c:>20}" for c in cells))
    cells = [f"{1e3 * table[b]['gpt']:9.3f} ms" for b in backends]
    print(f"{'GPT grads':>12} " + " ".join(f"{c:>20}" for c in cells) +
          f"   ({gpt_bytes / 2**20:.1f} MiB in 25 MiB buckets)")


if __name__ == "__main__":
    main()
