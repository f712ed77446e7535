"""The hal device as PyTorch users see it: devices, copies, memory, streams, random numbers,
DLPack, the fallback and its modes, and what bad input gets. Values are checked against the
same operation on the CPU (exact for copies)."""
import gc
import warnings

import numpy as np
import pytest
import torch

import hal
import hal_torch
from conftest import native_and_fallback


def test_devices_and_module():
    assert torch._C._get_privateuse1_backend_name() == "hal"
    assert torch.hal.is_available() and torch.hal.device_count() == 2
    props = torch.hal.get_device_properties(1)
    assert props["plugin"] == "cpu" and props["total_memory"] > 0
    assert torch.device("hal:1").index == 1
    previous = torch.hal.current_device()
    with torch.hal.device(1):
        assert torch.hal.current_device() == 1
        assert torch.empty(2, device="hal").device == torch.device("hal:1")
    assert torch.hal.current_device() == previous


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16,
                                   torch.int64, torch.int32, torch.uint8, torch.bool])
def test_copies_both_ways(dtype):
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(5, 7, generator=g) * 10).to(dtype)
    on = x.to("hal")
    assert on.device.type == "hal" and on.dtype == dtype
    assert torch.equal(on.cpu(), x)
    assert torch.equal(on.to("hal:1").cpu(), x)  # between devices


def test_strided_copies():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(6, 8, generator=g)
    for view in (x.t(), x[::2, 1::3], x.unsqueeze(0).expand(3, 6, 8)):
        on = view.to("hal")
        assert torch.equal(on.cpu(), view.contiguous())
    dst = torch.zeros(8, 6, device="hal")
    dst.copy_(x.to("hal").t())  # strided device-to-device
    assert torch.equal(dst.cpu(), x.t())
    dst_cpu = torch.zeros(8, 6).t()
    dst_cpu.copy_(x.to("hal"))  # hal -> a strided host view
    assert torch.equal(dst_cpu, x)
    sliced = torch.zeros(6, 16, device="hal:1")
    sliced[:, ::2] = x.to("hal:0")  # across devices into a strided view
    assert torch.equal(sliced.cpu()[:, ::2], x)
    row = torch.arange(8.0)
    broadcast = torch.empty(3, 8, device="hal")
    broadcast.copy_(row.to("hal"))
    assert torch.equal(broadcast.cpu(), row.expand(3, 8))


def test_casts_on_the_device():
    x = torch.tensor([-2.5, -0.0, 0.0, 1.5, 3.7, float("nan")])
    on = x.to("hal")
    assert torch.equal(on.to(torch.bfloat16).cpu(), x.to(torch.bfloat16), equal_nan=True) \
        if hasattr(torch, "equal_nan") else torch.allclose(
            on.to(torch.bfloat16).cpu().float(), x.to(torch.bfloat16).float(), equal_nan=True)
    assert torch.equal(on[:5].to(torch.int32).cpu(), x[:5].to(torch.int32))
    assert torch.equal(on.to(torch.bool).cpu(), x.to(torch.bool))


def test_module_to_and_generated_methods():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3),
                                torch.nn.Linear(3, 3))
    model[2].weight = torch.nn.Parameter(torch.zeros(3, 3))
    tied = torch.nn.Sequential(torch.nn.Embedding(5, 3), torch.nn.Linear(3, 5, bias=False))
    tied[1].weight = tied[0].weight
    before = model[0].weight
    model.to("hal:1")
    tied.to("hal")
    assert all(p.device == torch.device("hal:1") for p in model.parameters())
    assert model[0].weight is before  # converted in place: references to it stay valid
    assert tied[1].weight is tied[0].weight  # tied weights stay one parameter
    t = torch.ones(2).hal()
    assert t.is_hal and t.device.type == "hal"


def test_printing_item_and_factories():
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    on = x.to("hal")
    assert "device='hal:0'" in repr(on)
    assert on[1, 2].item() == 5.0
    for name, make in {
        "zeros": lambda d: torch.zeros(3, 4, device=d),
        "ones": lambda d: torch.ones(2, 5, dtype=torch.int64, device=d),
        "full": lambda d: torch.full((4,), 2.5, device=d),
        "arange": lambda d: torch.arange(2, 20, 3, device=d),
        "eye": lambda d: torch.eye(4, device=d),
        "linspace": lambda d: torch.linspace(0, 1, 7, device=d),
    }.items():
        assert torch.equal(make("hal").cpu(), make("cpu")), name


def test_views_share_memory_and_stay_native(metrics):
    x = torch.randn(4, 6, 8).to("hal")
    base = x.data_ptr()
    views = [x.view(24, 8), x.transpose(0, 2), x.permute(2, 0, 1), x[:, 1:3], x[1],
             x.unsqueeze(1).expand(4, 3, 6, 8), x.reshape(4, 48), x.flatten(), x.unfold(2, 4, 2),
             x.narrow(1, 2, 3), x.diagonal(0, 1, 2), x.as_strided((2, 2), (1, 8))]
    for v in views:
        assert v.untyped_storage().data_ptr() == base
    native, fell = native_and_fallback(metrics())
    assert not fell, f"views fell back: {fell}"


def test_pinned_memory_and_non_blocking_copies():
    x = torch.randn(1000)
    pinned = x.pin_memory()
    assert pinned.is_pinned()
    on = pinned.to("hal", non_blocking=True)
    back = torch.empty(1000).pin_memory()
    back.copy_(on * 2, non_blocking=True)
    torch.hal.synchronize()
    assert torch.equal(back, x * 2)


def test_streams_and_events():
    s = torch.hal.Stream()
    assert s.device_type == torch.device("hal").type or s.device.type == "hal"
    x = torch.randn(256, 256, device="hal")
    start = torch.hal.Event(enable_timing=True)
    end = torch.hal.Event(enable_timing=True)
    with torch.hal.stream(s):
        assert torch.hal.current_stream().stream_id == s.stream_id
        start.record()
        y = x @ x
        end.record()
    torch.hal.current_stream().wait_event(end)
    z = y.sum()  # on the default stream, after the event
    end.synchronize()
    s.synchronize()
    assert end.query() and s.query()
    assert start.elapsed_time(end) >= 0
    expected = (x.cpu() @ x.cpu()).sum()
    assert torch.allclose(z.cpu(), expected, rtol=1e-4, atol=1e-2)
    assert torch.hal.current_stream() == torch.hal.default_stream()


def test_memory_statistics_and_empty_cache():
    torch.hal.synchronize()
    gc.collect()
    torch.hal.empty_cache()
    before = torch.hal.memory_allocated(0)
    x = torch.empty(1 << 20, device="hal:0")  # 4 MiB
    assert torch.hal.memory_allocated(0) >= before + x.nbytes
    assert torch.hal.memory_reserved(0) >= torch.hal.memory_allocated(0)
    assert torch.hal.max_memory_allocated(0) >= torch.hal.memory_allocated(0)
    del x
    assert torch.hal.memory_allocated(0) == before
    reserved = torch.hal.memory_reserved(0)
    torch.hal.empty_cache()
    assert torch.hal.memory_reserved(0) < reserved
    stats = torch.hal.memory_stats(0)
    assert stats["num_device_free"] >= 1


def test_allocator_reuses_blocks_in_stream_order():
    torch.hal.empty_cache()
    a = torch.empty(1000, device="hal")
    ptr = a.data_ptr()
    del a
    b = torch.empty(1000, device="hal")  # the same block, same stream
    assert b.data_ptr() == ptr


def test_random_numbers_follow_the_hal_seed():
    torch.hal.manual_seed(1234)
    a = torch.randn(100, device="hal")
    torch.hal.manual_seed(1234)
    b = torch.randn(100, device="hal")
    assert torch.equal(a.cpu(), b.cpu())
    state = torch.hal.get_rng_state()
    c = torch.nn.functional.dropout(torch.ones(1000, device="hal"), 0.5)
    torch.hal.set_rng_state(state)
    d = torch.nn.functional.dropout(torch.ones(1000, device="hal"), 0.5)
    assert torch.equal(c.cpu(), d.cpu())
    kept = (c.cpu() != 0).float().mean().item()
    assert 0.4 < kept < 0.6 and set(c.cpu().unique().tolist()) <= {0.0, 2.0}
    torch.manual_seed(5)  # torch's global seed reaches the hal generators too
    e = torch.rand(10, device="hal:1")
    torch.manual_seed(5)
    assert torch.equal(e.cpu(), torch.rand(10, device="hal:1").cpu())


def test_dlpack_both_ways_without_copies():
    # A hal.Buffer (the hal package) becomes a hal tensor on the buffer's device.
    buf = hal.empty((4, 3), "float32", hal.devices()[1])
    t = hal_torch.from_dlpack(buf)
    assert t.device == torch.device("hal:1") and t.shape == (4, 3)
    t.fill_(7.0)
    torch.hal.synchronize(1)
    assert np.all(buf.to_numpy() == 7.0)
    # A hal tensor seen by the hal package: the same allocation.
    x = torch.arange(12.0, device="hal").reshape(3, 4)
    view = hal.from_dlpack(hal_torch.to_dlpack(x))
    assert np.array_equal(view.to_numpy().reshape(3, 4), x.cpu().numpy())
    # torch's own round trip keeps the device and the memory.
    y = torch.utils.dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(x))
    assert y.device == x.device and y.data_ptr() == x.data_ptr()
    with pytest.raises(ValueError, match="not inside a HAL allocation"):
        hal_torch.from_dlpack(np.zeros(3, dtype=np.float32))


def test_fallback_counts_and_modes(metrics):
    x = torch.randn(5, 4)
    on = x.to("hal")
    out = torch.cosh(on)  # no hal kernel: the CPU's, on the device memory itself
    assert torch.allclose(out.cpu(), torch.cosh(x))
    m = metrics()
    assert m["ops"]["aten::cosh.out"]["fallback"] == 1
    assert m["ops"]["aten::cosh.out"]["bytes_aliased"] > 0
    # In place and out= land in the device tensor, also through a strided view.
    view = on.t()
    view.cosh_()
    assert torch.allclose(on.cpu(), torch.cosh(x))
    res = torch.empty(0, device="hal")
    torch.cosh(torch.ones(3, device="hal"), out=res)
    assert res.shape == (3,) and torch.allclose(res.cpu(), torch.cosh(torch.ones(3)))
    hal_torch.set_fallback_mode("error")
    try:
        with pytest.raises(NotImplementedError, match="aten::cosh"):
            torch.cosh(on)
    finally:
        hal_torch.set_fallback_mode("silent")
    hal_torch.set_fallback_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.sinh(on)
            torch.sinh(on)
        said = [w for w in caught if "aten::sinh" in str(w.message)]
        assert len(said) == 1, [str(w.message) for w in caught]
    finally:
        hal_torch.set_fallback_mode("silent")
    assert "aten::cosh.out" in hal_torch.metrics_report()


def test_a_dtype_hal_lacks_falls_back_and_says_why(metrics):
    a = torch.randn(4, 5, dtype=torch.float64)
    b = torch.randn(5, 3, dtype=torch.float64)
    hal_torch.set_fallback_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = a.to("hal") @ b.to("hal")
    finally:
        hal_torch.set_fallback_mode("silent")
    assert torch.allclose(got.cpu(), a @ b)
    assert any("aten::mm" in str(w.message) and "dtype" in str(w.message) for w in caught), \
        [str(w.message) for w in caught]
    _, fell = native_and_fallback(metrics())
    assert any(op.startswith("aten::mm") for op in fell), fell


def test_tensors_on_two_devices_in_one_op():
    with pytest.raises(RuntimeError, match="same device|device"):
        torch.ones(3, device="hal:0") + torch.ones(3, device="hal:1")
    with pytest.raises(RuntimeError):
        torch.ones(3, 3, device="hal:0") @ torch.ones(3, 3, device="hal:1")


def test_index_out_of_range_is_an_index_error():
    x = torch.randn(5, 3, device="hal")
    with pytest.raises(IndexError):
        torch.index_select(x, 0, torch.tensor([1, 7], device="hal")).sum().item()
    # The device stays usable.
    assert torch.index_select(x, 0, torch.tensor([4], device="hal")).shape == (1, 3)


def test_out_of_memory_is_torch_out_of_memory_error():
    total = torch.hal.get_device_properties(0)["total_memory"]
    with pytest.raises(torch.OutOfMemoryError, match="allocating"):
        torch.empty(total * 2 // 4 + 1024, dtype=torch.float32, device="hal")
    assert torch.ones(4, device="hal").sum().item() == 4.0  # nothing lost


def test_bad_device_index():
    with pytest.raises((RuntimeError, IndexError)):
        torch.empty(2, device="hal:7")
