import hal
import pytest


def test_devices_and_properties(devices):
    assert hal.device_count() == len(devices) == 2
    for i, d in enumerate(devices):
        p = d.properties
        assert p.index == d.index == i
        assert p.plugin == "cpu"
        assert p.type == "cpu"
        assert "kernels" in p.capabilities
        assert "hal_dialect" in p.module_formats
        assert d.has_capability("kernels") and d.has_capability("HAL_DEVICE_CAP_KERNELS")
        assert len(p.uuid) == 16 and len(p.max_block_dims) == 3
        assert p.max_allocation_bytes > 0 and p.min_alignment_bytes > 0
    assert devices[0] == hal.device(0) and devices[0] != devices[1]
    assert hal.version()[0] == 1


def test_unknown_capability_is_value_error(dev):
    with pytest.raises(ValueError, match="unknown capability"):
        dev.has_capability("teleportation")


def test_every_result_code_has_its_class():
    names = dict(hal.result_names())
    for code, name in names.items():
        if code <= 1:  # HAL_SUCCESS and HAL_NOT_READY are not errors
            continue
        cls = hal.ERRORS[code]
        assert cls.name == name and issubclass(cls, hal.Error)
    assert set(hal.ERRORS) == {c for c in names if c > 1}
    # hal._errors.__all__ is a literal list for type checkers: it must name every class.
    from hal import _errors
    assert sorted(_errors.__all__) == sorted(
        ["Error", "ERRORS"] + [cls.__name__ for cls in hal.ERRORS.values()])


def test_error_carries_code_message_function_plugin(dev):
    with pytest.raises(hal.NotFoundError) as info:
        hal.device(99)
    e = info.value
    assert e.code == 14 and e.name == "HAL_ERROR_NOT_FOUND"
    assert e.function == "hal_device_get" and e.plugin == "loader"
    assert "99" in e.message and isinstance(e.native_code, int)
    assert isinstance(e, LookupError)


def test_hal_error_from_plugin_for_bad_module(dev):
    with pytest.raises(hal.InvalidModuleError) as info:
        hal.Module(dev, source="kernel void broken(")
    assert info.value.message


def test_unknown_names_are_value_errors(dev):
    with pytest.raises(ValueError, match="memory kind"):
        hal.Buffer(dev, 4, "float32", "nowhere")
    with pytest.raises(TypeError, match="not a HAL element type"):
        hal.Buffer(dev, 4, "complex64")
    with pytest.raises(ValueError, match="module format"):
        hal.Module(dev, source="x", format="punch_cards")
    with pytest.raises(ValueError, match="exactly one"):
        hal.Module(dev)


def test_fill_names_the_byte_range(dev):
    buf = hal.empty(4, "uint8", dev)
    with pytest.raises(ValueError, match=r"300 is not a byte: .*0\.\.255"):
        buf.fill(300)
    with pytest.raises(ValueError, match=r"0\.\.255"):
        buf.fill(-1)
    with pytest.raises(TypeError, match=r"an int in 0\.\.255"):
        buf.fill(1.5)
    buf.fill(255)
    assert buf.to_numpy().tolist() == [255] * 4
    wide = hal.empty(2, "int32", dev)
    with pytest.raises(ValueError, match="int32 buffer's elements take the byte repeated"):
        wide.fill(256)


def test_dtype_names_of_the_kernel_language(dev):
    for spec, name in [("bf16", "bfloat16"), (hal.bf16, "bfloat16"), ("f32", "float32"),
                       (hal.f32, "float32"), ("f16", "float16"), ("i64", "int64"),
                       (hal.i32, "int32"), ("u8", "uint8"), ("bfloat16", "bfloat16")]:
        assert hal.empty(4, spec, dev).dtype == name, spec
    with pytest.raises(TypeError, match="u32 and u64 arrays use int32 and int64 buffers"):
        hal.empty(4, hal.u32, dev)
    with pytest.raises(TypeError, match="not a HAL element type"):
        hal.empty(4, "c8", dev)
