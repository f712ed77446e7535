"""Shared set-up of hal_torch's suites: they run against the cpu plugin with two devices
(CTest sets HAL_PLUGINS=cpu HAL_CPU_DEVICES=2 HAL_TORCH_FALLBACK=silent; run by hand, set
them too). hal_torch is imported before anything of torch.testing, whose device lists are
computed at import."""
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
