"""hal.ops' low-precision ops (SPEC §17.6: quantize, dequantize, scaled_matmul, fake_quantize and
its backward) in int8 against numpy references (float32 rounding where the op defines it, float64
sums), on seeded random inputs."""
import numpy as np
import pytest

import hal
from hal import ops


def put(array, dev):
    return hal.to_device(np.ascontiguousarray(array), dev)


def randn(rng, *shape, spread=1.0):
    return (rng.standard_normal(shape) * spread).astype(np.float32)


def int8_grid(v):
    """Round to nearest even, saturating to int8 (NaN aside)."""
    return np.clip(np.rint(v), -128, 127)


def test_quantize_per_row_and_dequantize(dev, rng):
    x = randn(rng, 6, 40)
    q, scale = ops.quantize(put(x, dev), "int8", (1, 0))
    q, scale = q.to_numpy(), scale.to_numpy()
    want_scale = (np.abs(x).max(axis=1, keepdims=True) / np.float32(127)).astype(np.float32)
    np.testing.assert_array_equal(scale, want_scale)
    np.testing.assert_array_equal(q, int8_grid(x / want_scale).astype(np.int8))
    back = ops.dequantize(put(q, dev), put(scale, dev), (1, 0)).to_numpy()
    np.testing.assert_array_equal(back, q.astype(np.float32) * scale)


def test_quantize_with_a_given_scale_saturates(dev, rng):
    x = randn(rng, 4, 16, spread=3.0)
    scale = np.array([[0.01]], np.float32)
    q, _ = ops.quantize(put(x, dev), "int8", (0, 0), scale=put(scale, dev))
    q = q.to_numpy()
    np.testing.assert_array_equal(q, int8_grid(x / scale).astype(np.int8))
    assert (q == 127).any() and (q == -128).any()


def test_scaled_matmul_against_float64(dev, rng):
    a = rng.integers(-128, 128, (9, 64), dtype=np.int8)
    b = rng.integers(-128, 128, (7, 64), dtype=np.int8)
    a_scale = (rng.random((9, 1)) * 0.1 + 0.01).astype(np.float32)
    b_scale = (rng.random((7, 1)) * 0.1 + 0.01).astype(np.float32)
    d = ops.scaled_matmul(put(a, dev), put(a_scale, dev), put(b, dev), put(b_scale, dev),
                          a_blocks=(1, 0), b_blocks=(1, 0)).to_numpy()
    a64 = a.astype(np.float64) * a_scale
    b64 = b.astype(np.float64) * b_scale
    want = a64 @ b64.T
    assert (np.abs(d - want) <= 1e-5 * (np.abs(a64) @ np.abs(b64).T)).all()


@pytest.mark.parametrize("reciprocal", [False, True])
@pytest.mark.parametrize("clip_rounded", [False, True])
def test_fake_quantize_forward_and_gradients(dev, rng, reciprocal, clip_rounded):
    rows, cols = 4, 50
    scale = np.array([[0.02], [0.03], [0.05], [0.011]], np.float32)
    x = randn(rng, rows, cols, spread=4.0)
    # The half quantum beyond each end of the range, where the two masks differ.
    x[:, :6] = np.array([127.3, 127.5, -128.2, -128.5, -128.7, 127.6], np.float32) * scale
    grad_y = randn(rng, rows, cols)
    y = ops.fake_quantize(put(x, dev), put(scale, dev), "int8", (1, 0),
                          reciprocal_scale=reciprocal).to_numpy()
    gx, gs = ops.fake_quantize_backward(put(x, dev), put(scale, dev), put(grad_y, dev), "int8",
                                        (1, 0), grad_scale_factor=0.5,
                                        reciprocal_scale=reciprocal, clip_rounded=clip_rounded)
    gx, gs = gx.to_numpy(), gs.to_numpy()
    v = (x * (np.float32(1) / scale)) if reciprocal else (x / scale)  # float32, as the op
    np.testing.assert_array_equal(y, (int8_grid(v) * scale).astype(np.float32))
    v = v.astype(np.float64)
    r = np.rint(v)
    if clip_rounded:
        below, above = r < -128, r > 127
    else:
        below, above = v < -128, v > 127
    inside = ~below & ~above
    np.testing.assert_array_equal(gx, np.where(inside, grad_y, 0))
    d = np.where(below, -128.0, np.where(above, 127.0, int8_grid(v) - v))
    terms = grad_y.astype(np.float64) * d
    want = 0.5 * terms.sum(axis=1, keepdims=True)
    assert (np.abs(gs - want) <= 1e-5 * np.abs(terms).sum(axis=1, keepdims=True)).all()
    # The bands are where the masks differ: exercised in every row.
    assert (inside[:, :6] != ((v[:, :6] >= -128) & (v[:, :6] <= 127))).any() == clip_rounded


def test_clip_rounded_is_int8_only(dev, rng):
    x = put(randn(rng, 2, 8), dev)
    scale = put(np.ones((1, 1), np.float32), dev)
    with pytest.raises(hal.InvalidArgumentError, match="CLIP_ROUNDED"):
        ops.fake_quantize_backward(x, scale, x, "float8_e4m3fn", clip_rounded=True)
