#!/usr/bin/env python3
"""Where a ResNet training step spends its time, op by op, on the hal device beside PyTorch's
CPU eager, same process: every convolution, batch norm and max pooling of torchvision's model
(their shapes recorded from one forward), each forward and backward called through aten on
`cpu` and on `hal`, weighted by how often the model runs that shape.

  PYTHONPATH=<build>/python HAL_PLUGINS=cpu OMP_WAIT_POLICY=PASSIVE \\
    python3 bench/torch/resnet_ops.py [--arch resnet18] [--batch 8] [--image 160]
    [--calls 3] [--rounds 3] [--threads N] [--only conv,bn,maxpool,relu]

Each round times every (op, shape) --calls times on `cpu`, then on `hal` (synchronized after
the calls), interleaved so load drifts hit both; the figure is the median over rounds of ms per
call, times the shape's count in one step. The backward of a convolution is aten's
convolution_backward with the masks autograd asks for (no input gradient for the stem). Not a
test: no assertion on speed."""
import argparse
import collections
import statistics
import time

import torch
import torchvision

import hal_torch  # noqa: F401  (registers the hal device)

aten = torch.ops.aten


def synchronize(device):
    if device.startswith("hal"):
        torch.hal.synchronize()


def record_shapes(model, batch, image):
    """{(kind, key): count}: the convolution, batch-norm and max-pooling calls of one forward."""
    seen = collections.Counter()

    def hook(module, inputs, _output):
        x = inputs[0]
        if isinstance(module, torch.nn.Conv2d):
            key = (tuple(x.shape), tuple(module.weight.shape), module.stride, module.padding,
                   module.dilation, module.groups, module.bias is not None)
            seen[("conv", key)] += 1
        elif isinstance(module, torch.nn.BatchNorm2d):
            seen[("bn", (tuple(x.shape),))] += 1
        elif isinstance(module, torch.nn.MaxPool2d):
            seen[("maxpool", (tuple(x.shape), module.kernel_size, module.stride,
                              module.padding))] += 1
        elif isinstance(module, torch.nn.ReLU):
            seen[("relu", (tuple(x.shape),))] += 1

    handles = [m.register_forward_hook(hook) for m in model.modules()]
    with torch.no_grad():
        model(torch.randn(batch, 3, image, image))
    for h in handles:
        h.remove()
    return seen


def make_calls(kind, key, device, first_conv):
    """(forward, backward) callables of one (kind, key) on |device|, inputs made here."""
    g = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=g).to(device)

    if kind == "conv":
        xs, ws, stride, padding, dilation, groups, bias = key
        x, w = rand(*xs), rand(*ws)
        b = rand(ws[0]) if bias else None
        y = aten.convolution(x, w, b, stride, padding, dilation, False, [0, 0], groups)
        gy = rand(*y.shape)
        mask = [not first_conv, True, bias]
        return (lambda: aten.convolution(x, w, b, stride, padding, dilation, False, [0, 0],
                                         groups),
                lambda: aten.convolution_backward(gy, x, w, [ws[0]] if bias else None, stride,
                                                  padding, dilation, False, [0, 0], groups, mask))
    if kind == "bn":
        (xs,) = key
        c = xs[1]
        x, w, b = rand(*xs), rand(c), rand(c)
        rm, rv = torch.zeros(c).to(device), torch.ones(c).to(device)
        _, mean, invstd = aten.native_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)
        gy = rand(*xs)
        return (lambda: aten.native_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5),
                lambda: aten.native_batch_norm_backward(gy, x, w, rm, rv, mean, invstd, True,
                                                        1e-5, [True, True, True]))
    if kind == "maxpool":
        xs, k, s, p = key
        x = rand(*xs)
        y, idx = aten.max_pool2d_with_indices(x, [k, k], [s, s], [p, p])
        gy = rand(*y.shape)
        return (lambda: aten.max_pool2d_with_indices(x, [k, k], [s, s], [p, p]),
                lambda: aten.max_pool2d_with_indices_backward(gy, x, [k, k], [s, s], [p, p],
                                                              [1, 1], False, idx))
    if kind == "relu":
        (xs,) = key
        x, gy = rand(*xs), rand(*xs)
        y = torch.relu(x)
        return (lambda: torch.relu(x), lambda: aten.threshold_backward(gy, y, 0))
    raise ValueError(kind)


def time_calls(fn, device, calls):
    fn()  # plans made, caches warm
    synchronize(device)
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    synchronize(device)
    return (time.perf_counter() - start) / calls


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", default="resnet18")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--image", type=int, default=160)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's)")
    parser.add_argument("--only", default="conv,bn,maxpool,relu")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    kinds = args.only.split(",")
    model = getattr(torchvision.models, args.arch)()
    shapes = record_shapes(model, args.batch, args.image)
    first = next(key for kind, key in shapes if kind == "conv")
    items = []
    for (kind, key), count in shapes.items():
        if kind not in kinds:
            continue
        calls = {dev: make_calls(kind, key, dev, key == first) for dev in ("cpu", "hal")}
        for phase in (0, 1):
            items.append((kind, "fwd" if phase == 0 else "bwd", key, count,
                          {dev: calls[dev][phase] for dev in calls}))
    times = {id(item): {"cpu": [], "hal": []} for item in items}
    for _ in range(args.rounds):
        for item in items:
            for dev in ("cpu", "hal"):
                times[id(item)][dev].append(time_calls(item[4][dev], dev, args.calls))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads; {args.arch} "
          f"batch {args.batch} at {args.image}x{args.image}; ms per step (median of "
          f"{args.rounds} rounds x {args.calls} calls)")
    totals = collections.defaultdict(lambda: [0.0, 0.0])
    print(f"{'op':<8} {'phase':<5} {'count':>5} {'cpu ms':>9} {'hal ms':>9} {'hal/cpu':>8}  shape")
    for item in items:
        kind, phase, key, count, _ = item
        cpu = statistics.median(times[id(item)]["cpu"]) * 1e3 * count
        hal = statistics.median(times[id(item)]["hal"]) * 1e3 * count
        totals[(kind, phase)][0] += cpu
        totals[(kind, phase)][1] += hal
        print(f"{kind:<8} {phase:<5} {count:>5} {cpu:>9.2f} {hal:>9.2f} {hal / cpu:>7.2f}x  "
              f"{key[0]}{' w ' + str(key[1]) if kind == 'conv' else ''}")
    print("totals")
    all_cpu = all_hal = 0.0
    for (kind, phase), (cpu, hal) in sorted(totals.items()):
        all_cpu += cpu
        all_hal += hal
        print(f"{kind:<8} {phase:<5} {'':>5} {cpu:>9.2f} {hal:>9.2f} {hal / cpu:>7.2f}x")
    print(f"{'all':<8} {'':<5} {'':>5} {all_cpu:>9.2f} {all_hal:>9.2f} {all_hal / all_cpu:>7.2f}x")


if __name__ == "__main__":
    main()
