"""hal.ops against independent numpy references, on seeded random inputs, plus the error paths:
wrong layouts, devices, fields and views give a hal.Error with a sentence, never a crash."""
import math

import numpy as np
import pytest

import hal
from hal import ops

TOL = dict(rtol=2e-5, atol=2e-5)


def put(array, dev):
    return hal.to_device(np.ascontiguousarray(array), dev)


def randn(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


def erf(x):
    return np.vectorize(math.erf)(x.astype(np.float64))


def gelu_erf(x):
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# ---- matmul ----------------------------------------------------------------------------------


def test_matmul_bias_relu_and_implementation(dev, rng):
    a, b, bias = randn(rng, 37, 20), randn(rng, 20, 29), randn(rng, 29)
    out = ops.matmul(put(a, dev), put(b, dev), bias=put(bias, dev), activation="relu")
    np.testing.assert_allclose(out.to_numpy(), np.maximum(a @ b + bias, 0), **TOL)
    planned = ops.plan("matmul", dev, a=put(a, dev), b=put(b, dev), d=out)
    assert planned.implementation  # "cpu.onednn" or whichever the list chose
    assert planned.operands == ["a", "b", "c", "d", "bias", "aux"]
    assert isinstance(planned.declines, list)
    planned.close()
    assert planned.closed


def test_matmul_transposes_batches_and_strided_views(dev, rng):
    a, b = randn(rng, 3, 16, 12), randn(rng, 1, 10, 16)  # a^T: [3, 12, 16]; b^T: [1, 16, 10]
    out = ops.matmul(put(a, dev), put(b, dev), transpose_a=True, transpose_b=True)
    want = np.swapaxes(a, 1, 2) @ np.swapaxes(b, 1, 2)
    np.testing.assert_allclose(out.to_numpy(), want, **TOL)
    # a transposed view of a [k, m] buffer through strides instead of the flag
    base = randn(rng, 8, 6)
    view = hal.Tensor(put(base, dev), (6, 8), (1, 6))
    np.testing.assert_array_equal(view.to_numpy(), base.T)
    w = randn(rng, 8, 5)
    np.testing.assert_allclose(ops.matmul(view, put(w, dev)).to_numpy(), base.T @ w, **TOL)


def test_matmul_accumulates_and_saves_aux(dev, rng):
    a, b, c = randn(rng, 9, 7), randn(rng, 7, 11), randn(rng, 9, 11)
    out = put(c, dev)
    ops.matmul(put(a, dev), put(b, dev), out=out, alpha=0.5, beta=2.0)
    np.testing.assert_allclose(out.to_numpy(), 0.5 * a @ b + 2 * c, **TOL)
    aux = hal.empty((9, 11), "float32", dev)
    out = ops.matmul(put(a, dev), put(b, dev), activation="gelu_erf", aux=aux)
    np.testing.assert_allclose(aux.to_numpy(), a @ b, **TOL)
    np.testing.assert_allclose(out.to_numpy(), gelu_erf(a @ b), rtol=1e-4, atol=1e-5)


def test_grouped_matmul(dev, rng):
    a, b = randn(rng, 10, 6), randn(rng, 3, 6, 4)
    offsets = np.array([0, 3, 3, 10], np.int32)  # group 1 is empty
    out = ops.grouped_matmul(put(a, dev), put(b, dev), put(offsets, dev))
    want = np.concatenate([a[0:3] @ b[0], a[3:10] @ b[2]])
    np.testing.assert_allclose(out.to_numpy(), want, **TOL)


def test_bias_activation_backward(dev, rng):
    g, aux = randn(rng, 13, 7), randn(rng, 13, 7)
    grad_pre, grad_bias = ops.bias_activation_backward(put(g, dev), put(aux, dev),
                                                       activation="relu",
                                                       compute_bias_grad=True)
    want = g * (aux > 0)
    np.testing.assert_allclose(grad_pre.to_numpy(), want, **TOL)
    np.testing.assert_allclose(grad_bias.to_numpy(), want.sum(0), **TOL)


# ---- softmax, norms --------------------------------------------------------------------------


def test_softmax_and_backward(dev, rng):
    x, gy = randn(rng, 6, 33), randn(rng, 6, 33)
    y = ops.softmax(put(x, dev))
    p = np_softmax(x)
    np.testing.assert_allclose(y.to_numpy(), p, **TOL)
    gx = ops.softmax_backward(y, put(gy, dev))
    np.testing.assert_allclose(gx.to_numpy(), p * (gy - (gy * p).sum(-1, keepdims=True)), **TOL)
    logy = ops.softmax(put(x, dev), log=True)
    np.testing.assert_allclose(logy.to_numpy(), np.log(p), rtol=1e-5, atol=1e-5)
    gx = ops.softmax_backward(logy, put(gy, dev), log=True)
    np.testing.assert_allclose(gx.to_numpy(), gy - p * gy.sum(-1, keepdims=True), **TOL)


def test_layer_norm_rms_norm_and_backward(dev, rng):
    x, gamma, beta, gy = randn(rng, 5, 24), randn(rng, 24), randn(rng, 24), randn(rng, 5, 24)
    y, mean, rstd = ops.layer_norm(put(x, dev), put(gamma, dev), put(beta, dev), eps=1e-5,
                                   save_stats=True)
    mu = x.mean(-1, keepdims=True)
    r = 1 / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
    xhat = (x - mu) * r
    np.testing.assert_allclose(y.to_numpy(), xhat * gamma + beta, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(mean.to_numpy(), mu[:, 0], **TOL)
    np.testing.assert_allclose(rstd.to_numpy(), r[:, 0], rtol=1e-5)
    gx, gg, gb = ops.norm_backward(put(x, dev), put(gy, dev), rstd, mean=mean,
                                   gamma=put(gamma, dev), grad_gamma=True, grad_beta=True)
    gxhat = gy * gamma
    want = r * (gxhat - gxhat.mean(-1, keepdims=True) -
                xhat * (gxhat * xhat).mean(-1, keepdims=True))
    np.testing.assert_allclose(gx.to_numpy(), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gg.to_numpy(), (gy * xhat).sum(0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gb.to_numpy(), gy.sum(0), rtol=1e-4, atol=1e-4)

    y, rs = ops.rms_norm(put(x, dev), put(gamma, dev), eps=1e-6, save_stats=True)
    r = 1 / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(y.to_numpy(), x * r * gamma, rtol=1e-4, atol=1e-5)
    gx, gg, _ = ops.norm_backward(put(x, dev), put(gy, dev), rs, gamma=put(gamma, dev),
                                  grad_gamma=True)
    gxhat = gy * gamma
    want = r * (gxhat - x * r * (gxhat * x * r).mean(-1, keepdims=True))
    np.testing.assert_allclose(gx.to_numpy(), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gg.to_numpy(), (gy * x * r).sum(0), rtol=1e-4, atol=1e-4)


# ---- elementwise -----------------------------------------------------------------------------


def test_binary_broadcast_and_nan(dev, rng):
    a, b = randn(rng, 4, 1, 6), randn(rng, 1, 5, 6)
    cases = {"add": a + b, "sub": a - b, "mul": a * b, "div": a / b,
             "max": np.maximum(a, b), "min": np.minimum(a, b)}
    for name, want in cases.items():
        got = ops.binary(name, put(a, dev), put(b, dev), alpha=1.5).to_numpy()
        np.testing.assert_allclose(got, 1.5 * want, rtol=1e-5, atol=1e-5, err_msg=name)
    nan = np.array([[np.nan, 1.0]], np.float32)
    got = ops.maximum(put(nan, dev), put(np.zeros((1, 2), np.float32), dev)).to_numpy()
    assert np.isnan(got[0, 0]) and got[0, 1] == 1.0


def test_unary_activations_and_backward(dev, rng):
    x, g = randn(rng, 3, 40), randn(rng, 3, 40)
    sig = 1 / (1 + np.exp(-x))
    np.testing.assert_allclose(ops.relu(put(x, dev)).to_numpy(), np.maximum(x, 0), **TOL)
    np.testing.assert_allclose(ops.silu(put(x, dev)).to_numpy(), x * sig, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ops.gelu(put(x, dev)).to_numpy(), gelu_erf(x), rtol=1e-5,
                               atol=1e-6)
    tanh = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(ops.gelu(put(x, dev), approximate="tanh").to_numpy(), tanh,
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ops.unary(put(x, dev), alpha=-2.0).to_numpy(), -2 * x, **TOL)
    gx = ops.unary_backward(put(x, dev), put(g, dev), "silu").to_numpy()
    np.testing.assert_allclose(gx, g * (sig * (1 + x * (1 - sig))), rtol=1e-4, atol=1e-5)


def test_swiglu_and_backward(dev, rng):
    x, g = randn(rng, 4, 2 * 9), randn(rng, 4, 9)
    gate, up = x[:, :9], x[:, 9:]
    sig = 1 / (1 + np.exp(-gate))
    np.testing.assert_allclose(ops.swiglu(put(x, dev)).to_numpy(), gate * sig * up, rtol=1e-5,
                               atol=1e-6)
    gx = ops.swiglu_backward(put(x, dev), put(g, dev)).to_numpy()
    dgate = g * up * sig * (1 + gate * (1 - sig))
    np.testing.assert_allclose(gx, np.concatenate([dgate, g * gate * sig], 1), rtol=1e-4,
                               atol=1e-5)


def test_reduce(dev, rng):
    x = randn(rng, 3, 4, 5)
    np.testing.assert_allclose(ops.reduce(put(x, dev), (0, 2)).to_numpy(),
                               x.sum((0, 2), keepdims=True), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ops.reduce(put(x, dev), -1, "mean").to_numpy(),
                               x.mean(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(ops.reduce(put(x, dev), 1, "max").to_numpy(),
                                  x.max(1, keepdims=True))
    with pytest.raises(ValueError, match="outside"):
        ops.reduce(put(x, dev), 3)


def test_rope(dev, rng):
    b, s, h, d = 2, 5, 3, 8
    x = randn(rng, b, s, h, d)
    got = ops.rope(put(x, dev), base=10000.0, position_offset=2).to_numpy()
    half = d // 2
    freq = 10000.0 ** (-2 * np.arange(half) / d)
    angle = (np.arange(s) + 2)[:, None] * freq[None, :]  # [s, half]
    cos, sin = np.cos(angle)[None, :, None, :], np.sin(angle)[None, :, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    want = np.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    back = ops.rope(put(got, dev), base=10000.0, position_offset=2, inverse=True).to_numpy()
    np.testing.assert_allclose(back, x, rtol=1e-4, atol=1e-5)


# ---- embedding, cross-entropy, optimizer ------------------------------------------------------


def test_embedding_and_backward(dev, rng):
    table, ids = randn(rng, 10, 4), np.array([[3, 0, 9], [3, 12, -1]], np.int32)
    out = ops.embedding(put(ids, dev), put(table, dev)).to_numpy()
    valid = (ids >= 0) & (ids < 10)
    want = np.where(valid[..., None], table[np.clip(ids, 0, 9)], 0)
    np.testing.assert_array_equal(out, want)
    g = randn(rng, 2, 3, 4)
    grad = ops.embedding_backward(put(ids, dev), put(g, dev), hal.empty((10, 4), "float32", dev))
    want = np.zeros((10, 4), np.float32)
    for i, v in np.ndenumerate(ids):
        if 0 <= v < 10:
            want[v] += g[i]
    np.testing.assert_allclose(grad.to_numpy(), want, **TOL)


def test_cross_entropy_with_smoothing_ignore_and_grad(dev, rng):
    logits, labels = randn(rng, 7, 11), np.array([1, 4, -100, 10, 0, 4, 2], np.int64)
    s = 0.1
    res = ops.cross_entropy(put(logits, dev), put(labels, dev), label_smoothing=s, grad=True,
                            row_losses=True, grad_scale=2.0)
    logp = np.log(np_softmax(logits.astype(np.float64)))
    counted = labels != -100
    rows = np.zeros(7)
    for r in np.nonzero(counted)[0]:
        rows[r] = -(1 - s) * logp[r, labels[r]] - s / 11 * logp[r].sum()
    np.testing.assert_allclose(res.row_losses.to_numpy(), rows, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(res.loss.to_numpy()[0], rows[counted].mean(), rtol=1e-5)
    onehot = np.zeros_like(logp)
    onehot[np.nonzero(counted)[0], labels[counted]] = 1
    grad = (np.exp(logp) - (1 - s) * onehot - s / 11) * counted[:, None] / counted.sum() * 2.0
    np.testing.assert_allclose(res.grad_logits.to_numpy(), grad, rtol=1e-4, atol=1e-6)


def test_adamw_matches_the_update_rule(dev, rng):
    shapes = [(5, 3), (7,)]
    p = [randn(rng, *s) for s in shapes]
    g = [randn(rng, *s) for s in shapes]
    m = [np.abs(randn(rng, *s)) * 0.1 for s in shapes]
    v = [np.abs(randn(rng, *s)) * 0.1 for s in shapes]
    bufs = [[put(x, dev) for x in group] for group in (p, g, m, v)]
    lr, step, b1, b2, eps, wd, clip = 1e-2, 3, 0.9, 0.95, 1e-8, 0.1, 1.0
    norm = ops.adamw(*bufs, lr=lr, step=step, betas=(b1, b2), eps=eps, weight_decay=wd,
                     max_grad_norm=clip, grad_norm=True)
    total = math.sqrt(sum(float((x.astype(np.float64) ** 2).sum()) for x in g))
    np.testing.assert_allclose(norm.to_numpy()[0], total, rtol=1e-5)
    scale = min(1.0, clip / (total + 1e-6))
    for t in range(2):
        gg = g[t] * scale
        mm = b1 * m[t] + (1 - b1) * gg
        vv = b2 * v[t] + (1 - b2) * gg * gg
        w = p[t] - lr * (mm / (1 - b1 ** step) / (np.sqrt(vv / (1 - b2 ** step)) + eps) +
                         wd * p[t])
        np.testing.assert_allclose(bufs[2][t].to_numpy(), mm, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(bufs[3][t].to_numpy(), vv, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(bufs[0][t].to_numpy(), w, rtol=1e-5, atol=1e-6)


# ---- casts, dropout --------------------------------------------------------------------------


def bf16_round(x):
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return rounded.astype(np.uint32).view(np.float32)


def test_cast_round_trip_saturation_and_permute(dev, rng):
    x = randn(rng, 6, 5) * 100
    back = ops.cast(ops.cast(put(x, dev), "bfloat16"), "float32").to_numpy()
    np.testing.assert_array_equal(back, bf16_round(x))
    big = np.array([3e9, -3e9, np.nan, -2.7], np.float32)
    np.testing.assert_array_equal(ops.cast(put(big, dev), "int32").to_numpy(),
                                  [2**31 - 1, -2**31, 0, -2])
    y = randn(rng, 2, 3, 4)
    np.testing.assert_array_equal(ops.permute(put(y, dev), (2, 0, 1)).to_numpy(),
                                  np.transpose(y, (2, 0, 1)))
    with pytest.raises(ValueError, match="permutation"):
        ops.permute(put(y, dev), (0, 0, 1))


def test_dropout_mask_scale_and_backward(dev, rng):
    x, g, p = randn(rng, 64, 64), randn(rng, 64, 64), 0.25
    out, mask = ops.dropout(put(x, dev), p, seed=1234, offset=8, mask=True)
    keep = mask.to_numpy().astype(bool)
    assert 0.70 < keep.mean() < 0.80
    np.testing.assert_allclose(out.to_numpy(), np.where(keep, x / (1 - p), 0), rtol=1e-6)
    again = ops.dropout(put(x, dev), p, seed=1234, offset=8).to_numpy()
    np.testing.assert_array_equal(again, out.to_numpy())
    grad = ops.dropout(put(g, dev), p, seed=1234, offset=8, backward=True).to_numpy()
    np.testing.assert_allclose(grad, np.where(keep, g / (1 - p), 0), rtol=1e-6)
    other = ops.dropout(put(x, dev), p, seed=1235, offset=8).to_numpy()
    assert not np.array_equal(other, out.to_numpy())


# ---- attention, routing ----------------------------------------------------------------------


def np_attention(q, k, v, causal):
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    out = np.zeros_like(q, dtype=np.float64)
    lse = np.zeros((b, h, sq))
    for bi in range(b):
        for hi in range(h):
            kh = hi // (h // hk)
            s = q[bi, :, hi].astype(np.float64) @ k[bi, :, kh].T.astype(np.float64) / math.sqrt(d)
            if causal:
                s = np.where(np.tril(np.ones((sq, sk), bool)), s, -np.inf)
            mx = s.max(-1, keepdims=True)
            e = np.exp(s - mx)
            lse[bi, hi] = (mx + np.log(e.sum(-1, keepdims=True)))[:, 0]
            out[bi, :, hi] = (e / e.sum(-1, keepdims=True)) @ v[bi, :, kh]
    return out, lse


def test_attention_forward_backward_gqa_causal(dev, rng):
    b, s, h, hk, d = 2, 19, 4, 2, 16
    q, k, v, go = randn(rng, b, s, h, d), randn(rng, b, s, hk, d), randn(rng, b, s, hk, d), \
        randn(rng, b, s, h, d)
    bufs = [put(x, dev) for x in (q, k, v)]
    out, lse = ops.attention(*bufs, causal="top_left")
    want, want_lse = np_attention(q, k, v, True)
    np.testing.assert_allclose(out.to_numpy(), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(lse.to_numpy(), want_lse, rtol=1e-5, atol=1e-5)
    gq, gk, gv = ops.attention_backward(*bufs, out, lse, put(go, dev), causal="top_left")
    # Finite-difference-free check: the gradients of sum(out * go) against numpy's chain rule.
    mask = np.tril(np.ones((s, s), bool))
    wq, wk, wv = np.zeros_like(q, np.float64), np.zeros_like(k, np.float64), \
        np.zeros_like(v, np.float64)
    for bi in range(b):
        for hi in range(h):
            kh = hi // (h // hk)
            qq, kk, vv = (x.astype(np.float64) for x in (q[bi, :, hi], k[bi, :, kh], v[bi, :, kh]))
            sc = np.where(mask, qq @ kk.T / math.sqrt(d), -np.inf)
            p = np.exp(sc - sc.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            g = go[bi, :, hi].astype(np.float64)
            dp = g @ vv.T
            ds = p * (dp - (dp * p).sum(-1, keepdims=True)) / math.sqrt(d)
            wq[bi, :, hi] += ds @ kk
            wk[bi, :, kh] += ds.T @ qq
            wv[bi, :, kh] += p.T @ g
    np.testing.assert_allclose(gq.to_numpy(), wq, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(gk.to_numpy(), wk, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(gv.to_numpy(), wv, rtol=1e-3, atol=1e-4)


def test_topk_gating(dev, rng):
    logits = randn(rng, 9, 8)
    weights, indices = ops.topk_gating(put(logits, dev), 2)
    p = np_softmax(logits.astype(np.float64))
    want_idx = np.argsort(-logits, axis=1, kind="stable")[:, :2]
    np.testing.assert_array_equal(indices.to_numpy(), want_idx)
    chosen = np.take_along_axis(p, want_idx, 1)
    np.testing.assert_allclose(weights.to_numpy(), chosen / chosen.sum(1, keepdims=True),
                               rtol=1e-5)


# ---- streams, plans, cache -------------------------------------------------------------------


def test_ops_on_an_explicit_stream_and_cached_plans(dev, rng):
    stream = hal.Stream(dev)
    x = put(randn(rng, 16, 16), dev)
    ops.clear_cache()
    y = ops.relu(x, stream=stream)
    y = ops.relu(y, stream=stream, out=y)
    assert len(ops._cache) == 1  # same layout: one plan
    stream.synchronize()
    np.testing.assert_array_equal(y.to_numpy(), np.maximum(x.to_numpy(), 0))
    assert set(ops.OPS) >= {"matmul", "attention", "adamw", "topk_gating"}


def test_generic_plan_and_execute_with_explicit_operands(dev, rng):
    a = randn(rng, 8, 8)
    x = put(a, dev)
    y = hal.empty((8, 8), "float32", dev)
    planned = hal.ops.plan("unary", dev, activation="relu", alpha=2.0, x=x, out=y)
    assert planned.op == "unary" and planned.scalars == []
    planned.execute([x, y])
    np.testing.assert_array_equal(y.to_numpy(), np.maximum(2 * a, 0))
    ce = hal.ops.plan("cross_entropy", dev, logits=x, labels=put(np.zeros(8, np.int32), dev),
                      loss=hal.empty((1,), "float32", dev))
    assert ce.scalars == ["grad_scale"]


# ---- bad input -------------------------------------------------------------------------------


def test_a_wrong_layout_at_execution_is_refused(dev, rng):
    x, y = put(randn(rng, 4, 6), dev), hal.empty((4, 6), "float32", dev)
    planned = ops.plan("softmax", dev, x=x, y=y)
    with pytest.raises(hal.InvalidArgumentError, match="plan was made for"):
        planned.execute([put(randn(rng, 6, 4), dev), y])
    with pytest.raises(hal.ArgumentMismatchError, match="takes 2 operands"):
        planned.execute([x])
    with pytest.raises(hal.ArgumentMismatchError, match="scalars"):
        planned.execute([x, y], [1.0])
    with pytest.raises(hal.InvalidArgumentError, match="plan was made for"):
        planned.execute([x, hal.empty((4, 6), "float64", dev)])
    with pytest.raises(TypeError, match="hal.Tensor or a hal.Buffer"):
        planned.execute([np.zeros((4, 6), np.float32), y])


def test_operands_on_another_device_are_refused(devices, rng):
    if len(devices) < 2:
        pytest.skip("needs two devices (HAL_CPU_DEVICES=2)")
    x0 = put(randn(rng, 4, 4), devices[0])
    x1 = put(randn(rng, 4, 4), devices[1])
    with pytest.raises(hal.DeviceMismatchError):
        ops.add(x0, x1)


def test_bad_fields_views_and_dtypes(dev, rng):
    x = hal.empty((4, 4), "float32", dev)
    with pytest.raises(ValueError, match="unknown op"):
        ops.plan("conv3d", dev)
    with pytest.raises(hal.ArgumentMismatchError, match="no field 'bogus'"):
        ops.plan("unary", dev, x=x, out=x, bogus=1)
    with pytest.raises(ValueError, match="unknown activation"):
        ops.unary(x, "swish")
    with pytest.raises(hal.InvalidArgumentError, match="reaches element"):
        hal.Tensor(x, (4, 4), (4, 2))
    with pytest.raises(hal.InvalidArgumentError, match=">= 0"):
        hal.Tensor(x, (4, 4), (-1, 1), offset=4)
    with pytest.raises(hal.InvalidArgumentError, match="out of range"):
        ops.plan("rope", dev, x=x, out=x, rotary_dim=-1)
    with pytest.raises(hal.InvalidArgumentError, match="dtype"):
        ops.matmul(hal.empty((4, 4), "int32", dev), hal.empty((4, 4), "int32", dev))
    wrapped = hal.from_dlpack(np.ones((4, 4), np.float32), dev)
    with pytest.raises(hal.InvalidArgumentError, match="not inside a HAL allocation"):
        ops.relu(wrapped)
        dev.synchronize()


def test_a_closed_buffer_raises_and_a_plan_outlives_nothing(dev, rng):
    x = put(randn(rng, 4, 4), dev)
    view = hal.Tensor(x, (2, 4), offset=8)
    x.close()
    with pytest.raises(hal.DestroyedHandleError):
        ops.relu(view)
    with pytest.raises(hal.DestroyedHandleError):
        view.to_numpy()
    planned = ops.plan("unary", dev, x=view, out=view)
    planned.close()
    with pytest.raises(hal.DestroyedHandleError):
        planned.execute([view, view])


def test_varlen_attention_matches_each_sequence_alone(dev, rng):
    lengths_q, lengths_k, h, d = [5, 0, 11], [7, 3, 11], 2, 8
    cu_q = np.concatenate([[0], np.cumsum(lengths_q)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lengths_k)]).astype(np.int32)
    q = randn(rng, 1, int(cu_q[-1]), h, d)
    k, v = randn(rng, 1, int(cu_k[-1]), h, d), randn(rng, 1, int(cu_k[-1]), h, d)
    out, lse = ops.attention(put(q, dev), put(k, dev), put(v, dev), causal="bottom_right",
                             cu_seqlens_q=put(cu_q, dev), cu_seqlens_k=put(cu_k, dev),
                             max_seqlen_q=max(lengths_q), max_seqlen_k=max(lengths_k))
    assert lse.shape == (1, h, int(cu_q[-1]))
    got, got_lse = out.to_numpy(), lse.to_numpy()
    for b in range(3):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        if lengths_q[b] == 0:
            continue
        # bottom-right alignment in the sequence: row i sees keys j <= i + len_k - len_q
        sq, sk = lengths_q[b], lengths_k[b]
        for hi in range(h):
            s = q[0, qs, hi].astype(np.float64) @ k[0, ks, hi].T.astype(np.float64) / math.sqrt(d)
            allowed = np.arange(sk)[None, :] <= np.arange(sq)[:, None] + sk - sq
            s = np.where(allowed, s, -np.inf)
            mx = s.max(-1, keepdims=True)
            e = np.exp(s - mx)
            np.testing.assert_allclose(got[0, qs, hi], (e / e.sum(-1, keepdims=True)) @ v[0, ks, hi],
                                       rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(got_lse[0, hi, qs], (mx + np.log(e.sum(-1, keepdims=True)))[:, 0],
                                       rtol=1e-5, atol=1e-5)


def test_implied_operands_must_be_dense_and_of_their_dtype(dev, rng):
    a, b = put(randn(rng, 6, 4), dev), put(randn(rng, 2, 4, 3), dev)
    with pytest.raises(hal.ArgumentMismatchError, match="the op reads i32"):
        ops.grouped_matmul(a, b, put(np.array([0, 3, 6], np.int64), dev))
    offsets = put(np.array([0, 9, 3, 9, 6, 9], np.int32), dev)
    with pytest.raises(hal.InvalidArgumentError, match="dense"):
        ops.grouped_matmul(a, b, hal.Tensor(offsets, (3,), (2,)))


def test_cross_entropy_label_out_of_range_is_nan_by_rule(dev, rng):
    """SPEC §17.6.4: a label outside [0, classes) that is not ignore_index counts as a row with
    loss NaN (the mean is NaN: bad data shows) and a zero gradient row; the other rows'
    gradients still divide by the counted rows, the bad one included."""
    logits = rng.standard_normal((4, 5)).astype(np.float32)
    labels = np.array([1, 7, -100, 3], np.int32)  # 7 is out of range, -100 ignored
    res = ops.cross_entropy(put(logits, dev), put(labels, dev), grad=True, row_losses=True)
    assert np.isnan(res.loss.to_numpy()[0])
    rows = res.row_losses.to_numpy()
    assert np.isnan(rows[1]) and rows[2] == 0.0 and np.isfinite(rows[[0, 3]]).all()
    grad = res.grad_logits.to_numpy()
    assert (grad[1] == 0).all() and (grad[2] == 0).all()
    x = logits.astype(np.float64)
    p = np.exp(x - x.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    for r in (0, 3):  # counted rows: 3 (the bad label is counted, the ignored one is not)
        expected = p[r].copy()
        expected[labels[r]] -= 1.0
        np.testing.assert_allclose(grad[r], expected / 3, rtol=1e-5, atol=1e-6)
    for bad in (5, -1):
        res = ops.cross_entropy(put(logits, dev), put(np.array([0, bad, 1, 2], np.int32), dev))
        assert np.isnan(res.loss.to_numpy()[0]), bad
