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
