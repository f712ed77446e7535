import multiprocessing as mp
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import hal


def test_allreduce_and_friends_in_one_process(devices, rng):
    comms = hal.Communicator.init_all(devices)
    assert [c.rank for c in comms] == [0, 1] and comms[0].size == 2
    xs = [rng.standard_normal(100).astype(np.float32) for _ in comms]
    bufs = [hal.to_device(x, c.device) for x, c in zip(xs, comms)]
    for c, b in zip(comms, bufs):
        c.allreduce(b, b, "sum")
    for b in bufs:
        np.testing.assert_allclose(b.to_numpy(), xs[0] + xs[1], rtol=1e-6)
    outs = [hal.empty(200, np.float32, c.device) for c in comms]
    for c, b, o in zip(comms, bufs, outs):
        c.allgather(b, o)
    np.testing.assert_allclose(outs[1].to_numpy(), np.concatenate([xs[0] + xs[1]] * 2), rtol=1e-6)
    ints = [hal.to_device(np.arange(6, dtype=np.int32) + 10 * r, c.device)
            for r, c in enumerate(comms)]
    for c, b in zip(comms, ints):
        c.broadcast(b, b, root=1)
    np.testing.assert_array_equal(ints[0].to_numpy(), np.arange(6) + 10)
    received = hal.empty(6, np.int32, comms[1].device)
    with hal.group():
        comms[0].send(ints[0], 1)
        comms[1].recv(received, 0)
    np.testing.assert_array_equal(received.to_numpy(), np.arange(6) + 10)
    with pytest.raises(TypeError, match="send is float32, recv is int32"):
        comms[0].allreduce(bufs[0], ints[0])
    with pytest.raises(ValueError, match="reduce op"):
        comms[0].allreduce(bufs[0], bufs[0], "median")
    for c in comms:
        c.close()


def _join(h, rank, nranks, queue):
    """Rank 0 makes the unique id (its process serves the store) and hands it out."""
    if rank == 0:
        uid = h.comm_unique_id()
        for _ in range(nranks - 1):
            queue.put(uid)
    else:
        uid = queue.get(timeout=60)
    return h.Communicator.init_rank(h.device(0), nranks, uid, rank, timeout_ms=60000)


def _rank_main(rank, nranks, queue, results):
    os.environ["HAL_PLUGINS"] = "cpu"
    import hal as h  # noqa: F811 - a fresh interpreter (spawn)

    comm = _join(h, rank, nranks, queue)
    x = np.random.default_rng(rank).standard_normal(64).astype(np.float64)
    buf = h.to_device(x, h.device(0))
    comm.allreduce(buf, buf, "max")
    results.put((rank, buf.to_numpy()))
    comm.close()
    h.shutdown()


def test_allreduce_across_processes():
    ctx = mp.get_context("spawn")
    queue, results = ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=_rank_main, args=(r, 2, queue, results)) for r in range(2)]
    for p in procs:
        p.start()
    got = dict(results.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    expected = np.maximum(np.random.default_rng(0).standard_normal(64),
                          np.random.default_rng(1).standard_normal(64))
    for r in range(2):
        np.testing.assert_array_equal(got[r], expected)


def _leaving_rank_main(rank, nranks, queue, results):
    # Host-staged over the id's store (served by rank 0's process), not the
    # shared segment: the store must outlive rank 0's last message.
    os.environ["HAL_PLUGINS"] = "cpu"
    os.environ["HAL_COMM_SHM"] = "0"
    import time

    import hal as h  # noqa: F811 - a fresh interpreter (spawn)

    comm = _join(h, rank, nranks, queue)
    data = np.arange(1000, dtype=np.float32) * (rank + 1)
    buf = h.to_device(data, h.device(0))
    if rank != 0:
        time.sleep(0.5)  # rank 0 has sent and is leaving by now
    comm.broadcast(buf, buf, root=0)
    results.put((rank, buf.to_numpy()))
    comm.close()  # rank 0: waits for the peers to take its message
    h.shutdown()


def test_store_serving_rank_may_leave_right_after_its_last_message():
    ctx = mp.get_context("spawn")
    queue, results = ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=_leaving_rank_main, args=(r, 2, queue, results))
             for r in range(2)]
    for p in procs:
        p.start()
    got = dict(results.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    for r in range(2):
        np.testing.assert_array_equal(got[r], np.arange(1000, dtype=np.float32))


def test_bad_unique_id(dev):
    with pytest.raises(ValueError, match="128 bytes"):
        hal.Communicator.init_rank(dev, 2, b"short", 0)


def _python(code):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120, env=os.environ.copy())


def test_shutdown_releases_objects_and_later_use_raises():
    r = _python("""
        import numpy as np, hal
        d = hal.device(0)
        buf = hal.to_device(np.arange(4, dtype=np.float32), d)
        s = hal.Stream(d)
        view = np.from_dlpack(buf)
        try:
            hal.shutdown()
        except hal.InvalidStateError as e:
            print("refused:", e)
        del view
        assert hal.shutdown() is True
        for f in (buf.to_numpy, s.synchronize, lambda: d.properties):
            try:
                f()
            except hal.DestroyedHandleError as e:
                print("raised:", e.name)
        print("devices again:", len(hal.devices()))
    """)
    assert r.returncode == 0, r.stderr
    assert "refused:" in r.stdout and r.stdout.count("raised: HAL_ERROR_DESTROYED_HANDLE") == 3
    assert "devices again: 2" in r.stdout


def test_exit_with_live_objects_and_pending_callbacks_is_clean():
    r = _python("""
        import numpy as np, hal, time
        d = hal.device(0)
        s = hal.Stream(d)
        keep = [hal.to_device(np.ones(1000, np.float32), d) for _ in range(3)]
        view = np.from_dlpack(keep[0])
        s.enqueue_host_fn(lambda: time.sleep(0.05))
        s.enqueue_host_fn(lambda: print("callback ran"))
        print("exiting")
    """)
    assert r.returncode == 0, r.stderr
    assert "callback ran" in r.stdout
    assert "leaked" not in r.stderr, r.stderr


def test_exit_with_every_kind_of_object_alive_is_clean():
    r = _python("""
        import numpy as np, hal
        d = hal.device(0)
        k = hal.Module(d, source="kernel void k(global float* x) { x[0] = 1.0f; }").kernel("k")
        b = hal.empty(4, np.float32, d)
        k.launch(1, 1, b)
        comms = hal.Communicator.init_all(hal.devices())
        e, s = hal.Event(d, timing=True), hal.Stream(d)
        e.record(s)
        wrapped = hal.from_dlpack(np.zeros(3, np.float32), d)
        print("done")
    """)
    assert r.returncode == 0 and "done" in r.stdout, r.stderr
    assert r.stderr == "", r.stderr


def test_reduce_scatter_alltoall_reduce(devices, rng):
    comms = hal.Communicator.init_all(devices)
    xs = [rng.integers(-50, 50, 8).astype(np.int64) for _ in comms]
    sends = [hal.to_device(x, c.device) for x, c in zip(xs, comms)]
    halves = [hal.empty(4, np.int64, c.device) for c in comms]
    for c, s, h in zip(comms, sends, halves):
        c.reduce_scatter(s, h, "max")
    total = np.maximum(xs[0], xs[1])
    for r, h in enumerate(halves):
        np.testing.assert_array_equal(h.to_numpy(), total[4 * r:4 * r + 4])
    swapped = [hal.empty(8, np.int64, c.device) for c in comms]
    for c, s, o in zip(comms, sends, swapped):
        c.alltoall(s, o)
    np.testing.assert_array_equal(swapped[0].to_numpy(), np.concatenate([xs[0][:4], xs[1][:4]]))
    np.testing.assert_array_equal(swapped[1].to_numpy(), np.concatenate([xs[0][4:], xs[1][4:]]))
    outs = [hal.empty(8, np.int64, c.device) for c in comms]
    for c, s, o in zip(comms, sends, outs):
        c.reduce(s, o, "prod", root=0)
    np.testing.assert_array_equal(outs[0].to_numpy(), xs[0] * xs[1])
    for c in comms:
        c.check_async_error()
    with pytest.raises(ValueError, match="expected 16"):
        comms[0].reduce_scatter(sends[0], sends[0])
    comms[0].abort()
    comms[1].abort()


def test_alltoallv_uneven_counts_given_or_exchanged(devices, rng):
    import threading

    comms = hal.Communicator.init_all(devices)
    counts = [[2, 0], [3, 1]]  # counts[sender][receiver]: rank 0 sends rank 1 nothing
    xs = [rng.standard_normal(sum(counts[r])).astype(np.float32) for r in range(2)]
    sends = [hal.to_device(x, c.device) for x, c in zip(xs, comms)]
    want = [np.concatenate([xs[0][:2], xs[1][:3]]), xs[1][3:4]]

    outs = [hal.empty(6, np.float32, c.device) for c in comms]
    for r, c in enumerate(comms):
        c.alltoallv(sends[r], counts[r], outs[r], [counts[0][r], counts[1][r]])
    for r in range(2):
        np.testing.assert_array_equal(outs[r].to_numpy()[:len(want[r])], want[r])

    # Without recv_counts each rank learns them from its peers and waits: one thread per rank.
    exchanged = [hal.empty(6, np.float32, c.device) for c in comms]
    errors = []

    def rank_main(r):
        try:
            comms[r].alltoallv(sends[r], counts[r], exchanged[r])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    for r in range(2):
        np.testing.assert_array_equal(exchanged[r].to_numpy()[:len(want[r])], want[r])
    for c in comms:
        c.check_async_error()

    with pytest.raises(ValueError, match="1 entries for 2 ranks"):
        comms[0].alltoallv(sends[0], [2], outs[0], [2, 3])
    with pytest.raises(ValueError, match="send_counts add up to more"):
        comms[0].alltoallv(sends[0], [2, 1], outs[0], [2, 3])
    with pytest.raises(ValueError, match="recv_counts add up to more"):
        comms[0].alltoallv(sends[0], [2, 0], outs[0], [2, 5])
    with hal.group():
        with pytest.raises(hal.InvalidStateError, match="inside hal.group"):
            comms[0].alltoallv(sends[0], counts[0], outs[0])
    for c in comms:
        c.abort()


def test_alltoallv_count_exchange_failure_is_the_communicators_error(devices, rng):
    # Rank 0 exchanges counts alone: the exchange meets its deadline, which loses rank 0's
    # stream; the call raises the communicator's error (a timeout), not the lost stream.
    # On a stream of its own, closed at the end: a lost stream stays lost until it is destroyed,
    # and the device's synchronize would report it to every later test.
    comms = hal.Communicator.init_all(devices, timeout_ms=300)
    stream = hal.Stream(comms[0].device)
    send = hal.to_device(rng.standard_normal(3).astype(np.float32), comms[0].device)
    out = hal.empty(8, np.float32, comms[0].device)
    with pytest.raises(hal.TimeoutError):
        comms[0].alltoallv(send, [2, 1], out, stream=stream)
    for c in comms:
        c.abort()
    stream.close()
    comms[0].device.synchronize()  # nothing of the failure is left on the device


def test_validation_layer_rejects_pageable_kernel_args_and_host_kind_is_portable():
    env = dict(os.environ, HAL_VALIDATION="1")
    code = """
        import numpy as np, hal
        d = hal.device(0)
        k = hal.Module(d, source="kernel void twice(global float* x, int n) {"
                                " int i = global_id(0); if (i < n) x[i] = 2.0f * x[i]; }").kernel("twice")
        wrapped = hal.from_dlpack(np.ones(8, np.float32), d)
        try:
            k.launch(1, 8, wrapped, 8)
            d.synchronize()
            print("pageable accepted")
        except hal.InvalidArgumentError as e:
            print("pageable refused:", e.plugin)
        buf = hal.empty(8, np.float32, d, kind="host")
        view = np.from_dlpack(buf)
        view[:] = np.arange(8)
        k.launch(1, 8, buf, 8)
        d.synchronize()
        print("host kind:", view.tolist() == [2.0 * i for i in range(8)])
        del view
    """
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert "pageable refused" in r.stdout and "host kind: True" in r.stdout


def test_dropping_a_stream_with_pending_callbacks_does_not_deadlock(dev):
    ran = []
    s = hal.Stream(dev)
    for i in range(20):
        s.enqueue_host_fn(lambda i=i: ran.append(i))
    del s  # destroy waits for the callbacks, which need the GIL this thread held
    assert ran == list(range(20))


def test_callbacks_while_other_python_threads_run(dev):
    import threading

    s = hal.Stream(dev)
    stop = threading.Event()
    counter = [0]

    def spin():
        while not stop.is_set():
            counter[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    seen = []
    for i in range(50):
        s.enqueue_host_fn(lambda i=i: seen.append(i))
    s.synchronize()
    stop.set()
    t.join()
    assert seen == list(range(50))


def test_event_and_device_queries(dev):
    s = hal.Stream(dev)
    e = hal.Event(dev)
    assert e.query()  # never recorded: complete
    e.record(s)
    dev.synchronize()
    assert e.query() and s.query()
    e.close()
    assert e.closed
    with pytest.raises(hal.DestroyedHandleError):
        e.query()


def test_close_and_shutdown_refused_while_another_thread_blocks_in_a_call(dev):
    import threading
    import time

    s = hal.Stream(dev)
    gate = threading.Event()
    s.enqueue_host_fn(lambda: gate.wait(30))
    t = threading.Thread(target=s.synchronize)
    t.start()
    for _ in range(3000):  # until the thread is inside synchronize (GIL released)
        if s._in_use:
            break
        time.sleep(0.001)
    assert s._in_use == 1
    with pytest.raises(hal.InvalidStateError, match="another thread"):
        s.close()
    with pytest.raises(hal.InvalidStateError, match="call\\(s\\) of other threads"):
        hal.shutdown()
    gate.set()
    t.join(30)
    assert s._in_use == 0
    s.close()


# A host function may drop the last reference to any HAL object, directly or
# through the garbage collector, and freeing waits for the device's streams,
# the callback's own among them: such releases are deferred, never a hang.
# Each runs in a child interpreter, so a regression is a timeout, not a
# hung suite.
def test_host_function_dropping_buffers_and_streams_does_not_hang():
    r = _python("""
        import gc, numpy as np, hal
        d = hal.device(0)
        s = hal.Stream(d)
        holder = {"bufs": [hal.to_device(np.full(64, i, np.float32), d) for i in range(20)],
                  "stream": hal.Stream(d), "event": hal.Event(d, timing=False)}
        s.enqueue_host_fn(lambda: holder.clear())

        class Cycle:  # garbage only the collector frees
            pass
        def make_cycles():
            for i in range(50):
                c = Cycle()
                c.self, c.buf = c, hal.empty(16, np.float32, d)
        make_cycles()
        s.enqueue_host_fn(gc.collect)
        s.synchronize()
        assert not holder
        x = hal.to_device(np.arange(8, dtype=np.float32), d)  # the freed handles went back
        print("ok", x.to_numpy().sum())
    """)
    assert r.returncode == 0, r.stderr
    assert "ok 28.0" in r.stdout


def test_waiting_inside_a_host_function_raises():
    r = _python("""
        import numpy as np, hal
        d = hal.device(0)
        s, other = hal.Stream(d), hal.Stream(d)
        e = hal.Event(d, timing=False)
        b = hal.to_device(np.ones(4, np.float32), d)
        for wait in (s.synchronize, other.synchronize, d.synchronize, e.synchronize, b.to_numpy,
                     hal.shutdown):
            s.enqueue_host_fn(wait)
            try:
                s.synchronize()
                print("no error from", wait)
            except hal.InvalidStateError as error:
                print("refused:", "host function" in str(error))
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("refused: True") == 6, r.stdout


def test_shutdown_while_a_host_function_drops_objects_it_walks():
    r = _python("""
        import time, numpy as np, hal
        d = hal.device(0)
        s = hal.Stream(d)
        holder = {"bufs": [hal.to_device(np.ones(256, np.float32), d) for _ in range(30)]}
        def drop():
            time.sleep(0.05)  # until shutdown is freeing the newest buffers
            holder.clear()
        s.enqueue_host_fn(drop)
        assert hal.shutdown() is True
        print("shut down", len(holder))
    """)
    assert r.returncode == 0, r.stderr
    assert "shut down 0" in r.stdout
