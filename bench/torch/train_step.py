#!/usr/bin/env python3
"""Training steps per second through the hal device beside PyTorch's CPU eager, same script,
same machine, same process: a GPT (samples/torch/gpt.py, AdamW fused) in tokens/s and
torchvision's ResNet-18/50 (SGD with momentum) in images/s, with the share of each hal step
spent in the CPU fallback (hal_torch.metrics()) and the ops that fell back.

  PYTHONPATH=<build>/python HAL_PLUGINS=cpu HAL_TORCH_FALLBACK=silent \\
    python3 bench/torch/train_step.py gpt resnet18 resnet50 [--steps 5] [--warmup 2]
    [--rounds 1] [--batch 16] [--image 224] [--gpt-batch 8] [--threads N]

Each model runs its warm-up steps on `cpu` and on `hal`, then --rounds rounds of --steps timed
steps on `cpu` then on `hal` (interleaved, so load drifts hit both), from the same weights and
batches; the figure is the median step time. Not a test: no assertion on speed."""
import argparse
import copy
import os
import statistics
import sys
import time

import torch
import torchvision

import hal_torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "samples", "torch"))
from gpt import GPT, GPTConfig, batches, corpus  # noqa: E402


def synchronize(device):
    if device.startswith("hal"):
        torch.hal.synchronize()


def timed_steps(device, step, steps):
    """Seconds of each of |steps| calls of step(), each synchronized."""
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return times


def compare(cpu_step, hal_step, warmup, steps, rounds):
    """Median step seconds on cpu and hal over |rounds| interleaved rounds of |steps| steps each
    (cpu then hal, so load drifts hit both), the hal steps' total, and their fallback seconds."""
    for step, device in ((cpu_step, "cpu"), (hal_step, "hal")):
        for _ in range(warmup):
            step()
        synchronize(device)
    hal_torch.reset_metrics()
    cpu_times, hal_times = [], []
    for _ in range(rounds):
        cpu_times += timed_steps("cpu", cpu_step, steps)
        hal_times += timed_steps("hal", hal_step, steps)
    m = hal_torch.metrics()["ops"]
    ignored = ("aten::_copy_from", "aten::_local_scalar_dense")
    fallback_s = sum(v["fallback_seconds"] for k, v in m.items() if k not in ignored)
    fell = sorted(k for k, v in m.items() if v["fallback"] and k not in ignored)
    return (statistics.median(cpu_times), statistics.median(hal_times), sum(hal_times),
            fallback_s, fell)


def gpt_step_fn(device, model, batch):
    model = copy.deepcopy(model).to(device)
    opt = model.optimizer(lr=3e-4, weight_decay=0.1, fused=True)
    data = batches(corpus(), model.config.context, batch, torch.Generator().manual_seed(0))

    def step():
        x, y = next(data)
        _, loss = model(x.to(device), y.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


def resnet_step_fn(device, model, batch, image):
    model = copy.deepcopy(model).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, 3, image, image, generator=g).to(device)
    y = torch.randint(0, 1000, (batch,), generator=g).to(device)

    def step():
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("models", nargs="*", default=["gpt", "resnet18"])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1,
                        help="interleaved rounds of --steps steps each, cpu then hal")
    parser.add_argument("--batch", type=int, default=16, help="ResNet images per step")
    parser.add_argument("--image", type=int, default=224, help="ResNet image side")
    parser.add_argument("--gpt-batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, hal device "
          f"{torch.hal.get_device_name(0) if hasattr(torch.hal, 'get_device_name') else 'hal:0'}")
    print(f"{'model':<10} {'unit':<9} {'cpu eager':>10} {'hal':>10} {'hal/cpu':>8} "
          f"{'fallback share':>15}  fell back")
    for name in args.models:
        torch.manual_seed(0)
        if name == "gpt":
            model = GPT(GPTConfig())
            per_step = args.gpt_batch * model.config.context
            unit = "tokens/s"
            make = lambda dev: gpt_step_fn(dev, model, args.gpt_batch)  # noqa: E731
        else:
            model = getattr(torchvision.models, name)()
            per_step = args.batch
            unit = "images/s"
            make = lambda dev: resnet_step_fn(dev, model, args.batch, args.image)  # noqa: E731
        cpu_s, hal_s, hal_total, fallback_s, fell = compare(make("cpu"), make("hal"),
                                                            args.warmup, args.steps, args.rounds)
        print(f"{name:<10} {unit:<9} {per_step / cpu_s:>10.1f} {per_step / hal_s:>10.1f} "
              f"{cpu_s / hal_s:>7.2f}x {100 * fallback_s / hal_total:>14.1f}%  {fell}",
              flush=True)


if __name__ == "__main__":
    main()
