"""Shared fixtures: the suite runs against the cpu plugin with two devices (CTest sets
HAL_PLUGINS=cpu HAL_CPU_DEVICES=2; run by hand, set them too).

HAL_TEST_NO_COMPILER=1 (the packaging test python.wheel, which runs this suite against an
installed wheel with no compiler on PATH): a test that fails only because the cpu plugin has
no C++ compiler for a dialect kernel is reported as skipped with that reason; every other
failure stays a failure."""
from __future__ import annotations

import os
import re

import numpy as np
import pytest

import hal

NO_COMPILER = os.environ.get("HAL_TEST_NO_COMPILER") == "1"
NO_COMPILER_REASON = "needs a C++ compiler (the cpu plugin compiles dialect kernels with it)"


# What a child interpreter (a test's own subprocess) prints last when it died of the same cause:
# the test's assertion on its exit status carries the child's stderr.
_CHILD_WANTS_A_COMPILER = re.compile(
    r"^\s*hal\._errors\.UnsupportedError: HAL_ERROR_UNSUPPORTED: .*no C\+\+ compiler found",
    re.MULTILINE)


def _wants_a_compiler(error: BaseException | None) -> bool:
    while error is not None:
        if isinstance(error, hal.UnsupportedError) and "no C++ compiler found" in str(error):
            return True
        if isinstance(error, AssertionError) and _CHILD_WANTS_A_COMPILER.search(str(error)):
            return True
        error = error.__cause__ or error.__context__
    return False


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if NO_COMPILER and report.failed and call.excinfo is not None and \
            _wants_a_compiler(call.excinfo.value):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0,
                           f"Skipped: {NO_COMPILER_REASON}")

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
