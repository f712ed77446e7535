#!/usr/bin/env python3
"""DistributedDataParallel training steps on two ranks (two processes on this machine) with the
`hal` backend (the model on hal:<rank>) beside `gloo` (the model on PyTorch's CPU): the same
GPT (samples/torch/gpt.py), the same initial weights and per-rank batches, AdamW. Per backend,
the median over the timed steps of

- step: one DDP training step as users run it (forward, backward with DDP's bucketed gradient
  all_reduce overlapping it, optimizer step), until both ranks are done (the device
  synchronized, then a barrier);
- compute: the same step under ``no_sync()`` (no all_reduce at all), until both ranks are done
  (so a rank that ran slower than the other counts in both columns alike);
- backward: when ``loss.backward()`` returned to the host in the DDP step (the host queues
  what follows while the device computes; a backend that blocks the host until the buckets'
  all_reduces are done makes it as long as the step);
- all_reduce: the time of the step's gradient all_reduce alone: a comm hook runs each DDP bucket's
  all_reduce by itself (the device synchronized before it, the Work waited for and the device
  synchronized after it) and sums the bucket times, in separate steps from those above, since
  the hook's waits take the overlap away;
- exposed: step - compute, what the all_reduce adds to a step after overlap.

The compute differs between the backends (HAL's cpu plugin against PyTorch CPU eager); the
all_reduce and exposed columns are the backends' own. Both backends' losses are printed: the
same model on two ranks gives the same losses (to float32 rounding).

  PYTHONPATH=<build>/python HAL_PLUGINS=cpu HAL_CPU_DEVICES=2 HAL_TORCH_FALLBACK=silent \\
    OMP_WAIT_POLICY=PASSIVE python3 bench/torch/ddp_step.py [--steps 10] [--warmup 2] \\
    [--layers 4] [--width 128] [--context 128] [--batch 8] [--rounds 2] [--threads 1]
    [--bucket-view]

Within a round the three modes' steps interleave (one of each in turn); rounds alternate hal
and gloo (each a fresh pair of processes). Not a test: no assertion on speed.
"""
import argparse
import copy
import datetime
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "samples", "torch"))


class HookTimer:
    """The comm hook's state: each bucket's all_reduce run alone, timed."""

    def __init__(self, sync):
        self.sync = sync
        self.seconds = 0.0
        self.buckets = 0


def timed_allreduce_hook(state: HookTimer, bucket):
    buffer = bucket.buffer()
    state.sync()
    start = time.perf_counter()
    dist.all_reduce(buffer, async_op=True).wait()
    state.sync()
    state.seconds += time.perf_counter() - start
    state.buckets += 1
    buffer.div_(dist.get_world_size())
    future = torch.futures.Future()
    future.set_result(buffer)
    return future


def worker(rank, world, backend, port, args, results):
    import hal_torch  # noqa: F401  (registers the hal device and backend)
    from gpt import GPT, GPTConfig, batches, corpus
    torch.set_num_threads(args.threads)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    device = f"hal:{rank}" if backend == "hal" else "cpu"
    if backend == "hal":
        torch.hal.set_device(rank)
    dist.init_process_group(backend, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=300))

    def sync():
        if backend == "hal":
            torch.hal.synchronize()

    torch.manual_seed(0)
    config = GPTConfig(layers=args.layers, width=args.width, heads=4, context=args.context)
    base = GPT(config)
    params = sum(p.numel() for p in base.parameters())
    text = corpus()
    modes = ("step", "compute", "allreduce")

    def make(mode: str):
        """A fresh DDP model, its optimizer, hook timer and batches (the same in every mode)."""
        model = copy.deepcopy(base).to(device)
        ddp = torch.nn.parallel.DistributedDataParallel(
            model, gradient_as_bucket_view=args.bucket_view)
        timer = HookTimer(sync)
        if mode == "allreduce":
            ddp.register_comm_hook(timer, timed_allreduce_hook)
        opt = model.optimizer(lr=1e-3, weight_decay=0.1, fused=True)
        data = batches(text, config.context, args.batch * world, torch.Generator().manual_seed(0))
        return {"ddp": ddp, "opt": opt, "timer": timer, "data": data, "times": [], "comm": [],
                "backward": [], "loss": None}

    def one_step(mode: str, m: dict, timed: bool) -> None:
        ddp, opt, timer = m["ddp"], m["opt"], m["timer"]
        x, y = next(m["data"])
        x = x[rank * args.batch:(rank + 1) * args.batch].to(device)
        y = y[rank * args.batch:(rank + 1) * args.batch].to(device)
        sync()
        dist.barrier()
        timer.seconds, timer.buckets = 0.0, 0
        start = time.perf_counter()
        if mode == "compute":
            with ddp.no_sync():
                _, loss = ddp(x, y)
                loss.backward()
        else:
            _, loss = ddp(x, y)
            loss.backward()
        backward_at = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        dist.barrier()  # both ranks done: a rank slower than the other counts in every mode
        if timed:
            m["times"].append(time.perf_counter() - start)
            m["comm"].append(timer.seconds)
            m["backward"].append(backward_at - start)
        m["loss"] = loss

    # The modes' steps interleave, so a change of the machine's load shows in all of them.
    state = {mode: make(mode) for mode in modes}
    for step in range(args.warmup + args.steps):
        for mode in modes:
            one_step(mode, state[mode], step >= args.warmup)
    step_s, backward_s = state["step"]["times"], state["step"]["backward"]
    loss = state["step"]["loss"].item()
    compute_s = state["compute"]["times"]
    comm_s, buckets = state["allreduce"]["comm"], state["allreduce"]["timer"].buckets
    dist.destroy_process_group()
    if rank == 0:
        results.put({"step": statistics.median(step_s), "compute": statistics.median(compute_s),
                     "allreduce": statistics.median(comm_s), "loss": loss, "buckets": buckets,
                     "backward": statistics.median(backward_s),
                     "params": params})


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8, help="per rank")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    parser.add_argument("--backends", default="hal,gloo")
    parser.add_argument("--bucket-view", action="store_true",
                        help="DDP's gradient_as_bucket_view (no copies into the buckets)")
    parser.add_argument("--port", type=int, default=29541)
    args = parser.parse_args()
    ctx = mp.get_context("spawn")
    rows = []
    port = args.port
    for round_ in range(args.rounds):
        for backend in args.backends.split(","):
            results = ctx.Queue()
            procs = [ctx.Process(target=worker, args=(r, 2, backend, port, args, results))
                     for r in range(2)]
            port += 1
            for p in procs:
                p.start()
            row = results.get(timeout=1800)
            for p in procs:
                p.join()
            rows.append((round_, backend, row))
    params = rows[0][2]["params"]
    print(f"DDP, 2 ranks: GPT {args.layers} layers, width {args.width}, context {args.context}, "
          f"{params / 1e6:.2f} M parameters ({4 * params / 2**20:.1f} MiB of f32 gradients, "
          f"{rows[0][2]['buckets']} DDP buckets), batch {args.batch} per rank; medians of "
          f"{args.steps} steps, ms")
    print(f"{'round':>5} {'backend':>8} {'step':>9} {'compute':>9} {'exposed':>9} "
          f"{'all_reduce':>11} {'backward':>9} {'last loss':>10}")
    for round_, backend, row in rows:
        print(f"{round_:>5} {backend:>8} {1e3 * row['step']:9.1f} {1e3 * row['compute']:9.1f} "
              f"{1e3 * (row['step'] - row['compute']):9.1f} {1e3 * row['allreduce']:11.2f} "
              f"{1e3 * row['backward']:9.1f} {row['loss']:10.4f}")


if __name__ == "__main__":
    main()
