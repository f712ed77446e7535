"""The ranks of test_distributed.py (spawned processes import this module)."""
import datetime
import os
import traceback

import torch
import torch.distributed as dist

import hal_torch  # noqa: F401


def _init(rank, world, port, timeout_s=60):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.hal.set_device(rank)
    dist.init_process_group("hal", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_s))


def _run(fn, rank, world, port, results):
    try:
        results.put((rank, "ok", fn(rank, world, port)))
    except BaseException as e:  # reported to the test, which fails with it
        results.put((rank, "error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


def collectives(rank, world, port, results):
    _run(_collectives, rank, world, port, results)


def _collectives(rank, world, port):
    _init(rank, world, port)
    dev = f"hal:{rank}"
    out = {}
    t = torch.full((5,), float(rank + 1), device=dev)
    dist.all_reduce(t)
    out["all_reduce"] = t.cpu().tolist()
    t = torch.full((3,), float(rank + 1), device=dev, dtype=torch.bfloat16)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    out["all_reduce_max_bf16"] = t.float().cpu().tolist()
    t = torch.full((2,), float(rank + 1), device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    out["all_reduce_avg"] = t.cpu().tolist()
    gathered = [torch.empty(2, device=dev) for _ in range(world)]
    dist.all_gather(gathered, torch.tensor([rank, 10.0 + rank], device=dev))
    out["all_gather"] = [g.cpu().tolist() for g in gathered]
    flat = torch.empty(2 * world, device=dev)
    dist.all_gather_into_tensor(flat, torch.tensor([rank, 10.0 + rank], device=dev))
    out["all_gather_into_tensor"] = flat.cpu().tolist()
    rs = torch.empty(2, device=dev)
    dist.reduce_scatter(rs, [torch.full((2,), float(rank + 10 * r), device=dev)
                             for r in range(world)])
    out["reduce_scatter"] = rs.cpu().tolist()
    rst = torch.empty(2, device=dev)
    dist.reduce_scatter_tensor(rst, torch.arange(2.0 * world, device=dev) * (rank + 1))
    out["reduce_scatter_tensor"] = rst.cpu().tolist()
    b = torch.full((3,), float(rank), device=dev)
    dist.broadcast(b, src=world - 1)
    out["broadcast"] = b.cpu().tolist()
    # Uneven all-to-all: rank r sends r + 1 rows to every rank (rank 0 sends none to 1).
    in_splits = [1, 0] if rank == 0 else [2, 2]
    out_splits = [1, 2] if rank == 0 else [0, 2]
    x = (torch.arange(sum(in_splits), dtype=torch.float32, device=dev) + 100 * rank)
    y = torch.empty(sum(out_splits), device=dev)
    dist.all_to_all_single(y, x, out_splits, in_splits)
    out["all_to_all_single"] = y.cpu().tolist()
    peer = 1 - rank
    send = torch.full((4,), float(rank), device=dev)
    recv = torch.empty(4, device=dev)
    ops = [dist.P2POp(dist.isend, send, peer), dist.P2POp(dist.irecv, recv, peer)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    out["exchange"] = recv.cpu().tolist()
    if rank == 0:
        dist.send(torch.tensor([42.0], device=dev), 1)
    else:
        r = torch.empty(1, device=dev)
        dist.recv(r, 0)
        out["recv"] = r.cpu().tolist()
    c = torch.full((3,), float(rank + 1))  # a CPU tensor through the same backend
    dist.all_reduce(c)
    out["cpu_all_reduce"] = c.tolist()
    work = dist.all_reduce(torch.ones(2, device=dev), async_op=True)
    fut = work.get_future()
    out["future"] = fut.wait()[0].cpu().tolist()
    dist.barrier()
    out["ddp"] = _ddp_steps(rank, world)
    dist.destroy_process_group()
    return out


def failures(rank, world, port, results):
    _run(_failures, rank, world, port, results)


def _failures(rank, world, port):
    """Mismatched sizes on the default group, then a rank that dies during a collective of
    a second group: both DistBackendError, neither a hang (the groups' timeout is 20 s)."""
    import time
    _init(rank, world, port, timeout_s=20)
    out = {}
    t = torch.ones(4 if rank == 0 else 6, device=f"hal:{rank}")
    try:
        dist.all_reduce(t)
        out["mismatch"] = "no error"
    except dist.DistBackendError as e:
        out["mismatch"] = f"DistBackendError: {e}"
    group = dist.new_group([0, 1], timeout=__import__("datetime").timedelta(seconds=20))
    dist.all_reduce(torch.ones(1, device=f"hal:{rank}"), group=group)  # both ranks alive
    if rank == 1:
        os._exit(3)  # dies without a word
    started = time.monotonic()
    try:
        dist.all_reduce(torch.ones(1000, device=f"hal:{rank}"), group=group)
        out["dead_rank"] = "no error"
    except dist.DistBackendError as e:
        out["dead_rank"] = f"DistBackendError after {time.monotonic() - started:.1f} s: {e}"
    return out


def _ddp_steps(rank, world):
    """A small MLP trained 5 steps with DDP on half the global batch each."""
    dev = f"hal:{rank}"
    model = ddp_model().to(dev)
    ddp_model_ = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp_model_.parameters(), lr=0.1)
    for x, y in ddp_batches():
        half = x.shape[0] // world
        xs, ys = x[rank * half:(rank + 1) * half], y[rank * half:(rank + 1) * half]
        loss = torch.nn.functional.mse_loss(ddp_model_(xs.to(dev)), ys.to(dev))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return [p.detach().cpu().tolist() for p in model.parameters()]


def ddp_model():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 2))


def ddp_batches(steps=5, batch=16):
    g = torch.Generator().manual_seed(4)
    for _ in range(steps):
        yield torch.randn(batch, 8, generator=g), torch.randn(batch, 2, generator=g)
