"""@hal.kernel: restricted Python translated to the kernel dialect, against numpy, on every
device the suite has; and what it refuses, with the Python line."""
import inspect
import linecache
import os
import sys

import numpy as np
import pytest

import hal

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "samples", "python"))
import kernels_in_python as samples  # noqa: E402


@hal.kernel
def scaled_add(a: hal.f32[:], b: hal.f32[:], out: hal.f32[:], alpha: hal.f32, n: hal.i32):
    i = hal.global_id(0)
    if i < n:
        out[i] = alpha * a[i] + b[i]


@hal.kernel
def int_semantics(x: hal.i32[:], out: hal.f32[:], quotient: hal.i32[:], n: hal.i32):
    i = hal.global_id(0)
    if i >= n:
        return
    out[i] = x[i] / 4  # Python's true division: a float
    quotient[i] = x[i] // 4 if x[i] >= 0 else -(-x[i] // 4)
    total = 0
    for j in range(x[i] % 5):
        total += j
    k = 10
    while k > 0 and total > 100:
        k -= 1
    quotient[i] += total * 1000


@hal.kernel
def histogram(values: hal.i32[:], bins: hal.i32[:], n: hal.i32):
    counts = hal.shared(hal.i32, 16)
    t = hal.local_id(0)
    for b in range(t, 16, hal.local_size(0)):
        counts[b] = 0
    hal.barrier()
    for i in range(hal.global_id(0), n, hal.global_size(0)):
        hal.atomic_add(counts, values[i] % 16, 1)
    hal.barrier()
    for b in range(t, 16, hal.local_size(0)):
        hal.atomic_add(bins, b, counts[b])


@hal.kernel
def halves(x: hal.f16[:], y: hal.bf16[:], n: hal.i32):
    i = hal.global_id(0)
    if i < n:
        y[i] = x[i] * 2.0 + hal.sqrt(abs(x[i]))


def test_elementwise_and_scalars(devices, rng):
    n = 1001
    a, b = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    for device in devices:
        out = hal.empty(n, np.float32, device)
        scaled_add.launch((n + 127) // 128, 128, hal.to_device(a, device),
                          hal.to_device(b, device), out, 0.5, n)
        np.testing.assert_allclose(out.to_numpy(), 0.5 * a + b, rtol=1e-6)
    assert "kernel void scaled_add(global const float* a" in scaled_add.source


def test_python_integer_semantics(dev, rng):
    n = 300
    x = rng.integers(0, 1000, n).astype(np.int32)
    out, quotient = hal.empty(n, np.float32, dev), hal.empty(n, np.int32, dev)
    int_semantics.launch(3, 128, hal.to_device(x, dev), out, quotient, n)
    np.testing.assert_array_equal(out.to_numpy(), (x / 4).astype(np.float32))
    totals = np.array([sum(range(v % 5)) for v in x])
    np.testing.assert_array_equal(quotient.to_numpy(), x // 4 + totals * 1000)


def test_shared_memory_barriers_and_atomics(devices, rng):
    n = 5000
    values = rng.integers(0, 1 << 20, n).astype(np.int32)
    for device in devices:
        bins = hal.to_device(np.zeros(16, np.int32), device)
        histogram.launch(4, 64, hal.to_device(values, device), bins, n)
        np.testing.assert_array_equal(bins.to_numpy(), np.bincount(values % 16, minlength=16))


def test_f16_and_bf16_arrays_read_and_write_as_f32(dev, rng):
    n = 100
    x = rng.standard_normal(n).astype(np.float16)
    y = hal.empty(n, "bf16", dev)  # a bf16[:] parameter takes a bfloat16 buffer only
    halves.launch(1, 128, hal.to_device(x, dev), y, n)
    # numpy has no bfloat16: the bits come back through a float16 buffer (a byte copy).
    bits = hal.empty(n, np.float16, dev)
    bits.copy_from(y)
    expected = x.astype(np.float32) * 2 + np.sqrt(np.abs(x.astype(np.float32)))
    got = (bits.to_numpy().view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_allclose(got, expected, rtol=2 ** -8)


@pytest.mark.parametrize("m,n,k", [(64, 64, 64), (70, 33, 45), (1, 17, 100)])
def test_sample_matmul(devices, rng, m, n, k):
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    for device in devices:
        c = hal.empty((m, n), np.float32, device)
        tile = samples.TILE
        samples.matmul.launch(((n + tile - 1) // tile, (m + tile - 1) // tile), (tile, tile),
                              hal.to_device(a, device), hal.to_device(b, device), c, m, n, k)
        np.testing.assert_allclose(c.to_numpy(), a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("s", [1, 64, 150])
def test_sample_attention(devices, rng, s):
    d = samples.D
    q, k, v = (rng.standard_normal((s, d), dtype=np.float32) for _ in range(3))
    scale = float(1 / np.sqrt(d))
    for device in devices:
        out = hal.empty((s, d), np.float32, device)
        samples.attention.launch((s + samples.BLOCK - 1) // samples.BLOCK, samples.BLOCK,
                                 hal.to_device(q, device), hal.to_device(k, device),
                                 hal.to_device(v, device), out, s, scale)
        np.testing.assert_allclose(out.to_numpy(), samples.reference_attention(q, k, v, scale),
                                   rtol=1e-4, atol=1e-5)


def test_sample_kernels_are_short():
    for fn in (samples.matmul.fn, samples.attention.fn):
        assert len(inspect.getsourcelines(fn)[0]) < 70


def line_of(fn, text):
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def refused(fn, text, match):
    with pytest.raises(hal.KernelSourceError, match=match) as info:
        hal.kernel(fn)
    assert info.value.lineno == line_of(fn, text)
    assert info.value.filename == __file__
    assert f"{__file__}:{info.value.lineno}:" in str(info.value)
    assert isinstance(info.value, hal.InvalidModuleError)


def test_refusals_name_the_python_line():
    def tuple_assign(a: hal.f32[:]):
        x, y = 1, 2

    refused(tuple_assign, "x, y =", "tuples")

    def float_into_int(a: hal.f32[:]):
        acc = 0
        acc += a[0]

    refused(float_into_int, "acc += a[0]", "start it as a float")

    def unknown_call(a: hal.f32[:]):
        a[0] = len(a)

    refused(unknown_call, "len(a)", "cannot be called")

    def step_zero(a: hal.f32[:], n: hal.i32):
        for i in range(0, 10, 0):
            a[i] = 0.0

    refused(step_zero, "range(0, 10, 0)", "zero")

    def with_statement(a: hal.f32[:]):
        with open("x"):
            pass

    refused(with_statement, "with open", "not supported")

    def returns_value(a: hal.f32[:]):
        return 1

    refused(returns_value, "return 1", "returns nothing")

    def python_object(a: hal.f32[:]):
        a[0] = np.pi * 2 if np else 0.0

    refused(python_object, "np.pi", "cannot be used")

    def shared_in_loop(a: hal.f32[:]):
        for i in range(2):
            t = hal.shared(hal.f32, 4)

    refused(shared_in_loop, "hal.shared", "top level")

    def untyped(a):
        pass

    with pytest.raises(hal.KernelSourceError, match="needs a type"):
        hal.kernel(untyped)


def test_compiler_diagnostics_name_the_python_line(dev):
    def two_roots(a: hal.f32[:]):
        a[0] = hal.sqrt(a[0], a[1])  # sqrt takes one value: the backend compiler says so

    translated = hal.kernel(two_roots)
    with pytest.raises(hal.InvalidModuleError) as info:
        translated.compile(dev)
    assert f"{__file__}:{line_of(two_roots, 'hal.sqrt(a[0], a[1])')}" in str(info.value)


@pytest.mark.parametrize("name", ["local", "double", "half", "private", "threadIdx", "float4",
                                  "uint", "restrict", "kernel", "main", "__x", "_Reserved",
                                  "hal_tmp", "not_eq", "std", "INFINITY", "sqrt"])
def test_names_a_backend_reserves_are_refused_at_translation(name):
    """Python accepts these names; C++, OpenCL C, CUDA or HIP refuses or reinterprets each."""
    source = f"def k(a: hal.f32[:], n: hal.i32):\n    {name} = 2.0\n    a[0] = {name}\n"
    filename = f"<reserved name {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"hal": hal}
    exec(compile(source, filename, "exec"), namespace)
    with pytest.raises(hal.KernelSourceError, match=f"'{name}' cannot be a local in a kernel"):
        hal.kernel(namespace["k"])


def test_reserved_names_in_every_position():
    def local_name(a: hal.f32[:]):
        local = a[0]
        a[1] = local

    refused(local_name, "local = a[0]", "'local' cannot be a local")

    def typed_local(a: hal.f32[:]):
        double: hal.f32 = 1.0
        a[0] = double

    refused(typed_local, "double: hal.f32", "'double' cannot be a local")

    def loop_variable(a: hal.f32[:]):
        for half in range(4):
            a[half] = 0.0

    refused(loop_variable, "for half in", "'half' cannot be a loop variable")

    def parameter(constant: hal.f32[:]):
        constant[0] = 1.0

    refused(parameter, "def parameter", "'constant' cannot be a parameter")

    def shared_array(a: hal.f32[:]):
        global_size = hal.shared(hal.f32, 4)  # noqa: F841
        a[0] = 0.0

    refused(shared_array, "global_size = hal.shared", "'global_size' cannot be a hal.shared array")

    def threadIdx(a: hal.f32[:]):  # noqa: N802
        a[0] = 0.0

    refused(threadIdx, "def threadIdx", "'threadIdx' cannot be the kernel's name")


def test_array_dtypes_are_checked_at_launch(dev):
    n = 8
    ints = hal.to_device(np.arange(n, dtype=np.int32), dev)
    floats = hal.empty(n, np.float32, dev)
    with pytest.raises(TypeError, match=r"argument 0 \('a: hal.f32\[:\]'\) needs a buffer of "
                                        r"float32, got a int32 buffer"):
        scaled_add.launch(1, n, ints, floats, floats, 1.0, n)
    with pytest.raises(TypeError, match="argument 2 .*float64 buffer"):
        scaled_add.launch(1, n, floats, floats, hal.empty(n, np.float64, dev), 1.0, n)
    with pytest.raises(TypeError, match="takes 5 kernel arguments"):
        scaled_add.launch(1, n, floats, floats, floats, 1.0)

    @hal.kernel
    def count_up(out: hal.u32[:], n: hal.i32) -> None:
        i = hal.global_id(0)
        if i < n:
            out[i] = i

    counts = hal.empty(n, np.int32, dev)  # HAL has no uint32 buffers: u32[:] reads int32
    count_up.launch(1, n, counts, n)
    assert counts.to_numpy().tolist() == list(range(n))
    with pytest.raises(TypeError, match="needs a buffer of int32, got a int64"):
        count_up.launch(1, n, hal.empty(n, np.int64, dev), n)


def test_misuse_outside_kernels(dev):
    with pytest.raises(TypeError, match="launch"):
        scaled_add(1, 2)
    with pytest.raises(TypeError, match="inside a @hal.kernel"):
        hal.global_id(0)
    with pytest.raises(TypeError, match="casts inside"):
        hal.f32(1.0)
    with pytest.raises(TypeError, match="no Buffer"):
        scaled_add.launch(1, 1, 1.0, 2)
    buffer = hal.empty(4, np.float32, dev)
    with pytest.raises(TypeError):  # a scalar where the signature wants an array
        scaled_add.launch(1, 4, buffer, 1.0, buffer, 1.0, 4)
