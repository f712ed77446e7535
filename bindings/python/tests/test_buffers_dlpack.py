import numpy as np
import pytest

import hal

DTYPES = ["float32", "float64", "float16", "int32", "int64", "int8", "uint8"]


@pytest.mark.parametrize("kind", ["device", "host", "shared"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip_every_kind_and_dtype(dev, rng, kind, dtype):
    if kind != "device" and not dev.has_capability(kind + "_memory"):
        pytest.skip(f"device lacks {kind} memory")
    x = (rng.standard_normal((7, 13)) * 50).astype(dtype)
    buf = hal.empty(x.shape, x.dtype, dev, kind)
    assert (buf.shape, buf.dtype, buf.kind, buf.nbytes) == (x.shape, dtype, kind, x.nbytes)
    buf.copy_from(x)
    np.testing.assert_array_equal(buf.to_numpy(), x)


def test_numpy_view_shares_memory(dev, rng):
    buf = hal.to_device(rng.standard_normal(1000).astype(np.float32), dev)
    view = np.from_dlpack(buf)
    assert view.ctypes.data == buf.ptr
    assert view.shape == (1000,) and view.dtype == np.float32
    view[:] = 3.0  # writes through to the HAL allocation
    np.testing.assert_array_equal(buf.to_numpy(), np.full(1000, 3.0, np.float32))
    assert buf.__dlpack_device__() == (1, 0)
    del view


def test_from_dlpack_numpy_wraps_without_copy(dev, rng):
    x = rng.standard_normal((4, 5)).astype(np.float32)
    buf = hal.from_dlpack(x, dev)
    assert buf.ptr == x.ctypes.data and buf.kind == "external"
    assert buf.shape == (4, 5) and buf.dtype == "float32"
    copied = hal.from_dlpack(x, dev, copy=True)
    assert copied.ptr != x.ctypes.data and copied.kind == "device"
    np.testing.assert_array_equal(copied.to_numpy(), x)


def test_from_dlpack_of_a_hal_view_is_the_allocation(dev, rng):
    buf = hal.to_device(rng.integers(0, 100, 64, dtype=np.int32), dev)
    view = np.from_dlpack(buf)
    again = hal.from_dlpack(view)
    assert again.ptr == buf.ptr and again.kind == "device" and again.device == dev
    with pytest.raises(hal.DeviceMismatchError):
        hal.from_dlpack(view, hal.device(1))
    del again, view


def test_non_contiguous_is_value_error(dev):
    x = np.arange(20, dtype=np.float32).reshape(4, 5)[:, ::2]
    with pytest.raises(ValueError, match="not C-contiguous"):
        hal.from_dlpack(x, dev)
    buf = hal.empty(x.shape, np.float32, dev)
    with pytest.raises(ValueError, match="not C-contiguous"):
        buf.copy_from(x)


def test_capsule_consumed_twice(dev):
    x = np.arange(8, dtype=np.float32)
    capsule = x.__dlpack__()
    first = hal.from_dlpack(capsule, dev)
    np.testing.assert_array_equal(first.to_numpy(), x)
    with pytest.raises(ValueError, match="already consumed"):
        hal.from_dlpack(capsule, dev)


def test_size_and_dtype_mismatch_in_copy(dev):
    buf = hal.empty(4, np.float32, dev)
    with pytest.raises(ValueError, match="bytes"):
        buf.copy_from(np.zeros(5, np.float32))
    with pytest.raises(TypeError, match="dtype"):
        buf.copy_from(np.zeros(4, np.int32))
    with pytest.raises(TypeError, match="expected a hal.Buffer"):
        buf.copy_from("four floats")
    with pytest.raises(TypeError):
        hal.from_dlpack(np.zeros(3, np.complex64), dev)


def test_buffer_to_buffer_copy_and_fill(devices, rng):
    x = rng.standard_normal(333).astype(np.float64)
    a = hal.to_device(x, devices[0])
    b = hal.empty(333, np.float64, devices[1])
    b.copy_from(a)
    np.testing.assert_array_equal(b.to_numpy(), x)
    b.fill(0)
    np.testing.assert_array_equal(b.to_numpy(), np.zeros(333))


def test_async_copies_on_a_stream(dev, rng):
    x = rng.standard_normal(4096).astype(np.float32)
    s = hal.Stream(dev)
    buf = hal.empty(x.shape, x.dtype, dev)
    out = np.empty_like(x)
    buf.copy_from(x, stream=s)
    # the host arrays stay alive until synchronize, even without a reference here
    buf.copy_from(x.copy(), stream=s)
    host_out = buf.to_numpy(stream=s)
    s.synchronize()
    np.testing.assert_array_equal(host_out, x)
    del out


def test_freed_buffer_raises_and_close_with_views_refuses(dev):
    buf = hal.empty(16, np.float32, dev)
    view = np.from_dlpack(buf)
    with pytest.raises(hal.InvalidStateError, match="DLPack view"):
        buf.close()
    del view
    buf.close()
    assert buf.closed
    with pytest.raises(hal.DestroyedHandleError):
        buf.to_numpy()
    with pytest.raises(hal.DestroyedHandleError):
        np.from_dlpack(buf)


def test_zero_sized_buffer(dev):
    buf = hal.empty((0, 3), np.float32, dev)
    assert buf.nbytes == 0 and buf.to_numpy().shape == (0, 3)


def test_jax_round_trip(dev, rng):
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    x = rng.standard_normal(256).astype(np.float32)
    buf = hal.to_device(x, dev)
    j = jnp.from_dlpack(buf)
    np.testing.assert_array_equal(np.asarray(j), x)
    back = hal.from_dlpack(jnp.arange(10, dtype=jnp.int32) * 3, dev)
    np.testing.assert_array_equal(back.to_numpy(), np.arange(10, dtype=np.int32) * 3)
    assert jax.devices()[0].platform == "cpu"


def test_torch_round_trip_when_installed(dev, rng):
    torch = pytest.importorskip("torch")
    x = rng.standard_normal(64).astype(np.float32)
    buf = hal.to_device(x, dev)
    t = torch.from_dlpack(buf)
    assert t.data_ptr() == buf.ptr
    np.testing.assert_array_equal(t.numpy(), x)
    w = hal.from_dlpack(torch.arange(5, dtype=torch.int64), dev)
    assert w.ptr != 0 and w.to_numpy().tolist() == [0, 1, 2, 3, 4]


def test_dlpack_stream_protocol_and_versions(dev, vadd_module, rng):
    n = 4096
    a = rng.standard_normal(n).astype(np.float32)
    da = hal.to_device(a, dev)
    dc = hal.empty(n, np.float32, dev)
    s = hal.Stream(dev)
    vadd_module.kernel("vadd").launch(n // 256, 256, da, da, dc, n, stream=s)
    # no synchronize: the export waits for the device's work before handing the capsule out
    capsule = dc.__dlpack__(stream=s, max_version=(1, 0))
    assert "dltensor_versioned" in repr(capsule)
    legacy = dc.__dlpack__(stream=None)
    assert '"dltensor"' in repr(legacy)
    np.testing.assert_array_equal(np.from_dlpack(dc), a + a)
    with pytest.raises(TypeError, match="stream must be"):
        dc.__dlpack__(stream="default")
    with pytest.raises(ValueError, match="copy=True"):
        dc.__dlpack__(copy=True)
    del capsule, legacy


# ---- read-only producers, devices, producers' errors, edge shapes (issue 37) ---------------


def test_read_only_numpy_is_never_written(dev):
    x = np.arange(8, dtype=np.float32)
    x.setflags(write=False)
    buf = hal.from_dlpack(x, dev)
    assert buf.read_only and buf.kind == "external" and buf.ptr == x.ctypes.data
    with pytest.raises(hal.InvalidArgumentError, match="read-only"):
        buf.fill(0)
    with pytest.raises(hal.InvalidArgumentError, match="read-only"):
        buf.copy_from(np.zeros(8, np.float32))
    with pytest.raises(hal.InvalidArgumentError, match="read-only"):
        buf.copy_from(hal.empty(8, np.float32, dev))
    np.testing.assert_array_equal(x, np.arange(8, dtype=np.float32))
    # Reading is fine: a copy out, and an export that stays read-only.
    np.testing.assert_array_equal(buf.to_numpy(), x)
    view = np.from_dlpack(buf)
    assert not view.flags.writeable
    del view
    # A writable array wraps writable.
    w = np.arange(8, dtype=np.float32)
    assert not hal.from_dlpack(w, dev).read_only


def test_read_only_view_of_a_hal_allocation_stays_read_only(dev):
    buf = hal.to_device(np.arange(4, dtype=np.int32), dev)
    view = np.from_dlpack(buf)
    view.setflags(write=False)
    again = hal.from_dlpack(view)
    assert again.ptr == buf.ptr and again.read_only
    with pytest.raises(hal.InvalidArgumentError, match="read-only"):
        again.fill(0)
    del again, view


def test_read_only_buffers_and_kernels(dev, vadd_module):
    x = np.ones(256, np.float32)
    x.setflags(write=False)
    ro = hal.from_dlpack(x, dev)
    out = hal.empty(256, np.float32, dev)
    # A raw kernel's signature does not say what it writes: refused for any pointer.
    with pytest.raises(hal.InvalidArgumentError, match="read-only buffer"):
        vadd_module.kernel("vadd").launch(1, 256, ro, ro, out, 256)

    @hal.kernel
    def double_it(src: hal.f32[:], dst: hal.f32[:], n: hal.i32) -> None:
        i = hal.global_id(0)
        if i < n:
            dst[i] = src[i] * 2.0

    double_it.launch(1, 256, ro, out, 256)  # src is only read: accepted
    np.testing.assert_array_equal(out.to_numpy(), np.full(256, 2.0, np.float32))
    with pytest.raises(hal.InvalidArgumentError, match="read-only buffer"):
        double_it.launch(1, 256, out, ro, 256)  # dst is written
    np.testing.assert_array_equal(x, np.ones(256, np.float32))


def test_jax_arrays_are_read_only(dev):
    jnp = pytest.importorskip("jax.numpy")
    a = jnp.arange(6, dtype=jnp.float32)
    buf = hal.from_dlpack(a, dev)
    assert buf.read_only
    with pytest.raises(hal.InvalidArgumentError, match="read-only"):
        buf.fill(0)
    np.testing.assert_array_equal(np.asarray(a), np.arange(6, dtype=np.float32))


def test_from_dlpack_of_a_buffer_checks_the_device(devices):
    buf = hal.empty(4, np.float32, devices[0])
    assert hal.from_dlpack(buf) is buf
    assert hal.from_dlpack(buf, devices[0]) is buf
    with pytest.raises(hal.DeviceMismatchError, match="device 0, not to device 1"):
        hal.from_dlpack(buf, device=devices[1])
    buf.copy_from(np.arange(4, dtype=np.float32))
    copy = hal.from_dlpack(buf, copy=True)
    assert copy is not buf and copy.ptr != buf.ptr and copy.device == devices[0]
    np.testing.assert_array_equal(copy.to_numpy(), np.arange(4, dtype=np.float32))


def test_a_producers_buffer_error_passes_its_message_on(dev):
    class Refuses:
        def __dlpack__(self, **kwargs):
            raise BufferError("my producer cannot export a meta tensor")

        def __dlpack_device__(self):
            return (1, 0)

    with pytest.raises(BufferError, match="cannot export a meta tensor"):
        hal.from_dlpack(Refuses(), dev)
    ml_dtypes = pytest.importorskip("ml_dtypes")
    with pytest.raises(BufferError, match="DLPack only supports"):
        hal.from_dlpack(np.zeros(3, ml_dtypes.bfloat16), dev)


def test_zero_size_arrays_are_accepted(dev):
    for shape in [(0,), (0, 3), (3, 0), (2, 0, 5)]:
        x = np.zeros(shape, np.float32)
        wrapped = hal.from_dlpack(x, dev)
        assert wrapped.shape == shape and wrapped.nbytes == 0
        assert wrapped.to_numpy().shape == shape
        copied = hal.to_device(x, dev)
        assert copied.shape == shape and copied.to_numpy().shape == shape
        copied.copy_from(x)
    sliced = np.arange(10, dtype=np.float32)[5:5]
    assert hal.from_dlpack(sliced, dev).nbytes == 0


def test_numpy_asarray_of_a_buffer(dev, rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    buf = hal.to_device(x, dev)
    a = np.asarray(buf)
    assert a.dtype == np.float32 and a.shape == (3, 4) and a.ctypes.data == buf.ptr
    np.testing.assert_array_equal(a, x)
    del a
    copied = np.array(buf)  # numpy's copy
    assert copied.ctypes.data != buf.ptr
    np.testing.assert_array_equal(copied, x)
    as_f64 = np.asarray(buf, dtype=np.float64)
    assert as_f64.dtype == np.float64
    np.testing.assert_array_equal(as_f64, x.astype(np.float64))
    with pytest.raises(TypeError, match="bfloat16"):
        np.asarray(hal.empty(2, "bfloat16", dev))


def test_tensor_views_export_dlpack(dev):
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    buf = hal.to_device(x, dev)
    view = hal.Tensor(buf, shape=(3, 2), strides=(6, 2), offset=7)  # x[1:4, 1:5:2]
    expected = x[1:4, 1:5:2]
    seen = np.from_dlpack(view)
    assert seen.shape == (3, 2) and seen.strides == (24, 8)
    np.testing.assert_array_equal(seen, expected)
    np.testing.assert_array_equal(np.asarray(view), expected)
    assert view.__dlpack_device__() == (1, 0)
    seen[0, 0] = -1.0  # writes through to the buffer
    assert buf.to_numpy()[1, 1] == -1.0
    del seen
    jnp = pytest.importorskip("jax.numpy")
    np.testing.assert_array_equal(np.asarray(jnp.from_dlpack(hal.Tensor(buf, shape=(6,), offset=6))),
                                  buf.to_numpy()[1])


def test_to_device_keeps_zero_d_shape(dev):
    buf = hal.to_device(np.array(3.5), dev)
    assert buf.shape == () and buf.ndim == 0 and buf.size == 1
    assert buf.to_numpy().shape == () and buf.to_numpy() == 3.5
    assert hal.to_device(np.float32(2.0), dev).shape == ()
    assert hal.from_dlpack(np.array(7, np.int64), dev).shape == ()


def test_fp8_buffers_travel_through_dlpack_as_torch_float8(dev):
    # DLPack's kDLFloat8_e4m3fn (10) and kDLFloat8_e5m2 (12), 8 bits: torch's
    # float8 dtypes see the same bytes; numpy, which has no 8-bit floats, refuses.
    codes = np.array([0x38, 0xB8, 0x7E, 0x01], np.uint8)  # e4m3: 1, -1, 448, 2^-9
    for name in ("float8_e4m3fn", "float8_e5m2"):
        buf = hal.empty(4, name, dev)
        assert buf.dtype == name and buf.nbytes == 4
        with pytest.raises(TypeError, match=name):
            np.asarray(buf)
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch has no float8 dtypes")
    bits = torch.from_numpy(codes)
    for torch_dtype, name in ((torch.float8_e4m3fn, "float8_e4m3fn"),
                              (torch.float8_e5m2, "float8_e5m2")):
        try:
            wrapped = hal.from_dlpack(bits.view(torch_dtype), dev)
        except BufferError:
            pytest.skip("this torch does not export float8 through DLPack")
        assert wrapped.dtype == name
        back = torch.from_dlpack(wrapped)
        assert back.dtype == torch_dtype
        assert torch.equal(back.view(torch.uint8), bits)
    e4m3 = torch.from_dlpack(hal.from_dlpack(bits.view(torch.float8_e4m3fn), dev))
    assert e4m3.float().tolist() == [1.0, -1.0, 448.0, 2.0**-9]
