#!/usr/bin/env python3
"""ResNet training through HAL (the PyTorch device of bindings/torch, ``hal``) beside
PyTorch CPU eager on the same machine, from the same initial weights and the same
synthetic batches: torchvision's ResNet, SGD with momentum, cross-entropy over 1000
classes. Prints the loss of every step on both devices, their largest relative gap,
and images/s of each (the steps after --warmup, wall time including the optimizer).

The seed's benchmark is ``--arch resnet50 --size 224 --batch 16 --steps 50`` (the
default); on a small machine a shorter variant (``--arch resnet18 --size 64``) shows the
same comparison. Run with PYTHONPATH=<build>/python (hal_torch) and HAL_PLUGINS=cpu.

With --noise-floor the same model is trained once more on PyTorch CPU with channels-last
tensors (the same math on other kernels, so other roundings from the first step on): the
gap between PyTorch's two runs is the tolerance a loss curve on another device can be held
to (at this initialisation the batch-norm gradients amplify a forward difference of 1e-5
to 1e-2, and training on random labels amplifies it further step by step).

Usage: resnet_torch.py [--arch resnet50] [--size 224] [--batch 16] [--steps 50]
                       [--warmup 2] [--lr 0.01] [--devices hal,cpu] [--progress]
                       [--noise-floor]
"""
import argparse
import copy
import time

import torch
import torchvision


def train(device, model, args, channels_last=False):
    model = copy.deepcopy(model).to(device)
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(memory_format=memory_format)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    losses, seconds = [], []
    for _ in range(args.steps):
        x = torch.randn(args.batch, 3, args.size, args.size, generator=g)
        y = torch.randint(0, 1000, (args.batch,), generator=g)
        start = time.perf_counter()
        x = x.to(device).to(memory_format=memory_format)
        loss = torch.nn.functional.cross_entropy(model(x), y.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())  # waits for the step
        seconds.append(time.perf_counter() - start)
        if args.progress:
            print(f"  {device} step {len(losses)}: loss {losses[-1]:.6f}, {seconds[-1]:.2f} s",
                  flush=True)
    timed = seconds[args.warmup:]
    images_per_s = args.batch * len(timed) / sum(timed) if timed else float("nan")
    return losses, images_per_s


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", default="resnet50")
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--devices", default="hal,cpu")
    parser.add_argument("--progress", action="store_true", help="print every step as it ends")
    parser.add_argument("--noise-floor", action="store_true",
                        help="also train on PyTorch CPU with channels-last tensors and report "
                        "its gap to the last device's run")
    args = parser.parse_args()
    devices = args.devices.split(",")
    if "hal" in devices:
        import hal_torch  # noqa: F401  (registers the hal device)
    torch.manual_seed(0)
    model = getattr(torchvision.models, args.arch)(num_classes=1000)
    print(f"# {args.arch} {args.size}x{args.size} batch {args.batch}, {args.steps} steps of SGD "
          f"(momentum 0.9, lr {args.lr}); torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")
    results = {}
    for device in devices:
        results[device] = train(device, model, args)
        print(f"{device}: {results[device][1]:.2f} images/s", flush=True)
    if len(devices) == 2:
        a, b = (results[d][0] for d in devices)
        print(f"step {'loss ' + devices[0]:>14} {'loss ' + devices[1]:>14} {'rel gap':>9}")
        worst = 0.0
        for step, (x, y) in enumerate(zip(a, b), start=1):
            gap = abs(x - y) / (1 + abs(y))
            worst = max(worst, gap)
            print(f"{step:4} {x:14.6f} {y:14.6f} {gap:9.2e}")
        speed = results[devices[0]][1] / results[devices[1]][1]
        print(f"largest relative loss gap {worst:.2e}; {devices[0]}/{devices[1]} speed {speed:.2f}x")
    if args.noise_floor:
        floor, _ = train("cpu", model, args, channels_last=True)
        last = results[devices[-1]][0]
        gaps = [abs(x - y) / (1 + abs(y)) for x, y in zip(floor, last)]
        print("floor gap per step: " + " ".join(f"{g:.1e}" for g in gaps))
        print(f"noise floor: largest relative loss gap between PyTorch CPU channels-last and "
              f"{devices[-1]} {max(gaps):.2e}")


if __name__ == "__main__":
    main()
