"""Fake quantization and int8 deployment on the hal device.

Every fake-quantize op is checked against PyTorch CPU's own kernel on the same inputs: the
output, the straight-through mask and gradient to the bit, the LSQ scale and zero-point
gradients within f32 summation error (and the scale gradient against a float64 sum). Inputs
include the values where the two usual straight-through masks differ (the half quantum beyond
each end of the range, and its ties). Cases HAL's op does not cover run PyTorch's CPU kernel
through the fallback (same result, counted as a fallback). The deployment ops are checked
against float64, and the QAT sample (samples/torch/qat_finetune.py) runs on a tiny GPT: its
int8-deployed validation loss within 2 % of the float32 model it was fine-tuned from.
"""
import math

import pytest
import torch

import hal_torch
from conftest import native_and_fallback
from hal_torch.quantization import Int8Linear, quantize_int8, scaled_matmul

# Rounded-value positions (in units of the scale) around both ends of int8's range: the
# half-quantum bands PyTorch's mask counts inside (127.3, -128.2, the tie -128.5) and the ones
# it does not (127.5, a tie that rounds to 128; -128.7), and the ends themselves.
BANDS = [127.3, 127.5, 127.49, 127.51, -128.5, -128.7, -128.2, -128.51, 127.0, -128.0]


def sample(shape, seed, spread=3.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g) * spread


def plant_bands(x, scale_of_row):
    """Writes BANDS * scale into the first elements of each row of x viewed as [rows, -1]."""
    rows = x.reshape(x.shape[0], -1)
    for r in range(rows.shape[0]):
        for i, b in enumerate(BANDS[:rows.shape[1]]):
            rows[r, i] = b * scale_of_row(r)
    return rows.reshape(x.shape)


def native_ops(metrics):
    native, fell = native_and_fallback(metrics())
    return native, fell


def both(fn, *cpu_args, grad_of=0):
    """fn on CPU tensors and on hal copies: (cpu outputs, hal outputs moved to CPU, the gradients
    of input |grad_of| from a seeded upstream gradient, on each side)."""
    results = []
    for device in ("cpu", "hal"):
        args = [a.detach().to(device).requires_grad_(a.requires_grad)
                if isinstance(a, torch.Tensor) else a for a in cpu_args]
        out = fn(*args)
        up = sample(out.shape, 99).to(out.dtype).to(device)
        grads = torch.autograd.grad(out, [a for a in args if isinstance(a, torch.Tensor)
                                          and a.requires_grad], up)
        results.append((out.detach().cpu(), [g.cpu() for g in grads]))
    return results


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("qrange", [(-128, 127, 0), (0, 255, 128)])
def test_per_tensor_matches_pytorch_cpu(metrics, dtype, qrange):
    qmin, qmax, zp = qrange
    scale = 0.0371
    x = plant_bands(sample((6, 50), 1), lambda r: scale).to(dtype).requires_grad_()
    (y_cpu, g_cpu), (y_hal, g_hal) = both(
        lambda t: torch.fake_quantize_per_tensor_affine(t, scale, zp, qmin, qmax), x)
    assert torch.equal(y_hal, y_cpu)
    assert torch.equal(g_hal[0], g_cpu[0])
    # The bands are exercised: some gradients pass beyond |v| = 127 / 128, some stop.
    assert (g_cpu[0] == 0).sum() > 0
    native, fell = native_ops(metrics)
    assert "aten::fake_quantize_per_tensor_affine_cachemask" in native
    assert not any("fake_quantize" in op for op in fell)


def test_per_tensor_tensor_qparams_matches_pytorch_cpu(metrics):
    x = plant_bands(sample((4, 33), 2), lambda r: 0.05).requires_grad_()
    scale = torch.tensor([0.05])
    zero_point = torch.tensor([0], dtype=torch.int32)
    (y_cpu, g_cpu), (y_hal, g_hal) = both(
        lambda t, s, z: torch.fake_quantize_per_tensor_affine(t, s, z, -128, 127),
        x, scale, zero_point)
    assert torch.equal(y_hal, y_cpu)
    assert torch.equal(g_hal[0], g_cpu[0])
    native, _ = native_ops(metrics)
    assert "aten::_fake_quantize_per_tensor_affine_cachemask_tensor_qparams" in native


@pytest.mark.parametrize("shape,axis", [((5, 40), 0), ((3, 4, 35), 1), ((3, 4, 35), 2),
                                        ((6, 2, 3, 24), 0), ((70,), 0)])
def test_per_channel_matches_pytorch_cpu(metrics, shape, axis):
    channels = shape[axis]
    scale = torch.linspace(0.01, 0.06, channels)
    x = sample(shape, 3, spread=4.0)
    # The bands in channel 0 and the last channel.
    moved = x.movedim(axis, 0)
    for c in (0, channels - 1):
        flat = moved[c].reshape(-1)
        for i, b in enumerate(BANDS[:flat.numel()]):
            flat[i] = b * scale[c]
        moved[c] = flat.reshape(moved[c].shape)
    x.requires_grad_()
    zero_point = torch.zeros(channels, dtype=torch.int32)
    (y_cpu, g_cpu), (y_hal, g_hal) = both(
        lambda t, s, z: torch.fake_quantize_per_channel_affine(t, s, z, axis, -128, 127),
        x, scale, zero_point)
    assert torch.equal(y_hal, y_cpu)
    assert torch.equal(g_hal[0], g_cpu[0])
    native, _ = native_ops(metrics)
    assert "aten::fake_quantize_per_channel_affine_cachemask" in native


def lsq_scale_gradient_f64(x, scale, up, grad_factor, axis=None):
    """LSQ's scale gradient in float64 from its definition, v = x * (1/s) as PyTorch forms it
    (f32), the mask on the rounded value: grad_factor * sum of up * (round(v) - v inside,
    -128 below, 127 above), per channel along |axis| or over everything."""
    if axis is None:
        s = scale.reshape(())
    else:
        shape = [1] * x.dim()
        shape[axis] = -1
        s = scale.reshape(shape)
    v = (x * (1.0 / s)).double()
    r = torch.round(v)
    d = torch.where(r < -128, -128.0, torch.where(r > 127, 127.0, r - v))
    terms = up.double() * d
    dims = [i for i in range(x.dim()) if i != axis] if axis is not None else list(range(x.dim()))
    return terms.sum(dims) * grad_factor, terms.abs().sum(dims) * abs(grad_factor)


@pytest.mark.parametrize("grad_factor", [1.0, 0.37])
def test_learnable_per_tensor_matches_pytorch_cpu(metrics, grad_factor):
    scale = torch.tensor([0.043], requires_grad=True)
    zero_point = torch.tensor([0.0], requires_grad=True)
    x = plant_bands(sample((8, 64), 4, spread=5.0), lambda r: 0.043).requires_grad_()
    fn = (lambda t, s, z: torch._fake_quantize_learnable_per_tensor_affine(
        t, s, z, -128, 127, grad_factor))
    (y_cpu, g_cpu), (y_hal, g_hal) = both(fn, x, scale, zero_point)
    assert torch.equal(y_hal, y_cpu)
    assert torch.equal(g_hal[0], g_cpu[0])  # the straight-through gradient, to the bit
    want, magnitude = lsq_scale_gradient_f64(x.detach(), scale.detach(), sample((8, 64), 99),
                                             grad_factor)
    assert g_hal[1].shape == g_cpu[1].shape == (1,)
    assert abs(g_hal[1].double().item() - want.item()) <= 1e-5 * magnitude.item()
    assert abs(g_hal[1].item() - g_cpu[1].item()) <= 2e-5 * magnitude.item()
    assert g_hal[2].shape == g_cpu[2].shape and g_hal[2].dtype == g_cpu[2].dtype
    torch.testing.assert_close(g_hal[2], g_cpu[2], rtol=1e-5, atol=1e-6)
    assert g_cpu[2].abs().item() > 0  # some elements are clipped: a real zero-point gradient
    native, fell = native_ops(metrics)
    assert {"aten::_fake_quantize_learnable_per_tensor_affine",
            "aten::_fake_quantize_learnable_per_tensor_affine_backward"} <= native
    assert not any("fake_quantize" in op for op in fell)


@pytest.mark.parametrize("shape,axis", [((6, 48), 0), ((4, 5, 20), 1)])
def test_learnable_per_channel_matches_pytorch_cpu(metrics, shape, axis):
    channels = shape[axis]
    scale = torch.linspace(0.02, 0.05, channels).requires_grad_()
    zero_point = torch.zeros(channels, requires_grad=True)
    x = sample(shape, 5, spread=4.0).requires_grad_()
    fn = (lambda t, s, z: torch._fake_quantize_learnable_per_channel_affine(
        t, s, z, axis, -128, 127, 0.5))
    (y_cpu, g_cpu), (y_hal, g_hal) = both(fn, x, scale, zero_point)
    assert torch.equal(y_hal, y_cpu)
    assert torch.equal(g_hal[0], g_cpu[0])
    want, magnitude = lsq_scale_gradient_f64(x.detach(), scale.detach(), sample(shape, 99), 0.5,
                                             axis)
    assert g_hal[1].shape == g_cpu[1].shape == (channels,)
    assert ((g_hal[1].double() - want).abs() <= 1e-5 * magnitude + 1e-12).all()
    assert ((g_hal[1] - g_cpu[1]).abs().double() <= 2e-5 * magnitude + 1e-12).all()
    torch.testing.assert_close(g_hal[2], g_cpu[2], rtol=1e-5, atol=1e-6)
    native, _ = native_ops(metrics)
    assert "aten::_fake_quantize_learnable_per_channel_affine_backward" in native


@pytest.mark.parametrize("case", ["zero point 3", "narrow range", "4-bit", "channel zero points",
                                  "fractional zero point", "zero scale", "float64"])
def test_cases_hal_lacks_fall_back_to_pytorchs_result(metrics, case):
    x = sample((4, 30), 6).requires_grad_()
    if case == "zero point 3":
        fn = lambda t: torch.fake_quantize_per_tensor_affine(t, 0.05, 3, 0, 255)  # noqa: E731
    elif case == "narrow range":
        fn = lambda t: torch.fake_quantize_per_tensor_affine(t, 0.02, 0, -127, 127)  # noqa: E731
    elif case == "4-bit":
        fn = lambda t: torch.fake_quantize_per_tensor_affine(t, 0.3, 0, -8, 7)  # noqa: E731
    elif case == "channel zero points":
        zp = torch.tensor([0, 1, 0, 0], dtype=torch.int32)
        fn = (lambda t: torch.fake_quantize_per_channel_affine(  # noqa: E731
            t, torch.full((4,), 0.02, device=t.device), zp.to(t.device), 0, -128, 127))
    elif case == "fractional zero point":
        fn = (lambda t: torch._fake_quantize_learnable_per_tensor_affine(  # noqa: E731
            t, torch.tensor([0.02], device=t.device), torch.tensor([0.4], device=t.device),
            -128, 127, 1.0))
    elif case == "zero scale":
        fn = lambda t: torch.fake_quantize_per_tensor_affine(t, 0.0, 0, -128, 127)  # noqa: E731
    else:
        x = x.detach().double().requires_grad_()
        fn = lambda t: torch.fake_quantize_per_tensor_affine(t, 0.05, 0, -128, 127)  # noqa: E731
    if case == "zero scale":
        # PyTorch's own kernel: its result (whatever 1/0 gives) is not HAL's to define.
        with torch.no_grad():
            fn(x.detach().to("hal"))
        native, fell = native_ops(metrics)
        assert any("fake_quantize" in op for op in fell) and not native
        return
    (y_cpu, g_cpu), (y_hal, g_hal) = both(fn, x)
    assert torch.equal(y_hal, y_cpu)
    assert torch.equal(g_hal[0], g_cpu[0])
    native, fell = native_ops(metrics)
    assert any("fake_quantize" in op for op in fell)
    assert not any("fake_quantize" in op for op in native)


def test_quantize_int8_and_scaled_matmul_against_float64():
    w = sample((24, 40), 7, spread=0.2)
    x = sample((9, 40), 8)
    q, s = quantize_int8(w.to("hal"), (1, 0))
    q, s = q.cpu(), s.cpu()
    assert q.dtype == torch.int8 and s.shape == (24, 1)
    assert torch.equal(s, w.abs().amax(dim=1, keepdim=True) / 127)
    assert torch.equal(q, torch.round(w / s).clamp(-128, 127).to(torch.int8))
    x_scale = torch.tensor([[x.abs().max().item() / 100]])  # some inputs saturate
    xq, xs = quantize_int8(x.to("hal"), (0, 0), x_scale.to("hal"))
    xq = xq.cpu()
    assert torch.equal(xs.cpu(), x_scale)
    assert torch.equal(xq, torch.round(x / x_scale).clamp(-128, 127).to(torch.int8))
    d = scaled_matmul(xq.to("hal"), x_scale.to("hal"), (0, 0), q.to("hal"), s.to("hal"),
                      (1, 0)).cpu()
    a64 = xq.double() * x_scale.double()
    b64 = q.double() * s.double()
    want = a64 @ b64.T
    assert ((d.double() - want).abs() <= 1e-5 * (a64.abs() @ b64.abs().T) + 1e-30).all()
    # Int8Linear is that product plus the bias.
    linear = torch.nn.Linear(40, 24)
    with torch.no_grad():
        linear.weight.copy_(w)
    deployed = Int8Linear(linear.to("hal"), x_scale)
    y = deployed(x.reshape(3, 3, 40).to("hal")).cpu()
    torch.testing.assert_close(y.reshape(9, 24).double(), want + linear.bias.detach().cpu().double(),
                               rtol=0, atol=1e-5)


def test_deployment_ops_refuse_bad_input():
    w = torch.zeros(6, 10, device="hal")
    with pytest.raises(RuntimeError, match="must divide"):
        quantize_int8(w, (4, 0))
    with pytest.raises(RuntimeError, match="given scale"):
        quantize_int8(w, (1, 0), torch.ones(2, 1, device="hal"))
    q, s = quantize_int8(w, (1, 0))
    with pytest.raises(RuntimeError, match=r"a \[m, k\] and b \[n, k\]"):
        scaled_matmul(q, s, (1, 0), q[:, :5], s, (1, 0))
    with pytest.raises(RuntimeError, match="HAL declined"):
        scaled_matmul(q, s[:3], (1, 0), q, s, (1, 0))  # scale of the wrong shape


def test_qat_sample_deploys_int8_within_two_percent_of_float32(metrics):
    from qat_finetune import run
    result = run("tiny", verbose=True)
    # A real baseline: training moved the loss well below the untrained model's (ln 256).
    assert result["f32"] < 0.8 * result["initial"]
    assert math.isfinite(result["fake_quant"])
    assert result["int8_vs_f32"] <= 0.02, result
    assert result["int8_vs_f32_same_steps"] <= 0.02, result
    native, fell = native_ops(metrics)
    assert {"aten::fake_quantize_per_channel_affine_cachemask",
            "aten::_fake_quantize_learnable_per_tensor_affine",
            "aten::_fake_quantize_learnable_per_tensor_affine_backward"} <= native
    assert not any("fake_quantize" in op for op in fell)
    assert hal_torch.metrics()["ops"]  # the run went through the hal device
