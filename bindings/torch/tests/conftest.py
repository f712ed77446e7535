"""Shared set-up of hal_torch's suites: they run against two HAL devices, the cpu plugin's two
(CTest sets HAL_PLUGINS=cpu HAL_CPU_DEVICES=2 HAL_TORCH_FALLBACK=silent; run by hand, set
them too), or, for the opencl runs, PoCL's device as hal:0 and the cpu plugin's as hal:1
(HAL_PLUGINS=opencl,cpu HAL_CPU_DEVICES=1: HAL numbers devices in plugin load order).
HAL_TORCH_TEST_PLUGIN names the plugin hal:0 must belong to, so a run meant for opencl cannot
pass on another device (a PoCL without devices leaves the cpu plugin's as hal:0).
HAL_TORCH_TEST_FROM names the environment hal_torch must come from (CTest, in a tree that tests
the wheel torch.wheel installed there): a copy elsewhere on the path would test other code.
hal_torch is imported before anything of torch.testing, whose device lists are computed at
import."""
import os
import sys

import pytest
import torch

import hal_torch  # noqa: F401  (registers the hal device)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "samples", "torch"))


@pytest.fixture(scope="session", autouse=True)
def two_devices():
    if torch.hal.device_count() < 2:
        pytest.fail(f"need two HAL devices (HAL_PLUGINS=cpu HAL_CPU_DEVICES=2), have "
                    f"{torch.hal.device_count()}")
    source = os.environ.get("HAL_TORCH_TEST_FROM")
    if source and not os.path.realpath(hal_torch.__file__).startswith(
            os.path.join(os.path.realpath(source), "")):
        pytest.fail(f"HAL_TORCH_TEST_FROM={source}, but hal_torch was imported from "
                    f"{hal_torch.__file__}")
    wanted = os.environ.get("HAL_TORCH_TEST_PLUGIN")
    plugin = torch.hal.get_device_properties(0)["plugin"]
    if wanted and plugin != wanted:
        pytest.fail(f"HAL_TORCH_TEST_PLUGIN={wanted}, but hal:0 is {plugin}'s "
                    f"({torch.hal.get_device_name(0)})")


@pytest.fixture
def metrics():
    """hal_torch.metrics() of what the test body runs."""
    hal_torch.reset_metrics()
    yield hal_torch.metrics
    hal_torch.reset_metrics()


def native_and_fallback(m: dict, ignore=("aten::_copy_from", "aten::_local_scalar_dense")):
    ops = {k: v for k, v in m["ops"].items() if k not in ignore}
    native = {k for k, v in ops.items() if v["native"]}
    fell = {k for k, v in ops.items() if v["fallback"]}
    return native, fell
