"""Shared fixtures: the suite runs against the cpu plugin with two devices (CTest sets
HAL_PLUGINS=cpu HAL_CPU_DEVICES=2; run by hand, set them too)."""
import os

import numpy as np
import pytest

import hal

VADD = """
kernel void vadd(global const float* a, global const float* b, global float* c, int n) {
  int i = global_id(0);
  if (i < n) c[i] = a[i] + b[i];
}
kernel void axpy(global double* y, global const double* x, double alpha, unsigned int n) {
  int i = global_id(0);
  if (i < n) y[i] = alpha * x[i] + y[i];
}
"""


@pytest.fixture(scope="session")
def devices():
    found = hal.devices()
    if len(found) < 1:
        pytest.fail("no HAL device: run with HAL_PLUGINS=cpu HAL_CPU_DEVICES=2")
    return found


@pytest.fixture(scope="session")
def dev(devices):
    return devices[0]


@pytest.fixture(scope="session")
def vadd_module(dev):
    return hal.Module(dev, source=VADD)


@pytest.fixture
def rng():
    return np.random.default_rng(20261201)


def vector_add_so():
    path = os.environ.get("HAL_TEST_VECTOR_ADD_SO", "")
    return path if path and os.path.exists(path) else None
