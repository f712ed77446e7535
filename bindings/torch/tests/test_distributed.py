"""torch.distributed's "hal" backend across two processes (two cpu-plugin devices): every
collective against its definition, the failures (mismatched sizes, a dead rank) as
DistBackendError within the group's timeout, and DistributedDataParallel against one process
with the same global batch."""
import queue
import socket
import time

import pytest
import torch
import torch.multiprocessing as mp

import dist_workers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(fn, world=2, timeout=180):
    """Runs fn(rank, world, port, results) in |world| processes; {rank: (status, value)} of
    those that reported before they all ended (or |timeout| passed)."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=fn, args=(r, world, port, results)) for r in range(world)]
    for p in procs:
        p.start()
    got = {}
    deadline = time.monotonic() + timeout
    while len(got) < world and time.monotonic() < deadline:
        try:
            rank, status, value = results.get(timeout=0.5)
            got[rank] = (status, value)
        except queue.Empty:
            if not any(p.is_alive() for p in procs) and results.empty():
                break
    for p in procs:
        p.join(30)
        if p.is_alive():
            p.kill()
    return got


@pytest.fixture(scope="module")
def two_ranks():
    got = spawn(dist_workers.collectives)
    assert set(got) == {0, 1}, got
    for rank, (status, value) in got.items():
        assert status == "ok", value
    return got[0][1], got[1][1]


def test_collectives_on_two_ranks(two_ranks):
    r0, r1 = two_ranks
    for r in (r0, r1):
        assert r["all_reduce"] == [3.0] * 5
        assert r["all_reduce_max_bf16"] == [2.0] * 3
        assert r["all_reduce_avg"] == [1.5, 1.5]
        assert r["all_gather"] == [[0.0, 10.0], [1.0, 11.0]]
        assert r["all_gather_into_tensor"] == [0.0, 10.0, 1.0, 11.0]
        assert r["broadcast"] == [1.0] * 3
        assert r["cpu_all_reduce"] == [3.0] * 3
        assert r["future"] == [2.0, 2.0]
    # reduce_scatter: rank r gets the sum over ranks of their r-th chunk.
    assert r0["reduce_scatter"] == [1.0, 1.0] and r1["reduce_scatter"] == [21.0, 21.0]
    # arange(4) * (rank + 1) summed: [0,1,2,3] * 3, split in two.
    assert r0["reduce_scatter_tensor"] == [0.0, 3.0] and r1["reduce_scatter_tensor"] == [6.0, 9.0]
    # Uneven all-to-all: rank 0 sends [0] to itself, nothing to 1; rank 1 sends [100, 101] to 0
    # and [102, 103] to itself.
    assert r0["all_to_all_single"] == [0.0, 100.0, 101.0]
    assert r1["all_to_all_single"] == [102.0, 103.0]
    assert r0["exchange"] == [1.0] * 4 and r1["exchange"] == [0.0] * 4
    assert r1["recv"] == [42.0]


def test_ddp_matches_one_process_with_the_same_global_batch(two_ranks):
    model = dist_workers.ddp_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in dist_workers.ddp_batches():
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    for r in two_ranks:
        for got_p, want in zip(r["ddp"], model.parameters()):
            torch.testing.assert_close(torch.tensor(got_p), want.detach(), atol=1e-5, rtol=1e-5)


def test_futures_complete_in_stream_order_and_ddp_backward_does_not_wait_for_peers():
    # Before: the future completed only when the collective had (a host function behind it),
    # so rank 0's fut.wait() and DDP's backward blocked until rank 1 joined, which here waits
    # for rank 0 first: rank 1's store wait timed out.
    got = spawn(dist_workers.stream_ordered, timeout=150)
    assert set(got) == {0, 1}, got
    for rank, (status, value) in got.items():
        assert status == "ok", value
    r0, r1 = got[0][1], got[1][1]
    assert r0["future_done_before_peer"] is True
    assert r0["work_completed_before_peer"] is False  # rank 1 had not joined: not done yet
    assert r0["work_completed_after_wait"] is True
    assert r0["sum_then_times_10"] == [30.0] * 3  # (1 + 2) * 10: the mul ran after the sum
    assert r1["sum_then_times_10"] == [3.0] * 3
    assert r0["backward_returned_before_peer_started"] == [True] * 3
    for r in (r0, r1):
        # DDP over hal against DDP over gloo on the CPU: the same averaged gradients.
        assert r["grad_error"] < 1e-5, r["grad_error"]
        assert r["param_error"] < 1e-5, r["param_error"]


def test_mismatched_sizes_and_a_dead_rank_raise_dist_backend_error():
    got = spawn(dist_workers.failures, timeout=150)
    assert 0 in got and got[0][0] == "ok", got
    mismatch = got[0][1]["mismatch"]
    assert mismatch.startswith("DistBackendError") and "HAL_ERROR_ARGUMENT_MISMATCH" in mismatch
    dead = got[0][1]["dead_rank"]
    assert dead.startswith("DistBackendError") and "HAL_ERROR_REMOTE" in dead, dead
    seconds = float(dead.split("after ")[1].split(" s")[0])
    assert seconds < 25, dead  # the group's timeout is 20 s; a dead peer is seen at once


def test_a_collective_whose_stream_failed_before_its_future_raises_only_from_wait():
    # c4d3db0: when the mismatch had failed the communicator's stream before the future's
    # event was recorded, the all_reduce's call raised AcceleratorError ("recording a hal
    # event: ... an earlier command failed"). The binding's test hook forces that order.
    got = spawn(dist_workers.settled_mismatch, timeout=150)
    assert set(got) == {0, 1}, got
    for rank, (status, value) in got.items():
        assert status == "ok", value
        assert value["call"] == "ok", value
        for when in ("wait", "future", "next"):
            assert value[when].startswith("DistBackendError"), (rank, when, value)
        assert "HAL_ERROR_ARGUMENT_MISMATCH" in value["wait"], value


def test_a_rank_dying_mid_ddp_backward_raises_on_the_survivor_within_the_timeout():
    got = spawn(dist_workers.ddp_dead_rank, timeout=150)
    assert 1 not in got, got  # rank 1 died in its backward, before reporting
    assert 0 in got and got[0][0] == "ok", got
    survivor = got[0][1]["survivor"]
    assert survivor.startswith("DistBackendError"), survivor
    seconds = float(survivor.split("after ")[1].split(" s")[0])
    assert seconds < 25, survivor  # the group's timeout is 20 s
