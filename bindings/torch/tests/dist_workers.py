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


def settled_mismatch(rank, world, port, results):
    _run(_settled_mismatch, rank, world, port, results)


def _outcome(fn):
    """What fn() did: "ok", or the exception's type name and message."""
    try:
        fn()
        return "ok"
    except BaseException as e:  # the test asserts on the type
        return f"{type(e).__name__}: {e}"


def _settled_mismatch(rank, world, port):
    """c4d3db0's race, its order forced: the binding's test hook synchronizes each collective's
    stream before the stream-ordered future is completed, so the mismatched all_reduce has
    failed the communicator's stream before the future's event is recorded. The collective's
    call must return a Work (not raise); its wait, its future and the next collective raise
    DistBackendError."""
    os.environ["HAL_TORCH_TEST_SETTLE_BEFORE_FUTURE"] = "1"
    _init(rank, world, port, timeout_s=20)
    dev = f"hal:{rank}"
    out = {}
    dist.all_reduce(torch.ones(2, device=dev))  # the communicator, made healthy
    t = torch.ones(4 if rank == 0 else 6, device=dev)
    works = []
    out["call"] = _outcome(lambda: works.append(dist.all_reduce(t, async_op=True)))
    if works:
        out["wait"] = _outcome(works[0].wait)
        out["future"] = _outcome(lambda: works[0].get_future().wait())
    out["next"] = _outcome(lambda: dist.all_reduce(torch.ones(2, device=dev)))
    return out


def ddp_dead_rank(rank, world, port, results):
    _run(_ddp_dead_rank, rank, world, port, results)


def _ddp_dead_rank(rank, world, port):
    """A rank dies in the middle of a DDP backward (a gradient hook calls os._exit once its
    later buckets' all_reduces are queued); the surviving rank goes on training and must get a
    PyTorch exception (DistBackendError, the timeout's included) within the group's timeout
    (20 s): not a hang, not a crash."""
    import time
    _init(rank, world, port, timeout_s=20)
    dev = f"hal:{rank}"
    torch.manual_seed(5)
    model = torch.nn.Sequential(*[torch.nn.Linear(32, 32) for _ in range(6)]).to(dev)
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=1e-3)  # 6+ buckets
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 32, device=dev)

    def step():
        loss = ddp(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch.hal.synchronize()

    step()  # both ranks alive: the communicator is made, DDP's buckets rebuilt
    step()
    out = {}
    if rank == 1:
        # The first layer's weight gradient comes last in backward: by then the buckets of the
        # layers above have been handed to the backend.
        model[0].weight.register_hook(lambda grad: os._exit(3))
    started = time.monotonic()
    try:
        for _ in range(20):
            step()
        out["survivor"] = "no error"
    except BaseException as e:  # the test asserts on the type
        out["survivor"] = f"{type(e).__name__} after {time.monotonic() - started:.1f} s: {e}"
    return out


def stream_ordered(rank, world, port, results):
    _run(_stream_ordered, rank, world, port, results)


def _stream_ordered(rank, world, port):
    """A Work's future on hal tensors completes in stream order: waiting on it neither blocks
    the host until the peers join nor lets what follows run before the collective; DDP's
    backward returns before the other rank has even started its own (so its buckets'
    all_reduces run behind it, as NCCL's do), and its gradients match DDP over gloo on CPU."""
    _init(rank, world, port, timeout_s=60)
    store = dist.distributed_c10d._get_default_store()
    wait_for = datetime.timedelta(seconds=30)
    dev = f"hal:{rank}"
    out = {}
    dist.barrier()  # the communicator is made on the first collective, by both ranks
    # Rank 1 joins the all_reduce only once rank 0 has waited on the future and queued more
    # work behind it: rank 0 waiting on the host for the collective would never get there.
    t = torch.full((3,), float(rank + 1), device=dev)
    if rank == 0:
        work = dist.all_reduce(t, async_op=True)
        fut = work.get_future()
        out["future_done_before_peer"] = fut.done()
        out["work_completed_before_peer"] = work.is_completed()
        fut.wait()  # the current stream waits for the collective; the host goes on
        t.mul_(10)  # in stream order: after the sum
        store.set("queued_behind_future", "1")
        work.wait()
        out["work_completed_after_wait"] = work.is_completed()
    else:
        store.wait(["queued_behind_future"], wait_for)
        dist.all_reduce(t)
    out["sum_then_times_10"] = t.cpu().tolist()

    # DDP: rank 1 starts its backward only after rank 0's backward returned. Each parameter is
    # a bucket of its own (bucket_cap_mb tiny), so several all_reduces are in flight at once.
    gloo = dist.new_group(backend="gloo")
    hal_model = ddp_model().to(dev)
    cpu_model = ddp_model()
    hal_ddp = torch.nn.parallel.DistributedDataParallel(hal_model, bucket_cap_mb=1e-4)
    cpu_ddp = torch.nn.parallel.DistributedDataParallel(cpu_model, bucket_cap_mb=1e-4,
                                                        process_group=gloo)
    hal_opt = torch.optim.SGD(hal_model.parameters(), lr=0.1)
    cpu_opt = torch.optim.SGD(cpu_model.parameters(), lr=0.1)
    out["backward_returned_before_peer_started"] = []
    out["grad_error"] = 0.0
    for step, (x, y) in enumerate(ddp_batches(steps=3)):
        half = x.shape[0] // world
        xs, ys = x[rank * half:(rank + 1) * half], y[rank * half:(rank + 1) * half]
        loss = torch.nn.functional.mse_loss(hal_ddp(xs.to(dev)), ys.to(dev))
        key = f"rank0_backward_returned_{step}"
        if rank == 1:
            store.wait([key], wait_for)
        loss.backward()
        if rank == 0:
            out["backward_returned_before_peer_started"].append(True)
            store.set(key, "1")
        cpu_loss = torch.nn.functional.mse_loss(cpu_ddp(xs), ys)
        cpu_loss.backward()
        for p, q in zip(hal_model.parameters(), cpu_model.parameters()):
            err = (p.grad.cpu() - q.grad).abs().max().item() / (q.grad.abs().max().item() + 1e-12)
            out["grad_error"] = max(out["grad_error"], err)
        hal_opt.step()
        cpu_opt.step()
        hal_opt.zero_grad()
        cpu_opt.zero_grad()
    out["param_error"] = max((p.detach().cpu() - q.detach()).abs().max().item()
                             for p, q in zip(hal_model.parameters(), cpu_model.parameters()))
    dist.barrier()
    dist.destroy_process_group()
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
