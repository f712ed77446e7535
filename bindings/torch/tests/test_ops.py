"""The hal kernels a training step runs: that they run natively (one cached HAL plan per
signature, no fallback) and agree with float64 references computed on the CPU."""
import math

import pytest
import torch
import torch.nn.functional as F

import hal_torch
from conftest import native_and_fallback


def rand(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def close(got, reference, dtype=torch.float32, scale=1.0):
    tol = {torch.float32: 2e-5, torch.bfloat16: 2e-2, torch.float16: 3e-3}[dtype] * scale
    torch.testing.assert_close(got.detach().cpu().double(), reference.double(), atol=tol, rtol=tol)


def test_matmul_family(metrics):
    a, b, bias = rand(7, 33, seed=1), rand(33, 9, seed=2), rand(9, seed=3)
    h = [t.to("hal") for t in (a, b, bias)]
    close(h[0] @ h[1], a.double() @ b.double())
    close(F.linear(h[0], h[1].t(), h[2]), a.double() @ b.double() + bias.double())
    close(torch.addmm(h[2], h[0], h[1], beta=0.5, alpha=2.0),
          0.5 * bias.double() + 2.0 * (a.double() @ b.double()))
    x = rand(3, 7, 33, seed=4)
    close(torch.bmm(x.to("hal"), h[1].expand(3, 33, 9)), x.double() @ b.double())
    close(x.to("hal") @ h[1], x.double() @ b.double())  # matmul: a view and one mm
    native, fell = native_and_fallback(metrics())
    assert not fell, fell
    assert {"aten::mm.out", "aten::addmm.out", "aten::bmm.out"} <= native


def test_plans_are_cached_per_signature(metrics):
    hal_torch.clear_plan_cache()
    hal_torch.reset_metrics()
    x = rand(16, 16).to("hal")
    for _ in range(3):
        y = x @ x
    m = hal_torch.metrics()
    assert m["plans_created"] == 1 and m["plan_cache_hits"] == 2
    (x.t() @ x).sum()  # another layout: another plan
    assert hal_torch.metrics()["plans_created"] >= 2
    del y


def test_type_promotion_and_broadcasting(metrics):
    f = rand(4, 5)
    i = torch.arange(5)
    hf, hi = f.to("hal"), i.to("hal")
    close(hf + hi, f.double() + i.double())
    close(hf.bfloat16() * hf, f.bfloat16().double() * f.double(), torch.bfloat16)
    assert (hf.bfloat16() * hf).dtype == torch.float32
    close(hf * torch.tensor(3.0), f.double() * 3)  # a 0-dim CPU tensor is a scalar
    close(hf / 2, f.double() / 2)
    close(2 - hf, 2 - f.double())
    out = torch.empty(0, device="hal")
    torch.mul(hf, hf, out=out)
    assert out.shape == (4, 5)
    with pytest.raises(RuntimeError, match="can't be cast"):
        torch.add(hf, hf, out=torch.empty(4, 5, dtype=torch.int64, device="hal"))
    with pytest.raises(RuntimeError, match="must match|broadcast"):
        hf + rand(3).to("hal")
    view = hf.t()
    view.mul_(2)  # in place through a transposed view
    close(hf, 2 * f.double())


def test_add_and_sub_with_alpha(metrics):
    """a + alpha b and a - alpha b between hal tensors: b is scaled first (HAL's BINARY scales
    a OP b as a whole); every form (functional, in-place, out=), a transposed b, bfloat16, an
    integer b, a CPU scalar b. A scalar past f32's range (HAL refuses a run-time scalar that
    f32 turns into inf) falls back and gives aten's result, inf; an alpha past it, aten's
    error."""
    a, b = rand(6, 5, seed=1), rand(6, 5, seed=2)
    ha, hb = a.to("hal"), b.to("hal")
    alpha = -2.9999999999999997e-05 * 1e4  # a learning rate's many digits
    close(torch.add(ha, hb, alpha=alpha), a.double() + alpha * b.double())
    close(torch.sub(ha, hb, alpha=3), a.double() - 3 * b.double())
    out = torch.empty(6, 5, device="hal")
    close(torch.add(ha, hb, alpha=0.5, out=out), a.double() + 0.5 * b.double())
    close(out, a.double() + 0.5 * b.double())
    inplace = ha.clone()
    assert inplace.add_(hb, alpha=-0.25) is inplace
    close(inplace, a.double() - 0.25 * b.double())
    inplace.sub_(inplace, alpha=2)  # b is the output itself
    close(inplace, -(a.double() - 0.25 * b.double()))
    bt = rand(5, 6, seed=3)
    close(torch.add(ha, bt.to("hal").t(), alpha=1.5), a.double() + 1.5 * bt.double().t())
    close(torch.add(ha.bfloat16(), hb.bfloat16(), alpha=0.75),
          a.bfloat16().double() + 0.75 * b.bfloat16().double(), torch.bfloat16)
    n = torch.arange(30).reshape(6, 5)
    close(torch.add(ha, n.to("hal"), alpha=2), a.double() + 2 * n.double())
    assert torch.equal(torch.add(n.to("hal"), n.to("hal"), alpha=3).cpu(), n + 3 * n)
    close(torch.add(ha, torch.tensor(2.0), alpha=0.5), a.double() + 1.0)
    native, fell = native_and_fallback(metrics())
    assert not fell, fell
    with pytest.raises(RuntimeError, match="without overflow"):
        torch.add(a, b, alpha=1e300)
    with pytest.raises(RuntimeError, match="without overflow"):
        torch.add(ha, hb, alpha=1e300)
    assert torch.equal((ha * -1e300).cpu(), a * -1e300)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_softmax_and_norms_with_backward(dtype, metrics):
    x = rand(6, 10, 32, seed=5, dtype=dtype)
    w, b = rand(32, seed=6, dtype=dtype), rand(32, seed=7, dtype=dtype)
    gy = rand(6, 10, 32, seed=8, dtype=dtype)

    def run(device, fn):
        xs = x.to(device).requires_grad_()
        ws = w.to(device).requires_grad_()
        bs = b.to(device).requires_grad_()
        y = fn(xs, ws, bs)
        y.backward(gy.to(device))
        return y, xs.grad, ws.grad, bs.grad

    cases = {
        "softmax": lambda x, w, b: F.softmax(x, -1) * w + b,
        "log_softmax dim 1": lambda x, w, b: F.log_softmax(x, 1) * w + b,
        "layer_norm": lambda x, w, b: F.layer_norm(x, (32,), w, b, 1e-5),
        "rms_norm": lambda x, w, b: F.rms_norm(x, (32,), w, 1e-6) + b,
    }
    for name, fn in cases.items():
        got = run("hal", fn)
        # float64 reference of the same inputs (rounded to dtype first).
        ref = [t.double() if t is not None else None for t in run_double(fn, x, w, b, gy)]
        for g, r in zip(got, ref):
            close(g, r, dtype, scale=4)
    native, fell = native_and_fallback(metrics())
    assert not fell, fell
    assert {"aten::_softmax.out", "aten::native_layer_norm", "aten::native_layer_norm_backward",
            "aten::rms_norm", "aten::rms_norm (backward)"} <= native


def run_double(fn, x, w, b, gy):
    xs, ws, bs = (t.double().requires_grad_() for t in (x, w, b))
    y = fn(xs, ws, bs)
    y.backward(gy.double())
    return y, xs.grad, ws.grad, bs.grad


def test_activations_with_backward(metrics):
    x = rand(5, 40, seed=9) * 3
    g = rand(5, 40, seed=10)
    for fn in (lambda t: F.gelu(t), lambda t: F.gelu(t, approximate="tanh"), F.relu, F.silu):
        h = x.to("hal").requires_grad_()
        fn(h).backward(g.to("hal"))
        r = x.double().requires_grad_()
        fn(r).backward(g.double())
        close(h.grad, r.grad, scale=2)
        if fn is F.relu:  # silu's backward is aten's twice-differentiable composite
            native, fell = native_and_fallback(metrics())
            assert not fell, fell
            assert {"aten::gelu", "aten::gelu_backward", "aten::relu",
                    "aten::threshold_backward.grad_input"} <= native


def test_embedding_with_padding_and_backward(metrics):
    table = rand(11, 6, seed=11)
    ids = torch.tensor([[1, 3, 3, 0], [10, 3, 1, 1]])
    g = rand(2, 4, 6, seed=12)
    h = table.to("hal").requires_grad_()
    F.embedding(ids.to("hal"), h, padding_idx=1).backward(g.to("hal"))
    r = table.double().requires_grad_()
    F.embedding(ids, r, padding_idx=1).backward(g.double())
    close(h.grad, r.grad)
    native, fell = native_and_fallback(metrics())
    assert {"aten::embedding", "aten::embedding_dense_backward"} <= native and not fell, fell


def test_fused_cross_entropy(metrics):
    logits = rand(12, 30, seed=13) * 2
    labels = torch.tensor([1, 5, 29, -100, 0, 7, 7, 3, 2, -100, 11, 12])
    h = logits.to("hal").requires_grad_()
    loss = F.cross_entropy(h, labels.to("hal"), label_smoothing=0.1)
    (loss * 3).backward()
    r = logits.double().requires_grad_()
    ref = F.cross_entropy(r, labels, label_smoothing=0.1)
    (ref * 3).backward()
    close(loss, ref)
    close(h.grad, r.grad)
    native, fell = native_and_fallback(metrics())
    assert "aten::cross_entropy_loss" in native and not fell, fell
    # Other reductions take aten's composite over hal kernels: still correct.
    none = F.cross_entropy(h, labels.to("hal"), reduction="none")
    close(none, F.cross_entropy(r, labels, reduction="none"))


@pytest.mark.parametrize("causal,heads,kv_heads", [(True, 4, 4), (False, 4, 4), (True, 4, 2)])
def test_attention_takes_hal_path(causal, heads, kv_heads, metrics):
    b, lq, lk, d = 2, 9, 9, 16
    q, k, v = rand(b, heads, lq, d, seed=14), rand(b, kv_heads, lk, d, seed=15), \
        rand(b, kv_heads, lk, d, seed=16)
    g = rand(b, heads, lq, d, seed=17)
    hq, hk, hv = (t.to("hal").requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(hq, hk, hv, is_causal=causal,
                                         enable_gqa=heads != kv_heads)
    out.backward(g.to("hal"))
    rq, rk, rv = (t.double().requires_grad_() for t in (q, k, v))
    ref = F.scaled_dot_product_attention(rq, rk, rv, is_causal=causal,
                                         enable_gqa=heads != kv_heads)
    ref.backward(g.double())
    for got, want in ((out, ref), (hq.grad, rq.grad), (hk.grad, rk.grad), (hv.grad, rv.grad)):
        close(got, want, scale=5)
    native, fell = native_and_fallback(metrics())
    assert "aten::_scaled_dot_product_fused_attention_overrideable" in native
    assert "aten::_scaled_dot_product_fused_attention_overrideable_backward" in native
    assert not fell, fell


def test_attention_with_a_mask_takes_the_math_path(metrics):
    q = rand(1, 2, 5, 8, seed=18)
    mask = torch.rand(5, 5, generator=torch.Generator().manual_seed(1)) > 0.3
    mask[:, 0] = True
    got = F.scaled_dot_product_attention(q.to("hal"), q.to("hal"), q.to("hal"),
                                         attn_mask=mask.to("hal"))
    ref = F.scaled_dot_product_attention(q.double(), q.double(), q.double(), attn_mask=mask)
    close(got, ref, scale=5)
    native, _ = native_and_fallback(metrics())
    assert "aten::_scaled_dot_product_fused_attention_overrideable" not in native


def test_dropout_native_and_its_backward(metrics):
    torch.hal.manual_seed(0)
    x = torch.ones(200, 50, device="hal", requires_grad=True)
    y = F.dropout(x, 0.25)
    y.sum().backward()
    kept = (y.detach().cpu() != 0)
    assert abs(kept.float().mean().item() - 0.75) < 0.02
    assert torch.allclose(y.detach().cpu()[kept], torch.tensor(1 / 0.75))
    assert torch.equal(x.grad.cpu(), kept.float() / 0.75)
    native, fell = native_and_fallback(metrics())
    assert {"aten::native_dropout", "aten::native_dropout_backward"} <= native and not fell


def test_fused_adamw_is_one_hal_call_and_matches_the_formula(metrics):
    params = [rand(5, 3, seed=20), rand(7, seed=21)]
    grads = [[rand(5, 3, seed=30 + s), rand(7, seed=40 + s)] for s in range(3)]
    lr, wd, b1, b2, eps = 1e-2, 0.1, 0.9, 0.95, 1e-8
    hp = [torch.nn.Parameter(p.to("hal")) for p in params]
    opt = torch.optim.AdamW(hp, lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd, fused=True)
    for step in range(3):
        for p, g in zip(hp, grads[step]):
            p.grad = g.to("hal")
        opt.step()
    m = metrics()
    assert m["ops"]["aten::_fused_adamw_"]["native"] == 3  # one call per step for the list
    _, fell = native_and_fallback(m)
    assert not fell, fell
    # PyTorch's AdamW in float64.
    for p0, hp_, index in zip(params, hp, range(2)):
        w, mm, vv = p0.double(), torch.zeros_like(p0, dtype=torch.float64), \
            torch.zeros_like(p0, dtype=torch.float64)
        for step in range(3):
            g = grads[step][index].double()
            w = w * (1 - lr * wd)
            mm = b1 * mm + (1 - b1) * g
            vv = b2 * vv + (1 - b2) * g * g
            t = step + 1
            w = w - lr * (mm / (1 - b1 ** t)) / ((vv / (1 - b2 ** t)).sqrt() + eps)
        close(hp_.detach(), w, scale=5)


@pytest.mark.parametrize("case", ["conv2d", "channels_last_groups", "conv1d_no_bias",
                                  "transposed", "conv3d"])
def test_convolution_with_backward(case, metrics):
    """aten's convolution_overrideable and its backward on HAL_OP_CONVOLUTION(_BACKWARD_*),
    against the CPU's float64 convolution: padding, stride, dilation, groups, bias, a
    channels_last input, a transposed convolution with output padding."""
    args = {
        "conv2d": ((2, 4, 9, 8), (6, 4, 3, 3), dict(stride=2, padding=1, dilation=1), False),
        "channels_last_groups": ((2, 6, 7, 7), (4, 3, 3, 2), dict(padding=(1, 0), dilation=2,
                                                                 groups=2), False),
        "conv1d_no_bias": ((3, 2, 11), (5, 2, 4), dict(stride=3, padding=2), False),
        "transposed": ((2, 4, 5, 6), (4, 3, 3, 3), dict(stride=2, padding=1,
                                                        output_padding=1), True),
        "conv3d": ((1, 2, 4, 5, 4), (3, 2, 2, 3, 2), dict(padding=1), False),
    }[case]
    x_shape, w_shape, kw, transposed = args
    x, w = rand(*x_shape, seed=11), rand(*w_shape, seed=12) * 0.3
    groups = kw.get("groups", 1)
    channels = w_shape[1] * groups if transposed else w_shape[0]
    bias = None if case == "conv1d_no_bias" else rand(channels, seed=13)
    if case == "channels_last_groups":
        x = x.contiguous(memory_format=torch.channels_last)

    def run(x, w, b):
        spatial = x.dim() - 2
        if transposed:
            fn = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[spatial]
        else:
            fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[spatial]
        return fn(x, w, b, **kw)

    leaves = [t.double().requires_grad_() for t in (x, w) + ((bias,) if bias is not None else ())]
    ref = run(leaves[0], leaves[1], leaves[2] if bias is not None else None)
    gy = rand(*ref.shape, seed=14)
    ref.backward(gy.double())
    hal_leaves = [t.to("hal").requires_grad_() for t in (x, w) + ((bias,) if bias is not None
                                                                  else ())]
    got = run(hal_leaves[0], hal_leaves[1], hal_leaves[2] if bias is not None else None)
    got.backward(gy.to("hal"))
    close(got, ref.detach(), scale=5)
    for h, r in zip(hal_leaves, leaves):
        close(h.grad, r.grad, scale=5)
    native, fell = native_and_fallback(metrics())
    assert not fell, fell
    assert {"aten::convolution_overrideable",
            "aten::convolution_backward_overrideable"} <= native


def test_convolution_hal_declines_falls_back(metrics):
    """float64 is not a HAL convolution dtype: aten's CPU convolution runs instead, counted."""
    x, w = rand(1, 2, 5, 5, seed=15).double(), rand(3, 2, 3, 3, seed=16).double()
    got = F.conv2d(x.to("hal"), w.to("hal"), padding=1)
    torch.testing.assert_close(got.cpu(), F.conv2d(x, w, padding=1))
    native, fell = native_and_fallback(metrics())
    assert "aten::convolution" in fell and "aten::convolution_overrideable" not in native


def grads_against_float64(fn, leaves, seed):
    """fn on hal (float32 leaves) and on the CPU in float64: outputs and every leaf's gradient
    for the same random grad_output. Returns (got, ref, hal leaves, float64 leaves)."""
    ref_leaves = [t.double().requires_grad_() for t in leaves]
    hal_leaves = [t.to("hal").requires_grad_() for t in leaves]
    ref, got = fn(*ref_leaves), fn(*hal_leaves)
    gy = rand(*ref.shape, seed=seed)
    ref.backward(gy.double())
    got.backward(gy.to("hal"))
    return got, ref.detach(), hal_leaves, ref_leaves


@pytest.mark.parametrize("case", ["training", "training_running_stats", "inference",
                                  "channels_last", "batch_norm_1d_no_affine"])
def test_batch_norm_with_backward(case, metrics):
    """native_batch_norm and its backward on HAL_OP_BATCH_NORM(_BACKWARD) against the CPU's
    float64 batch norm: batch statistics, the running statistics' update (unbiased variance,
    momentum), inference from running statistics, a channels_last input, no scale/shift."""
    x = rand(4, 6, 5, 7, seed=21) * 3 + 1 if case != "batch_norm_1d_no_affine" else rand(5, 3)
    if case == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    c = x.shape[1]
    affine = case != "batch_norm_1d_no_affine"
    leaves = [x] + ([rand(c, seed=22), rand(c, seed=23)] if affine else [])
    running = {dev: (rand(c, seed=24).to(dev, dt), (rand(c, seed=25).abs() + 0.5).to(dev, dt))
               for dev, dt in (("hal", torch.float32), ("cpu", torch.float64))}
    training = case != "inference"

    def run(x, w=None, b=None):
        dev = "hal" if x.device.type == "hal" else "cpu"
        stats = running[dev] if case in ("training_running_stats", "inference") else (None, None)
        return F.batch_norm(x, stats[0], stats[1], w, b, training, 0.3, 1e-5)

    got, ref, hal_leaves, ref_leaves = grads_against_float64(run, leaves, seed=26)
    close(got, ref, scale=5)
    for h, r in zip(hal_leaves, ref_leaves):
        close(h.grad, r.grad, scale=5)
    for h, r in zip(running["hal"], running["cpu"]):
        close(h, r)  # updated in place by the training case, untouched by the others
    native, fell = native_and_fallback(metrics())
    assert not fell, fell
    assert {"aten::native_batch_norm", "aten::native_batch_norm_backward"} <= native


@pytest.mark.parametrize("case", ["max", "max_ceil_dilated_unbatched", "max_channels_last",
                                  "avg", "avg_ceil_exclude_pad", "avg_divisor", "adaptive",
                                  "adaptive_channels_last"])
def test_pooling_with_backward(case, metrics):
    """max_pool2d_with_indices, avg_pool2d, _adaptive_avg_pool2d and their backwards on
    HAL_OP_POOLING(_BACKWARD) against the CPU in float64 (max pooling's indices exactly)."""
    fn, op = {
        "max": (lambda x: F.max_pool2d(x, 3, 2, 1), "max_pool2d_with_indices"),
        "max_ceil_dilated_unbatched": (lambda x: F.max_pool2d(x[0], 3, 2, 1, dilation=2,
                                                              ceil_mode=True),
                                       "max_pool2d_with_indices"),
        "max_channels_last": (lambda x: F.max_pool2d(x, (2, 3), (1, 2)),
                              "max_pool2d_with_indices"),
        "avg": (lambda x: F.avg_pool2d(x, 3, 2, 1), "avg_pool2d"),
        "avg_ceil_exclude_pad": (lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True,
                                                        count_include_pad=False), "avg_pool2d"),
        "avg_divisor": (lambda x: F.avg_pool2d(x, (2, 3), divisor_override=5), "avg_pool2d"),
        "adaptive": (lambda x: F.adaptive_avg_pool2d(x, (4, 5)), "_adaptive_avg_pool2d"),
        # (F.adaptive_avg_pool2d to 1 x 1 is aten's mean, not this op)
        "adaptive_channels_last": (lambda x: F.adaptive_avg_pool2d(x, (3, 2)),
                                   "_adaptive_avg_pool2d"),
    }[case]
    x = rand(2, 5, 9, 11, seed=27)
    if "channels_last" in case:
        x = x.contiguous(memory_format=torch.channels_last)
    got, ref, hal_leaves, ref_leaves = grads_against_float64(fn, [x], seed=28)
    close(got, ref)
    close(hal_leaves[0].grad, ref_leaves[0].grad)
    if op == "max_pool2d_with_indices":
        _, hal_indices = F.max_pool2d(x.to("hal"), 3, 2, 1, return_indices=True)
        _, cpu_indices = F.max_pool2d(x, 3, 2, 1, return_indices=True)
        assert torch.equal(hal_indices.cpu(), cpu_indices)
    native, fell = native_and_fallback(metrics())
    assert not fell, fell
    assert {f"aten::{op}", f"aten::{op}_backward"} <= native


def test_batch_norm_and_pooling_hal_declines_fall_back(metrics):
    """float64 and a momentum outside [0, 1] are not HAL's: aten's CPU kernels run, counted."""
    x = rand(3, 2, 4, 4, seed=29).double()
    torch.testing.assert_close(F.max_pool2d(x.to("hal"), 2).cpu(), F.max_pool2d(x, 2))
    xf = x.float()
    rm_h, rv_h, rm_c, rv_c = torch.zeros(2, device="hal"), torch.ones(2, device="hal"), \
        torch.zeros(2), torch.ones(2)
    got = F.batch_norm(xf.to("hal"), rm_h, rv_h, training=True, momentum=1.5)
    torch.testing.assert_close(got.cpu(), F.batch_norm(xf, rm_c, rv_c, training=True,
                                                       momentum=1.5))
    torch.testing.assert_close(rm_h.cpu(), rm_c)
    native, fell = native_and_fallback(metrics())
    assert {"aten::max_pool2d_with_indices", "aten::native_batch_norm"} <= fell


@pytest.mark.parametrize("dtypes", [(torch.bfloat16, torch.bfloat16), (torch.bfloat16, None),
                                    (torch.bfloat16, torch.float32), (torch.float16, torch.float32),
                                    (torch.float32, torch.float32)])
def test_layer_norm_statistics_have_atens_dtype(dtypes, metrics):
    """native_layer_norm's mean and rstd take aten's dtype: the input's, f32 for a 16-bit
    input with f32 parameters (HAL computes them in f32 either way); the backward reads 16-bit
    statistics natively."""
    x_dtype, p_dtype = dtypes
    x = rand(3, 4, 8, seed=31, dtype=x_dtype)
    w = rand(8, seed=32, dtype=p_dtype) if p_dtype else None
    b = rand(8, seed=33, dtype=p_dtype) if p_dtype else None
    on_cpu = torch.native_layer_norm(x, (8,), w, b, 1e-5)
    on_hal = torch.native_layer_norm(x.to("hal"), (8,), *(t.to("hal") if t is not None else None
                                                          for t in (w, b)), 1e-5)
    assert [t.dtype for t in on_hal] == [t.dtype for t in on_cpu]
    ref = F.layer_norm(x.double(), (8,), *(t.double() if t is not None else None
                                           for t in (w, b)))
    close(on_hal[0], ref, x_dtype)
    xh = x.to("hal").requires_grad_()
    F.layer_norm(xh, (8,), *(t.to("hal") if t is not None else None for t in (w, b))).sum() \
        .backward()
    xd = x.double().requires_grad_()
    F.layer_norm(xd, (8,), *(t.double() if t is not None else None for t in (w, b))).sum() \
        .backward()
    close(xh.grad, xd.grad, x_dtype, scale=4)
    native, fell = native_and_fallback(metrics())
    assert not fell, fell
    assert "aten::native_layer_norm_backward" in native


def test_bfloat16_trunc_division_truncates_the_exact_quotient(metrics):
    """div(rounding_mode="trunc") and fmod in bfloat16 on HAL truncate the exact quotient
    (float32 arithmetic, as CUDA's kernels do). The CPU rounds the quotient to bfloat16 first:
    -3.890625 / -0.216796875 = 17.946 becomes 18.0 there; trunc gives 17."""
    x = torch.tensor([-3.890625, 7.0, -8.5, 5.0], dtype=torch.bfloat16)
    y = torch.tensor([-0.216796875, 0.5, 4.625, 3.0], dtype=torch.bfloat16)
    exact = torch.div(x.double(), y.double(), rounding_mode="trunc")
    got = torch.div(x.to("hal"), y.to("hal"), rounding_mode="trunc")
    assert torch.equal(got.cpu().double(), exact)
    assert torch.div(x, y, rounding_mode="trunc")[0] == 18  # the CPU's double rounding
    torch.testing.assert_close(torch.fmod(x.to("hal"), y.to("hal")).cpu().double(),
                               torch.fmod(x.double(), y.double()), atol=2e-2, rtol=8e-3)
    native, fell = native_and_fallback(metrics())
    assert not fell, fell
