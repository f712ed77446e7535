import threading

import numpy as np
import pytest

import hal
from conftest import vector_add_so


def test_stream_event_timing_and_host_callbacks(dev, vadd_module, rng):
    s = hal.Stream(dev)
    assert s.device == dev
    start, end = hal.Event(dev, timing=True), hal.Event(dev, timing=True)
    seen = []
    threads = []
    start.record(s)
    s.enqueue_host_fn(lambda: (seen.append(1), threads.append(threading.get_ident())))
    s.enqueue_host_fn(lambda: seen.append(2))
    end.record(s)
    # synchronize with the GIL held by this thread: released inside, so the callbacks run
    s.synchronize()
    end.synchronize()
    assert seen == [1, 2] and s.query() and end.query()
    assert start.elapsed_ms(end) >= 0.0
    assert len(threads) == 1
    other = hal.Stream(dev)
    other.wait_event(end)
    other.synchronize()


def test_host_callback_exception_reraised_by_synchronize(dev):
    s = hal.Stream(dev)

    def boom():
        raise KeyError("from the callback")

    s.enqueue_host_fn(boom)
    with pytest.raises(KeyError, match="from the callback"):
        s.synchronize()
    s.synchronize()  # reported once


def test_elapsed_needs_timing_events(dev):
    s = hal.Stream(dev)
    a, b = hal.Event(dev), hal.Event(dev)
    a.record(s)
    b.record(s)
    s.synchronize()
    with pytest.raises(hal.InvalidStateError):
        a.elapsed_ms(b)


def test_dialect_vadd_against_numpy(devices, vadd_module, rng):
    k = vadd_module.kernel("vadd")
    assert k.arg_types == ["pointer", "pointer", "pointer", "i32"]
    n = 10007
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    da, db = hal.to_device(a, vadd_module.device), hal.to_device(b, vadd_module.device)
    dc = hal.empty(n, np.float32, vadd_module.device)
    k.launch((n + 255) // 256, 256, da, db, dc, np.int32(n))
    np.testing.assert_array_equal(dc.to_numpy(), a + b)


def test_scalars_by_signature(dev, vadd_module, rng):
    k = vadd_module.kernel("axpy")
    assert k.arg_types == ["pointer", "pointer", "f64", "u32"]
    x = rng.standard_normal(1000)
    y = rng.standard_normal(1000)
    dy, dx = hal.to_device(y, dev), hal.to_device(x, dev)
    s = hal.Stream(dev)
    k.launch(4, 256, dy, dx, np.float32(0.5), 1000, stream=s)
    s.synchronize()
    np.testing.assert_allclose(dy.to_numpy(), 0.5 * x + y)
    k.launch((4, 1, 1), (256,), dy, dx, 2, np.uint64(1000))  # ints convert to f64


def test_launch_bad_input(devices, vadd_module):
    k = vadd_module.kernel("vadd")
    a = hal.empty(16, np.float32, devices[0])
    with pytest.raises(TypeError, match="takes 4 arguments, got 3"):
        k.launch(1, 16, a, a, a)
    with pytest.raises(TypeError, match="must be a hal.Buffer"):
        k.launch(1, 16, a, np.zeros(16, np.float32), a, 16)
    with pytest.raises(TypeError, match="must be an int"):
        k.launch(1, 16, a, a, a, 16.0)
    with pytest.raises(TypeError, match="must be an int"):
        k.launch(1, 16, a, a, a, a)
    with pytest.raises(ValueError, match="out of range"):
        k.launch(1, 16, a, a, a, 2**31)
    other = hal.empty(16, np.float32, devices[1])
    with pytest.raises(hal.DeviceMismatchError, match="device 1"):
        k.launch(1, 16, a, other, a, 16)
    with pytest.raises(hal.InvalidLaunchError):
        k.launch(0, 16, a, a, a, 16)
    with pytest.raises(ValueError, match="1 to 3"):
        k.launch((1, 1, 1, 1), 16, a, a, a, 16)
    with pytest.raises(hal.NotFoundError):
        vadd_module.kernel("no_such_kernel")


def test_cpu_shared_object_kernel(dev, rng):
    path = vector_add_so()
    if path is None:
        pytest.skip("samples are not built (HAL_TEST_VECTOR_ADD_SO)")
    m = hal.Module(dev, path=path, format="cpu_shared_object")
    k = m.kernel("vector_add")
    n = 3001
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    dc = hal.empty(n, np.float32, dev)
    k.launch((n + 255) // 256, 256, hal.to_device(a, dev), hal.to_device(b, dev), dc, n)
    np.testing.assert_array_equal(dc.to_numpy(), a + b)


def test_kernel_on_wrapped_numpy_memory(dev, vadd_module, rng):
    # cpu devices reach process memory: wrapped numpy arrays are kernel arguments in place
    a = rng.standard_normal(512).astype(np.float32)
    c = np.zeros(512, np.float32)
    wa, wc = hal.from_dlpack(a, dev), hal.from_dlpack(c, dev)
    vadd_module.kernel("vadd").launch(2, 256, wa, wa, wc, 512)
    dev.synchronize()
    np.testing.assert_array_equal(c, a + a)


def test_unloaded_module_raises(dev):
    m = hal.Module(dev, source="kernel void k(global float* x) { x[0] = 1.0f; }")
    k = m.kernel("k")
    m.close()
    with pytest.raises(hal.DestroyedHandleError):
        k.launch(1, 1, hal.empty(1, np.float32, dev))
    s = hal.Stream(dev)
    s.close()
    with pytest.raises(hal.DestroyedHandleError):
        s.synchronize()


def test_integer_arguments_at_their_range_limits(dev):
    m = hal.Module(dev, source="""
        kernel void store(global i64* out, int a, unsigned b, i64 c, u64 d) {
          out[0] = a; out[1] = b; out[2] = c; out[3] = (i64)d;
        }""")
    k = m.kernel("store")
    assert k.arg_types == ["pointer", "i32", "u32", "i64", "u64"]
    out = hal.empty(4, np.int64, dev)
    limits = [(-2**31, 2**31 - 1), (0, 2**32 - 1), (-2**63, 2**63 - 1), (0, 2**64 - 1)]
    for low_or_high in (0, 1):
        values = [pair[low_or_high] for pair in limits]
        k.launch(1, 1, out, *values)
        got = out.to_numpy()
        assert list(got[:3]) == values[:3]
        assert int(got[3]) & (2**64 - 1) == values[3]
    for position, (low, high) in enumerate(limits):
        for bad in (low - 1, high + 1):
            values = [pair[0] for pair in limits]
            values[position] = bad
            with pytest.raises(ValueError, match="out of range"):
                k.launch(1, 1, out, *values)
