"""Models written by others run unchanged but for the device: a GPT in the style of GPT-2 /
nanoGPT (samples/torch/gpt.py) and torchvision's ResNet-18. The same script runs on ``cpu``
and on ``hal`` from the same initial weights and batches; the losses must agree step by step.

Short runs (the contract tier): |loss_hal - loss_cpu| <= 1e-4 (1 + |loss_cpu|). One f32 step
differs by summation order only (~1e-6); over a few steps that has no room to grow.

Long runs (HAL_TORCH_LONG=1, the slow tier: 200 steps) are bounded by float32's own error.
Training is a map whose sensitivity to a rounding difference depends on the trajectory: with
GPT-2's learning rate and no warm-up (this test's old setup) the loss spiked from 3.6 to 7.95
at step 8 and the run turned chaotic by step 20, where the CPU's own float32 run missed the
float64 run by 1.5e-2 at step 29 (more than the old fixed tolerance of 1.2e-2 there, which
HAL failed at step 27 with 2.8e-2; no op was at fault: each parameter's gradient was within
1.3-2.4x of CPU float32's error against float64). So the long runs (a) use a stable setup,
the schedule nanoGPT trains with (linear warm-up, cosine decay) and batch norm over 16
samples, and (b) run the same script a third time on the CPU in float64 and require at every
step

    |loss_hal - loss_f64| <= 10 E32(step) + 2e-5 (1 + |loss_f64|),
    E32(step) = max over s <= step of |loss_cpu_f32(s) - loss_f64(s)|,

so HAL's float32 error may be a small multiple of what float32 arithmetic costs the CPU on the
same trajectory (measured: HAL needed 4.1x and 5.8x of it in two runs; the atol is the reported
loss's own rounding: HAL's cross-entropy once summed its 1024 rows in f32, 4 ulp at step 1).
An op with an error well above float32's rounding (a 1e-3 relative error anywhere in the
step) breaks the bound within a few steps.
"""
import copy
import math
import os
import subprocess
import sys

import pytest
import torch
import torchvision

import hal_torch
from conftest import native_and_fallback
from gpt import GPT, GPTConfig, batches, corpus

LONG = os.environ.get("HAL_TORCH_LONG") == "1"


TOLERANCE = 1e-4  # relative, short runs


def nanogpt_lr(step: int, peak: float = 3e-3, warmup: int = 20, total: int = 200) -> float:
    """nanoGPT's schedule: linear warm-up, then cosine decay to a tenth of the peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / (total - warmup))
    return peak * (0.1 + 0.45 * (1 + math.cos(math.pi * progress)))


def gpt_losses(device: str, model: GPT, steps: int, batch: int, dtype=torch.float32,
               schedule=None):
    model = copy.deepcopy(model).to(dtype).to(device)
    opt = model.optimizer(lr=3e-3, weight_decay=0.1, fused=True)
    data = batches(corpus(), model.config.context, batch, torch.Generator().manual_seed(0))
    losses = []
    for step in range(steps):
        if schedule is not None:
            for group in opt.param_groups:
                group["lr"] = schedule(step)
        x, y = next(data)
        _, loss = model(x.to(device), y.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return losses


def test_gpt_trains_as_on_the_cpu():
    torch.manual_seed(0)
    model = GPT(GPTConfig(layers=2, width=64, heads=4, context=32))
    steps, batch = 6, 4
    hal_torch.reset_metrics()
    on_hal = gpt_losses("hal", model, steps, batch)
    metrics = hal_torch.metrics()
    on_cpu = gpt_losses("cpu", model, steps, batch)
    worst = 0.0
    for step, (h, c) in enumerate(zip(on_hal, on_cpu), start=1):
        assert abs(h - c) <= TOLERANCE * (1 + abs(c)), f"step {step}: hal {h} cpu {c}"
        worst = max(worst, abs(h - c) / (1 + abs(c)))
    assert on_hal[-1] < on_hal[0]  # it learns
    native, fell = native_and_fallback(metrics)
    seconds = sum(v["fallback_seconds"] for v in metrics["ops"].values())
    print(f"gpt: {steps} steps, loss {on_hal[0]:.4f} -> {on_hal[-1]:.4f} (cpu {on_cpu[-1]:.4f}), "
          f"worst relative gap {worst:.2e}; {len(native)} ops native, {len(fell)} fell back "
          f"{sorted(fell)} ({seconds:.3f} s in fallbacks)")
    assert "aten::_fused_adamw_" in native
    assert "aten::_scaled_dot_product_fused_attention_overrideable" in native
    assert not fell, f"the GPT step fell back on {sorted(fell)}"


def resnet_losses(device: str, model, steps: int, batch: int, dtype=torch.float32,
                  lr: float = 0.05, learnable: bool = False, nudge: float = 0.0):
    """SGD with momentum on random images: random labels, or with |learnable| ten classes
    that differ by a faint fixed pattern per class (signal 0.3 of the noise per pixel:
    something to learn over a long run without reaching zero loss in a few steps). |nudge|
    scales every initial weight by (1 + nudge * noise): a twin run."""
    model = copy.deepcopy(model)
    if nudge:
        g = torch.Generator().manual_seed(3)
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1 + nudge * torch.randn(p.shape, generator=g))
    model = model.to(dtype).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    patterns = torch.randn(10, 3, 32, 32, generator=g)
    losses = []
    for _ in range(steps):
        x = torch.randn(batch, 3, 32, 32, generator=g)
        y = torch.randint(0, 10, (batch,), generator=g)
        if learnable:
            x = x + 0.3 * patterns[y]
        x = x.to(dtype)
        loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_resnet18_trains_as_on_the_cpu():
    """Two SGD steps agree with the CPU's; past them this run is chaotic (batch norm over 4
    samples and a 1x1 last stage: a 4e-5 relative difference at step 2 became 2 % at step 3
    with lr 0.05 and 0.01 alike, between two f32 results equally close to float64), so the
    trajectory is compared over two steps in both tiers and the gradient's accuracy is checked
    against float64 instead: hal's error at most twice the CPU's float32 error."""
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    steps = 2
    batch = 4
    hal_torch.reset_metrics()
    on_hal = resnet_losses("hal", model, steps, batch)
    metrics = hal_torch.metrics()
    on_cpu = resnet_losses("cpu", model, steps, batch)
    for step, (h, c) in enumerate(zip(on_hal, on_cpu), start=1):
        assert abs(h - c) <= TOLERANCE * (1 + abs(c)), f"step {step}: hal {h} cpu {c}"
    native, fell = native_and_fallback(metrics)
    print(f"resnet18: {steps} steps, loss {on_hal[0]:.4f} -> {on_hal[-1]:.4f} "
          f"(cpu {on_cpu[-1]:.4f}); {len(native)} ops native, fell back: {sorted(fell)}")
    # Convolutions, batch norm and pooling run on HAL's operators: nothing falls back.
    assert {"aten::convolution_overrideable", "aten::convolution_backward_overrideable",
            "aten::native_batch_norm", "aten::native_batch_norm_backward",
            "aten::max_pool2d_with_indices", "aten::max_pool2d_with_indices_backward"} <= native
    assert not fell, f"the ResNet step fell back on {sorted(fell)}"

    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(batch, 3, 32, 32, generator=g), torch.randint(0, 10, (batch,), generator=g)

    def gradients(device, dtype=torch.float32):
        m = copy.deepcopy(model).to(dtype).to(device)
        torch.nn.functional.cross_entropy(m(x.to(dtype).to(device)), y.to(device)).backward()
        return [p.grad.detach().cpu().double() for p in m.parameters()]

    reference = gradients("cpu", torch.float64)

    def worst(grads):
        return max(((a - r).norm() / (r.norm() + 1e-30)).item()
                   for a, r in zip(grads, reference))

    on_hal_error, on_cpu_error = worst(gradients("hal")), worst(gradients("cpu"))
    print(f"resnet18 gradient vs float64: hal {on_hal_error:.2e}, cpu f32 {on_cpu_error:.2e}")
    assert on_hal_error <= 2 * on_cpu_error + 1e-6


def test_resnet18_with_one_torch_thread():
    """torch.set_num_threads(1) sets the calling thread's OpenMP count only. The cpu plugin once
    created its oneDNN primitives at the count of the thread that planned them (1, the
    application's) and ran them on its 2-thread team, which wrote past the scratchpad: the
    bench's `resnet18 --threads 1` died in memset. A process of its own, since the count is
    read once per process; the steps agree with the CPU's."""
    script = """
import sys, torch, torchvision
import hal_torch
sys.path.insert(0, sys.argv[1])
import test_models
torch.set_num_threads(1)
torch.manual_seed(0)
model = torchvision.models.resnet18(num_classes=10)
on_hal = test_models.resnet_losses("hal", model, 2, 4)
on_cpu = test_models.resnet_losses("cpu", model, 2, 4)
print("losses", on_hal, on_cpu)
for h, c in zip(on_hal, on_cpu):
    assert abs(h - c) <= test_models.TOLERANCE * (1 + abs(c)), (on_hal, on_cpu)
"""
    here = os.path.dirname(os.path.abspath(__file__))
    done = subprocess.run([sys.executable, "-c", script, here], capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, (f"exit {done.returncode}\n{done.stdout}\n"
                                  f"{done.stderr[-3000:]}")


@pytest.mark.skipif(not LONG, reason="the slow tier (HAL_TORCH_LONG=1)")
def test_op_coverage_of_a_transformer_and_a_resnet_step():
    """Prints the coverage figures: ops the two steps touch and how many are native."""
    torch.manual_seed(0)
    touched = {}
    hal_torch.reset_metrics()
    gpt_losses("hal", GPT(GPTConfig(layers=2, width=64, heads=4, context=32)), 2, 2)
    touched["gpt"] = native_and_fallback(hal_torch.metrics())
    hal_torch.reset_metrics()
    resnet_losses("hal", torchvision.models.resnet18(num_classes=10), 2, 2)
    touched["resnet18"] = native_and_fallback(hal_torch.metrics())
    for name, (native, fell) in touched.items():
        print(f"coverage {name}: {len(native | fell)} aten ops touched, {len(native - fell)} "
              f"native, fell back: {sorted(fell)}")


def within_float32s_own_error(name: str, on_hal, on_cpu32, on_f64, multiple=10.0, atol=2e-5):
    """The long runs' bound (module docstring): HAL's error against float64 at most |multiple|
    times the CPU float32 run's worst error so far, plus the reported loss's rounding."""
    own = 0.0
    worst = 0.0
    for step, (h, c, r) in enumerate(zip(on_hal, on_cpu32, on_f64), start=1):
        own = max(own, abs(c - r))
        bound = multiple * own + atol * (1 + abs(r))
        assert abs(h - r) <= bound, (
            f"{name} step {step}: |hal - f64| = {abs(h - r):.3e} > {bound:.3e} (CPU float32's "
            f"own error so far {own:.3e}); hal {h} cpu f32 {c} f64 {r}")
        worst = max(worst, (abs(h - r) - atol * (1 + abs(r))) / own if own > 0 else 0.0)
    print(f"{name}: {len(on_hal)} steps, loss {on_f64[0]:.4f} -> {on_f64[-1]:.4f}; |hal - f64| "
          f"{abs(on_hal[-1] - on_f64[-1]):.2e}, |cpu f32 - f64| "
          f"{abs(on_cpu32[-1] - on_f64[-1]):.2e} at the end; HAL needed {worst:.2f}x of CPU "
          f"float32's error (bound {multiple}x)")


@pytest.mark.skipif(not LONG, reason="the slow tier (HAL_TORCH_LONG=1)")
def test_gpt_200_steps_within_float32s_own_error():
    torch.manual_seed(0)
    model = GPT(GPTConfig())  # 4 layers, width 128, context 128
    runs = {name: gpt_losses(device, model, 200, 8, dtype, schedule=nanogpt_lr)
            for name, device, dtype in (("hal", "hal", torch.float32),
                                        ("cpu32", "cpu", torch.float32),
                                        ("f64", "cpu", torch.float64))}
    assert runs["f64"][-1] < runs["f64"][0] - 2  # it learns: 5.56 -> 2.46
    within_float32s_own_error("gpt", runs["hal"], runs["cpu32"], runs["f64"])


@pytest.mark.skipif(not LONG, reason="the slow tier (HAL_TORCH_LONG=1)")
def test_resnet18_200_steps_learning_curve_within_a_twins_spread():
    """ResNet-18 is piecewise linear (ReLU, max pooling): a rounding difference that flips one
    ReLU or one max-pool choice changes the gradient discontinuously, so no two float32 runs
    stay together step by step. Measured at step 3 of this setup: HAL's weights differed from
    the CPU's by 3e-7, HAL's gradient of conv1 from the CPU's by 3.2e-3; yet the CPU's own
    gradient at HAL's weights matched HAL's to 4.9e-6 (each op right, the map discontinuous).
    So past the first steps the learning curves are compared: the mean loss of each 20-step
    window on hal against the CPU's within three times the largest gap between the CPU run
    and its twin (the CPU run from weights nudged by one part in 10^7: as far apart as two
    valid float32 runs drift), plus 0.05 for a window's own sampling noise. Batch norm over
    16 samples; no fallback."""
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    hal_torch.reset_metrics()
    kw = dict(lr=0.005, learnable=True)
    on_hal = resnet_losses("hal", model, 200, 16, **kw)
    native, fell = native_and_fallback(hal_torch.metrics())
    on_cpu = resnet_losses("cpu", model, 200, 16, **kw)
    twin = resnet_losses("cpu", model, 200, 16, nudge=1e-7, **kw)
    assert not fell, f"the ResNet step fell back on {sorted(fell)}"
    for step in range(2):  # before any flip: float32 rounding only
        assert abs(on_hal[step] - on_cpu[step]) <= TOLERANCE * (1 + abs(on_cpu[step]))

    def windows(losses):
        return [sum(losses[i:i + 20]) / 20 for i in range(0, 200, 20)]

    hal_w, cpu_w, twin_w = windows(on_hal), windows(on_cpu), windows(twin)
    spread = max(abs(a - b) for a, b in zip(twin_w, cpu_w))
    print(f"resnet18 windows: hal {[round(v, 3) for v in hal_w]}\n"
          f"  cpu {[round(v, 3) for v in cpu_w]}\n"
          f"  twin {[round(v, 3) for v in twin_w]}; twin spread {spread:.3f}")
    for i, (h, c) in enumerate(zip(hal_w, cpu_w)):
        assert abs(h - c) <= 3 * spread + 0.05, f"window {i}: hal {h:.4f} cpu {c:.4f}"
    assert cpu_w[-1] < cpu_w[0] - 0.3 and hal_w[-1] < hal_w[0] - 0.3  # both learn
