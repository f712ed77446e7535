"""Quantization-aware fine-tuning of a small GPT to int8 on the ``hal`` device.

1. Train the GPT of ``gpt.py`` in float32 (bytes of text, vocabulary 256).
2. Fine-tune it with fake quantization in every linear layer (the output projection too):
   weights per output channel, int8 symmetric with scale amax / 127 (recomputed each step,
   gradient through the straight-through estimator); the layer's input per tensor, int8 with a
   learned scale (LSQ: ``torch._fake_quantize_learnable_per_tensor_affine``). On ``hal`` both run
   as HAL's fake-quantize op and its backward.
3. Deploy: every linear layer becomes ``hal_torch.quantization.Int8Linear``, weights quantized
   to int8 once with HAL's quantize op, inputs with the learned scale, the product HAL's int8
   scaled matmul.

It prints the validation loss of the float32, fake-quantized and int8-deployed models and the
deployed model's loss relative to float32's (the goal: within 2 %), and relative to the float32
model trained for as many more steps without fake quantization.

    HAL_PLUGINS=cpu PYTHONPATH=<build>/python python3 samples/torch/qat_finetune.py --size small
"""
from __future__ import annotations

import argparse
import copy
import math
import os
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt import GPT, GPTConfig, batches, corpus  # noqa: E402

import hal_torch  # noqa: E402,F401  (the hal device)
from hal_torch.quantization import Int8Linear  # noqa: E402

SIZES = {
    # name: (config, batch, f32 steps, QAT steps, validation batches)
    "tiny": (GPTConfig(context=32, layers=1, heads=2, width=32), 16, 120, 40, 4),
    "small": (GPTConfig(context=64, layers=2, heads=4, width=64), 16, 400, 100, 16),
    "medium": (GPTConfig(context=128, layers=4, heads=4, width=128), 16, 800, 200, 32),
}


class QATLinear(nn.Module):
    """A linear layer trained for int8: fake-quantized weight (per output channel, scale
    amax / 127) and input (per tensor, LSQ's learned scale with its gradient factor)."""

    def __init__(self, linear: nn.Linear, input_amax: float) -> None:
        super().__init__()
        self.linear = linear
        self.input_scale = nn.Parameter(torch.tensor([max(input_amax, 1e-8) / 127.0],
                                                     device=linear.weight.device))
        self.register_buffer("input_zero_point",
                             torch.zeros(1, device=linear.weight.device))
        self.register_buffer("weight_zero_point", torch.zeros(
            linear.out_features, dtype=torch.int32, device=linear.weight.device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.linear.weight
        w_scale = (w.detach().abs().amax(dim=1) / 127.0).clamp_min(1e-12)
        wq = torch.fake_quantize_per_channel_affine(w, w_scale, self.weight_zero_point, 0,
                                                    -128, 127)
        grad_factor = 1.0 / math.sqrt(x.numel() * 127.0)
        xq = torch._fake_quantize_learnable_per_tensor_affine(
            x, self.input_scale, self.input_zero_point, -128, 127, grad_factor)
        return nn.functional.linear(xq, wq, self.linear.bias)


def linear_slots(model: nn.Module):
    """(parent, attribute name, linear) of every nn.Linear in the model."""
    for parent in model.modules():
        for name, child in parent.named_children():
            if isinstance(child, nn.Linear):
                yield parent, name, child


@torch.no_grad()
def input_amax(model: nn.Module, idx: torch.Tensor) -> dict:
    """The largest |input| each linear layer sees on a calibration batch."""
    seen: dict = {}
    hooks = [linear.register_forward_hook(
        lambda mod, args, out: seen.__setitem__(mod, args[0].abs().max().item()))
        for _, _, linear in linear_slots(model)]
    model(idx)
    for h in hooks:
        h.remove()
    return seen


def to_qat(model: GPT, calibration: torch.Tensor) -> None:
    amax = input_amax(model, calibration)
    for parent, name, linear in list(linear_slots(model)):
        setattr(parent, name, QATLinear(linear, amax[linear]))


def to_int8(model: GPT) -> None:
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, QATLinear):
                setattr(parent, name, Int8Linear(child.linear, child.input_scale.detach()))


@torch.no_grad()
def validation_loss(model: GPT, data: torch.Tensor, context: int, batch: int, count: int,
                    device: str) -> float:
    """Mean loss over |count| fixed batches of consecutive windows of the validation bytes."""
    model.eval()
    total = 0.0
    stride = max(1, (len(data) - context - 1) // (count * batch))
    for b in range(count):
        starts = [(b * batch + i) * stride for i in range(batch)]
        x = torch.stack([data[s:s + context] for s in starts]).to(device)
        y = torch.stack([data[s + 1:s + 1 + context] for s in starts]).to(device)
        _, loss = model(x, y)
        total += loss.item()
    model.train()
    return total / count


def train(model: GPT, data: torch.Tensor, steps: int, batch: int, lr: float, seed: int,
          device: str, extra_params=()) -> float:
    generator = torch.Generator().manual_seed(seed)
    stream = batches(data, model.config.context, batch, generator)
    # Extra parameters (the learned scales) are their own group, without weight decay.
    for p in extra_params:
        p.requires_grad_(False)
    optimizer = model.optimizer(lr, 0.1, fused=True)
    for p in extra_params:
        p.requires_grad_(True)
    if extra_params:
        optimizer.add_param_group({"params": list(extra_params), "weight_decay": 0.0})
    loss = torch.tensor(float("nan"))
    for step in range(steps):
        # Linear warm-up over the first tenth, cosine decay to a tenth of the peak.
        warm = max(1, steps // 10)
        scale = (step + 1) / warm if step < warm else \
            0.1 + 0.45 * (1 + math.cos(math.pi * (step - warm) / max(1, steps - warm)))
        for group in optimizer.param_groups:
            group["lr"] = lr * scale
        x, y = next(stream)
        _, loss = model(x.to(device), y.to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    return loss.item()


def run(size: str = "tiny", device: str = "hal", seed: int = 0, path: str | None = None,
        verbose: bool = True) -> dict:
    config, batch, f32_steps, qat_steps, val_batches = SIZES[size]
    torch.manual_seed(seed)
    data = corpus(path) if path else corpus()
    split = int(len(data) * 0.9)
    train_data, val_data = data[:split], data[split:]
    model = GPT(config).to(device)
    started = time.perf_counter()
    result = {"size": size, "device": device}
    result["initial"] = validation_loss(model, val_data, config.context, batch, val_batches,
                                        device)
    train(model, train_data, f32_steps, batch, 3e-3, seed, device)
    result["f32"] = validation_loss(model, val_data, config.context, batch, val_batches, device)

    # The float32 model fine-tuned for as many steps, without fake quantization: what the
    # extra steps alone are worth, so that QAT's own cost is visible.
    twin = copy.deepcopy(model)
    train(twin, train_data, qat_steps, batch, 3e-4, seed + 2, device)
    result["f32_same_steps"] = validation_loss(twin, val_data, config.context, batch,
                                               val_batches, device)
    del twin

    calibration = next(batches(train_data, config.context, batch,
                               torch.Generator().manual_seed(seed + 1)))[0].to(device)
    to_qat(model, calibration)
    scales = [m.input_scale for m in model.modules() if isinstance(m, QATLinear)]
    result["fake_quant_before"] = validation_loss(model, val_data, config.context, batch,
                                                  val_batches, device)
    train(model, train_data, qat_steps, batch, 3e-4, seed + 2, device, extra_params=scales)
    result["fake_quant"] = validation_loss(model, val_data, config.context, batch, val_batches,
                                           device)
    to_int8(model)
    assert not any(isinstance(m, (QATLinear, nn.Linear)) for m in model.modules())
    result["int8"] = validation_loss(model, val_data, config.context, batch, val_batches, device)
    result["int8_vs_f32"] = result["int8"] / result["f32"] - 1.0
    result["int8_vs_f32_same_steps"] = result["int8"] / result["f32_same_steps"] - 1.0
    result["seconds"] = time.perf_counter() - started
    if verbose:
        print(f"{size} GPT (layers {config.layers}, width {config.width}, context "
              f"{config.context}) on {device}: {f32_steps} f32 steps, {qat_steps} QAT steps, "
              f"validation over {val_batches} batches of {batch}")
        for key in ("initial", "f32", "f32_same_steps", "fake_quant_before", "fake_quant",
                    "int8"):
            print(f"  validation loss {key:18s} {result[key]:.4f}")
        print(f"  int8-deployed vs f32: {100 * result['int8_vs_f32']:+.2f} %, vs f32 trained "
              f"as many steps: {100 * result['int8_vs_f32_same_steps']:+.2f} % "
              f"({result['seconds']:.0f} s)")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--device", default="hal")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data", default=None, help="a text file or folder (default: "
                        "/usr/share/common-licenses)")
    parser.add_argument("--within", type=float, default=None,
                        help="exit 1 unless int8-deployed loss <= (1 + WITHIN) * f32 loss")
    args = parser.parse_args()
    result = run(args.size, args.device, args.seed, args.data)
    if args.within is not None and result["int8_vs_f32"] > args.within:
        print(f"int8-deployed loss {result['int8']:.4f} is more than {100 * args.within:.1f} % "
              f"above f32's {result['f32']:.4f}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
