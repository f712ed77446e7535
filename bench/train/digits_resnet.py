#!/usr/bin/env python3
"""A small ResNet trained to convergence on real images every machine has:
scikit-learn's bundled 8x8 handwritten digits (1797 images, 10 classes), through
HAL's PyTorch device (``hal``) and, for comparison, PyTorch CPU eager, from the
same initial weights and the same shuffles. Issue 34's goal: test accuracy >= 97 %.

The network: a 3x3 stem convolution (32 channels), three residual basic blocks
(3x3 convolution, batch norm, ReLU, twice, with an identity or a strided 1x1
projection shortcut: 32 -> 64 at 4x4), global average pooling, a linear layer.
SGD with momentum 0.9 and weight decay, a cosine learning-rate schedule,
cross-entropy. The split is a stratified 75/25 one with a fixed seed; pixels
(0..16) are scaled to [0, 1] and standardised by the training set's mean and
deviation.

Prints per device the test accuracy, the final training loss and the wall time;
exits 1 when a device's accuracy is below --goal.
Run with PYTHONPATH=<build>/python (hal_torch) and HAL_PLUGINS=cpu; needs
scikit-learn (bench/setup_peers.sh --torch installs it).

Usage: digits_resnet.py [--epochs 30] [--batch 64] [--lr 0.05] [--devices hal,cpu]
                        [--goal 0.97]
"""
import argparse
import copy
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.shortcut is None else self.shortcut(x)))


class DigitsResNet(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32),
                                  nn.ReLU())
        self.blocks = nn.Sequential(BasicBlock(32, 32, 1), BasicBlock(32, 64, 2),
                                    BasicBlock(64, 64, 1))
        self.head = nn.Linear(64, classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def load(seed):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    labels = torch.tensor(digits.target, dtype=torch.int64)
    train_idx, test_idx = train_test_split(range(len(labels)), test_size=0.25,
                                           random_state=seed, stratify=digits.target)
    x_train, y_train = images[train_idx], labels[train_idx]
    x_test, y_test = images[test_idx], labels[test_idx]
    mean, std = x_train.mean(), x_train.std()
    return (x_train - mean) / std, y_train, (x_test - mean) / std, y_test


def run(device, model, data, args):
    x_train, y_train, x_test, y_test = data
    model = copy.deepcopy(model).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    steps_per_epoch = (len(y_train) + args.batch - 1) // args.batch
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(opt, args.epochs * steps_per_epoch)
    g = torch.Generator().manual_seed(args.seed)
    start = time.perf_counter()
    loss_sum = 0.0
    for epoch in range(args.epochs):
        model.train()
        order = torch.randperm(len(y_train), generator=g)
        loss_sum = 0.0
        for step in range(steps_per_epoch):
            idx = order[step * args.batch:(step + 1) * args.batch]
            x, y = x_train[idx].to(device), y_train[idx].to(device)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            schedule.step()
            loss_sum += loss.item() * len(idx)
        loss_sum /= len(y_train)
        if args.verbose:
            print(f"  {device} epoch {epoch + 1}: training loss {loss_sum:.4f}", flush=True)
    train_s = time.perf_counter() - start
    model.eval()
    with torch.no_grad():
        predicted = model(x_test.to(device)).argmax(1).cpu()
    accuracy = (predicted == y_test).float().mean().item()
    return accuracy, loss_sum, train_s


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--devices", default="hal,cpu")
    parser.add_argument("--goal", type=float, default=0.97)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    devices = args.devices.split(",")
    if "hal" in devices:
        import hal_torch  # noqa: F401  (registers the hal device)
    data = load(args.seed)
    torch.manual_seed(args.seed)
    model = DigitsResNet()
    print(f"# digits: {len(data[1])} training and {len(data[3])} test images (8x8), "
          f"{args.epochs} epochs of batch {args.batch}; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")
    failed = False
    for device in devices:
        accuracy, loss, seconds = run(device, model, data, args)
        print(f"{device}: test accuracy {100 * accuracy:.2f} % ({len(data[3])} images), "
              f"final training loss {loss:.4f}, {seconds:.1f} s training", flush=True)
        failed |= accuracy < args.goal
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
