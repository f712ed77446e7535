"""The ops of the PyTorch device (issue 33) through hal.ops, against numpy on seeded random
inputs: unary math, binary ops with tensors and Python scalars (PyTorch's sign rules for
remainder and floor division, integer wrap-around, bool outputs), where, clamp, cumsum,
gather / index_select / scatter_add / index_add with out-of-range indices, cat, fill and
arange, the appended reductions, and bool buffers through DLPack."""
import math

import numpy as np
import pytest

import hal
from hal import ops

TOL = dict(rtol=2e-5, atol=2e-5)


def put(array, dev):
    return hal.to_device(np.ascontiguousarray(array), dev)


def test_bool_buffers_round_trip(dev, rng):
    mask = rng.random((5, 7)) < 0.5
    buffer = put(mask, dev)
    assert buffer.dtype == "bool"
    np.testing.assert_array_equal(buffer.to_numpy(), mask)


@pytest.mark.parametrize("name,low,high,ref", [
    ("exp", -8, 8, np.exp), ("expm1", -1e-3, 1e-3, np.expm1), ("log1p", -0.5, 10, np.log1p),
    ("log10", 1e-3, 100, np.log10), ("rsqrt", 1e-2, 100, lambda x: 1 / np.sqrt(x)),
    ("sigmoid", -20, 20, lambda x: 1 / (1 + np.exp(-x))), ("atan", -10, 10, np.arctan),
    ("erf", -3, 3, np.vectorize(math.erf)), ("tanh", -5, 5, np.tanh),
])
def test_unary_math_floats(dev, rng, name, low, high, ref):
    x = rng.uniform(low, high, (9, 33)).astype(np.float32)
    got = getattr(ops, name)(put(x, dev)).to_numpy()
    np.testing.assert_allclose(got, ref(x.astype(np.float64)), rtol=2e-5, atol=1e-6)


def test_unary_math_rounding_sign_and_predicates(dev):
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 2.4, -0.4, np.nan, np.inf, -np.inf, 0.0],
                 np.float32)
    np.testing.assert_array_equal(ops.round(put(x, dev)).to_numpy(), np.round(x))  # ties to even
    np.testing.assert_array_equal(ops.trunc(put(x, dev)).to_numpy(), np.trunc(x))
    sign = ops.sign(put(x, dev)).to_numpy()
    np.testing.assert_array_equal(sign, np.nan_to_num(np.sign(x), nan=0.0))  # torch.sign(nan) = 0
    for name, ref in (("isnan", np.isnan), ("isinf", np.isinf), ("isfinite", np.isfinite),
                      ("logical_not", np.logical_not)):
        got = getattr(ops, name)(put(x, dev))
        assert got.dtype == "bool"
        np.testing.assert_array_equal(got.to_numpy(), ref(x))


def test_unary_math_integers_wrap(dev):
    x = np.array([-128, -127, -1, 0, 5, 127], np.int8)
    np.testing.assert_array_equal(ops.abs(put(x, dev)).to_numpy(), np.abs(x))  # -128 stays
    np.testing.assert_array_equal(ops.neg(put(x, dev)).to_numpy(), -x)
    np.testing.assert_array_equal(ops.bitwise_not(put(x, dev)).to_numpy(), ~x)
    mask = np.array([True, False, True])
    np.testing.assert_array_equal(ops.bitwise_not(put(mask, dev)).to_numpy(), ~mask)


def test_binary_float_ops_follow_python_signs(dev, rng):
    a = rng.uniform(-50, 50, (6, 40)).astype(np.float32)
    b = rng.uniform(0.5, 7, (6, 40)).astype(np.float32) * np.where(rng.random((6, 40)) < 0.5, -1, 1)
    b = b.astype(np.float32)
    A, B = put(a, dev), put(b, dev)
    np.testing.assert_allclose(ops.remainder(A, B).to_numpy(), np.remainder(a, b), **TOL)
    np.testing.assert_allclose(ops.fmod(A, B).to_numpy(), np.fmod(a, b), **TOL)
    np.testing.assert_array_equal(ops.floor_divide(A, B).to_numpy(), np.floor_divide(a, b))
    np.testing.assert_allclose(ops.atan2(A, B).to_numpy(), np.arctan2(a, b), **TOL)
    base = np.abs(a) / 10 + 0.1
    np.testing.assert_allclose(ops.pow(put(base, dev), B).to_numpy(), base ** b.astype(np.float64),
                               rtol=1e-4)


def test_comparisons_and_logical_ops_give_bool(dev, rng):
    a = rng.integers(-3, 3, (4, 1, 5)).astype(np.float32)
    b = rng.integers(-3, 3, (1, 6, 5)).astype(np.float32)
    for name, ref in (("eq", np.equal), ("ne", np.not_equal), ("lt", np.less),
                      ("ge", np.greater_equal), ("logical_and", np.logical_and),
                      ("logical_xor", np.logical_xor)):
        got = getattr(ops, name)(put(a, dev), put(b, dev))
        assert got.dtype == "bool"
        np.testing.assert_array_equal(got.to_numpy(), ref(a, b))


def test_integer_arithmetic_wraps_and_divides_like_python(dev):
    a = np.array([100, -100, 7, -7, 127, -128], np.int8)
    b = np.array([100, 100, 2, 2, -1, -1], np.int8)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(ops.add(put(a, dev), put(b, dev)).to_numpy(), a + b)
    c = np.array([7, -7, 7, -7, 0, 9], np.int64)
    d = np.array([2, 2, -2, -2, 3, 0], np.int64)
    C, D = put(c, dev), put(d, dev)
    safe = np.where(d == 0, 1, d)
    np.testing.assert_array_equal(ops.floor_divide(C, D).to_numpy(),
                                  np.where(d == 0, 0, c // safe))  # x // 0 is 0 here
    np.testing.assert_array_equal(ops.remainder(C, D).to_numpy(), np.where(d == 0, 0, c % safe))
    np.testing.assert_array_equal(ops.bitwise_xor(C, D).to_numpy(), c ^ d)


def test_python_scalars_on_either_side(dev, rng):
    x = rng.uniform(-3, 3, (7, 9)).astype(np.float32)
    X = put(x, dev)
    np.testing.assert_allclose(ops.mul(X, 0.5).to_numpy(), x * 0.5, **TOL)
    np.testing.assert_allclose(ops.sub(1.0, X).to_numpy(), 1.0 - x, **TOL)
    np.testing.assert_array_equal(ops.gt(X, 0.0).to_numpy(), x > 0)
    np.testing.assert_allclose(ops.pow(X, 2).to_numpy(), x.astype(np.float64) ** 2, rtol=1e-5)
    ints = rng.integers(-20, 20, 30).astype(np.int32)
    half = ops.mul(put(ints, dev), 0.5)  # int * float computes in floats
    assert half.dtype == "float32"
    np.testing.assert_array_equal(half.to_numpy(), ints * 0.5)
    np.testing.assert_array_equal(ops.floor_divide(put(ints, dev), 3).to_numpy(), ints // 3)


def test_where_and_clamp(dev, rng):
    x = rng.standard_normal((8, 10)).astype(np.float32)
    mask = rng.random((8, 1)) < 0.5
    filled = ops.where(put(mask, dev), -math.inf, put(x, dev)).to_numpy()
    np.testing.assert_array_equal(filled, np.where(mask, -np.inf, x))
    y = rng.standard_normal((1, 10)).astype(np.float32)
    np.testing.assert_array_equal(ops.where(put(mask, dev), put(x, dev), put(y, dev)).to_numpy(),
                                  np.where(mask, x, y))
    np.testing.assert_array_equal(ops.clamp(put(x, dev), -0.5, 0.5).to_numpy(),
                                  np.clip(x, -0.5, 0.5))
    lo = rng.standard_normal((8, 1)).astype(np.float32)
    np.testing.assert_array_equal(ops.clamp(put(x, dev), put(lo, dev)).to_numpy(),
                                  np.maximum(x, lo))


def test_cumsum_cumprod(dev, rng):
    x = rng.uniform(0.5, 1.5, (5, 60)).astype(np.float32)
    np.testing.assert_allclose(ops.cumsum(put(x, dev), 1).to_numpy(),
                               np.cumsum(x.astype(np.float64), 1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ops.cumprod(put(x, dev), 0).to_numpy(),
                               np.cumprod(x.astype(np.float64), 0), rtol=1e-5)
    mask = rng.random((3, 20)) < 0.7
    got = ops.cumsum(put(mask, dev), 1)
    assert got.dtype == "int64"
    np.testing.assert_array_equal(got.to_numpy(), np.cumsum(mask, 1))


def test_gather_index_select_and_scatters(dev, rng):
    x = rng.standard_normal((6, 9)).astype(np.float32)
    index = rng.integers(0, 9, (6, 4)).astype(np.int64)
    np.testing.assert_array_equal(ops.gather(put(x, dev), 1, put(index, dev)).to_numpy(),
                                  np.take_along_axis(x, index, 1))
    rows = np.array([5, 0, 2, 2], np.int32)
    np.testing.assert_array_equal(ops.index_select(put(x, dev), 0, put(rows, dev)).to_numpy(),
                                  x[rows])
    out = put(np.zeros((6, 9), np.float32), dev)
    src = rng.standard_normal((6, 4)).astype(np.float32)
    ops.scatter_add(out, 1, put(index, dev), put(src, dev))
    want = np.zeros((6, 9), np.float64)
    for r in range(6):
        for c in range(4):
            want[r, index[r, c]] += src[r, c]
    np.testing.assert_allclose(out.to_numpy(), want, **TOL)
    acc = put(np.zeros((6, 9), np.float32), dev)
    updates = rng.standard_normal((4, 9)).astype(np.float32)
    ops.index_add(acc, 0, put(rows, dev), put(updates, dev))
    want = np.zeros((6, 9), np.float32)
    np.add.at(want, rows, updates)
    np.testing.assert_allclose(acc.to_numpy(), want, **TOL)


def test_out_of_range_indices_raise_and_write_nothing(dev, rng):
    x = rng.standard_normal((4, 5)).astype(np.float32)
    bad = np.array([[0, 5], [1, -1], [2, 2], [4, 0]], np.int64)
    with pytest.raises(ops.IndexOutOfRange):
        ops.gather(put(x, dev), 1, put(bad, dev))
    out = put(np.zeros((4, 5), np.float32), dev)
    with pytest.raises(IndexError):
        ops.scatter(out, 1, put(bad, dev), put(np.ones((4, 2), np.float32), dev))
    written = out.to_numpy()
    assert written[0, 0] == 1 and written[1, 1] == 1 and written.sum() == 5  # the good ones
    # With a status buffer of its own the call stays asynchronous and only raises the word.
    status = ops.full((1,), 0, "int32", dev)
    ops.gather(put(x, dev), 1, put(bad, dev), status=status)
    assert int(status.to_numpy()[0]) == 1


def test_cat_fill_arange(dev, rng):
    a = rng.standard_normal((2, 3)).astype(np.float32)
    b = rng.integers(-5, 5, (4, 3)).astype(np.int32)
    got = ops.cat([put(a, dev), put(b, dev)], 0)
    np.testing.assert_array_equal(got.to_numpy(), np.concatenate([a, b.astype(np.float32)], 0))
    np.testing.assert_array_equal(ops.arange(10, device=dev).to_numpy(), np.arange(10))
    np.testing.assert_array_equal(ops.arange(5, -5, -3, device=dev).to_numpy(),
                                  np.arange(5, -5, -3))
    np.testing.assert_allclose(ops.arange(0.0, 1.0, 0.1, dtype="float32", device=dev).to_numpy(),
                               np.arange(0.0, 1.0, 0.1).astype(np.float32), rtol=0, atol=0)
    np.testing.assert_array_equal(ops.full((2, 3), 7, "int8", dev).to_numpy(),
                                  np.full((2, 3), 7, np.int8))


def test_reductions_appended(dev, rng):
    x = rng.integers(0, 5, (7, 11)).astype(np.float32)  # ties
    X = put(x, dev)
    np.testing.assert_array_equal(ops.argmax(X, 1).to_numpy()[:, 0], np.argmax(x, 1))
    np.testing.assert_array_equal(ops.argmin(X).to_numpy().reshape(()), np.argmin(x))
    np.testing.assert_array_equal(ops.reduce(X, 0, "min").to_numpy()[0], x.min(0))
    y = rng.uniform(0.8, 1.2, (7, 11)).astype(np.float32)
    np.testing.assert_allclose(ops.reduce(put(y, dev), 1, "prod").to_numpy()[:, 0],
                               y.astype(np.float64).prod(1), rtol=1e-5)
    np.testing.assert_allclose(ops.reduce(put(y, dev), (0, 1), "norm2").to_numpy().reshape(()),
                               np.linalg.norm(y.astype(np.float64)), rtol=1e-5)
    mask = rng.random((7, 11)) < 0.3
    count = ops.reduce(put(mask, dev), (0, 1), "sum")
    assert count.dtype == "int64" and int(count.to_numpy().reshape(())) == int(mask.sum())
    np.testing.assert_array_equal(ops.reduce(put(mask, dev), 1, "max").to_numpy()[:, 0],
                                  mask.any(1))


def test_rules_raise_hal_errors(dev):
    x = put(np.zeros((3, 4), np.float32), dev)
    with pytest.raises(hal.Error):
        ops.bitwise_and(x, x)  # bitwise on floats
    with pytest.raises(hal.Error):
        ops.exp(put(np.zeros(3, np.int32), dev))
    with pytest.raises(hal.Error):
        ops.cat([x, put(np.zeros((3, 5), np.float32), dev)], 0)
