#!/usr/bin/env python3
"""samples/train's model in PyTorch on CPU, for the side-by-side comparison.

The same model (parameter order, [in, out] weights, initialisation from the
same splitmix64 stream), the same corpus, split, batches, validation set,
learning-rate schedule, AdamW update and global-norm clipping as
samples/train (config.cpp, corpus.cpp, model.cpp, trainer.cpp), so that the
loss curves can be compared step by step and tokens/s side by side.

    python3 bench/train/train_torch.py --steps 300 --log torch.jsonl

Installed by bench/train/run_torch.sh (pip install torch); CI does not run it.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - the bench script installs it
    sys.exit("train_torch.py: PyTorch is not installed (bench/train/run_torch.sh installs it)")

MASK = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15
CORPUS = "/usr/share/common-licenses"


class Rng:
    """splitmix64, as corpus.hpp: one 64-bit word of state."""

    def __init__(self, seed: int) -> None:
        self.state = seed & MASK

    def next(self) -> int:
        self.state = (self.state + GAMMA) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def below(self, bound: int) -> int:
        return (self.next() * bound) >> 64


def splitmix_block(seed: int, first: int, count: int) -> np.ndarray:
    """next() outputs number first .. first+count-1 of Rng(seed), vectorised:
    the state after i calls is seed + i * GAMMA (mod 2^64)."""
    with np.errstate(over="ignore"):
        index = np.arange(first + 1, first + count + 1, dtype=np.uint64)
        z = np.uint64(seed & MASK) + index * np.uint64(GAMMA)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def load_corpus(path: str, context: int) -> tuple[bytes, bytes]:
    if os.path.isdir(path):
        names = sorted(
            (n for n in os.listdir(path)
             if os.path.isfile(os.path.join(path, n)) and not os.path.islink(os.path.join(path, n))),
            key=lambda n: n.encode())
        text = b"".join(open(os.path.join(path, n), "rb").read() for n in names)
    else:
        text = open(path, "rb").read()
    n = len(text)
    split = n // 10 * 9 + (n % 10) * 9 // 10
    train, validation = text[:split], text[split:]
    if len(train) < context + 2 or len(validation) < context + 2:
        sys.exit(f"train_torch.py: corpus {path} is too short for context {context}")
    return train, validation


def sample_batch(train: bytes, context: int, count: int, rng: Rng) -> tuple[torch.Tensor, torch.Tensor]:
    offsets = [rng.below(len(train) - context) for _ in range(count)]
    data = np.frombuffer(train, dtype=np.uint8)
    tokens = np.stack([data[o:o + context] for o in offsets]).astype(np.int64)
    targets = np.stack([data[o + 1:o + context + 1] for o in offsets]).astype(np.int64)
    return torch.from_numpy(tokens), torch.from_numpy(targets)


def validation_batch(validation: bytes, context: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
    last = len(validation) - context - 1
    offsets = [0 if count == 1 else last * s // (count - 1) for s in range(count)]
    data = np.frombuffer(validation, dtype=np.uint8)
    tokens = np.stack([data[o:o + context] for o in offsets]).astype(np.int64)
    targets = np.stack([data[o + 1:o + context + 1] for o in offsets]).astype(np.int64)
    return torch.from_numpy(tokens), torch.from_numpy(targets)


def make_parameters(layers: int, width: int, context: int, vocab: int, seed: int):
    """(name, tensor, decay) in model.cpp's order, initialised as it does."""
    C = width
    # In f32 arithmetic, as model.cpp computes them.
    std = np.float32(0.02)
    residual_std = np.float32(std / np.sqrt(np.float32(2.0 * layers)))
    spec = [("wte", (vocab, C), std), ("wpe", (context, C), std)]
    for layer in range(layers):
        p = f"h{layer}."
        spec += [(p + "ln1_g", (C,), "one"), (p + "ln1_b", (C,), "zero"),
                 (p + "qkv_w", (C, 3 * C), std), (p + "qkv_b", (3 * C,), "zero"),
                 (p + "proj_w", (C, C), residual_std), (p + "proj_b", (C,), "zero"),
                 (p + "ln2_g", (C,), "one"), (p + "ln2_b", (C,), "zero"),
                 (p + "fc_w", (C, 4 * C), std), (p + "fc_b", (4 * C,), "zero"),
                 (p + "out_w", (4 * C, C), residual_std), (p + "out_b", (C,), "zero")]
    spec += [("lnf_g", (C,), "one"), ("lnf_b", (C,), "zero"), ("head_w", (C, vocab), std)]
    init_seed = (seed + 0x1000) & MASK
    drawn = 0  # next() calls made so far
    params = []
    for name, shape, init in spec:
        count = int(np.prod(shape))
        if init == "one":
            values = np.ones(count)
        elif init == "zero":
            values = np.zeros(count)
        else:
            # Each normal() takes two consecutive draws: radius, then angle.
            words = splitmix_block(init_seed, drawn, 2 * count)
            drawn += 2 * count
            u1 = (words[0::2] >> np.uint64(11)).astype(np.float64) * 2.0**-53
            u2 = (words[1::2] >> np.uint64(11)).astype(np.float64) * 2.0**-53
            values = np.sqrt(-2.0 * np.log(1.0 - u1)) * np.cos(2.0 * math.pi * u2) * np.float64(init)
        tensor = torch.tensor(values.astype(np.float32).reshape(shape), requires_grad=True)
        params.append((name, tensor, len(shape) == 2))
    return params


def forward(params: dict, tokens: torch.Tensor, layers: int, heads: int) -> torch.Tensor:
    B, T = tokens.shape
    C = params["wte"].shape[1]
    D = C // heads
    x = params["wte"][tokens] + params["wpe"][:T]
    for layer in range(layers):
        p = f"h{layer}."
        h = F.layer_norm(x, (C,), params[p + "ln1_g"], params[p + "ln1_b"], 1e-5)
        qkv = h @ params[p + "qkv_w"] + params[p + "qkv_b"]
        q, k, v = (t.view(B, T, heads, D).transpose(1, 2) for t in qkv.split(C, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(B, T, C)
        x = x + y @ params[p + "proj_w"] + params[p + "proj_b"]
        h = F.layer_norm(x, (C,), params[p + "ln2_g"], params[p + "ln2_b"], 1e-5)
        h = F.gelu(h @ params[p + "fc_w"] + params[p + "fc_b"], approximate="tanh")
        x = x + h @ params[p + "out_w"] + params[p + "out_b"]
    x = F.layer_norm(x, (C,), params["lnf_g"], params["lnf_b"], 1e-5)
    return x @ params["head_w"]


def learning_rate_at(step: int, peak: float, warmup: int, steps: int, final_ratio: float) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    decay = steps - warmup - 1 if steps > warmup + 1 else 1
    progress = min(1.0, (step - warmup) / decay)
    floor = peak * final_ratio
    return floor + (peak - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--corpus", default=CORPUS)
    parser.add_argument("--log")
    parser.add_argument("--label", default="PyTorch cpu")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args()
    if args.width % args.heads:
        parser.error("heads must divide the width")

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    beta1, beta2, eps, weight_decay, max_norm, final_ratio = 0.9, 0.95, 1e-8, 0.1, 1.0, 0.1
    train, validation = load_corpus(args.corpus, args.context)
    listed = make_parameters(args.layers, args.width, args.context, 256, args.seed)
    params = {name: tensor for name, tensor, _ in listed}
    decay = {name: d for name, _, d in listed}
    m = {name: torch.zeros_like(t) for name, t in params.items()}
    v = {name: torch.zeros_like(t) for name, t in params.items()}
    count = sum(t.numel() for t in params.values())
    print(f"model: layers {args.layers}, width {args.width}, heads {args.heads}, context "
          f"{args.context}, batch {args.batch}, steps {args.steps}, lr {args.lr}, seed {args.seed}")
    print(f"parameters: {count}; torch {torch.__version__}, {args.threads} threads")

    data_rng = Rng(args.seed)
    sequences = (16 + args.batch - 1) // args.batch * args.batch
    val_tokens, val_targets = validation_batch(validation, args.context, sequences)
    log = open(args.log, "w") if args.log else None

    def evaluate() -> float:
        with torch.no_grad():
            total = 0.0
            for start in range(0, sequences, args.batch):
                logits = forward(params, val_tokens[start:start + args.batch], args.layers, args.heads)
                total += F.cross_entropy(logits.reshape(-1, 256),
                                         val_targets[start:start + args.batch].reshape(-1)).item()
            return total / (sequences // args.batch)

    total_ms, timed = 0.0, 0
    last_val = float("nan")
    for step in range(args.steps):
        tokens, targets = sample_batch(train, args.context, args.batch, data_rng)
        started = time.perf_counter()
        logits = forward(params, tokens, args.layers, args.heads)
        loss = F.cross_entropy(logits.reshape(-1, 256), targets.reshape(-1))
        for t in params.values():
            t.grad = None
        loss.backward()
        with torch.no_grad():
            norm = math.sqrt(sum(float((t.grad.double() ** 2).sum()) for t in params.values()))
            clip = min(1.0, max_norm / (norm + 1e-6))
            lr = learning_rate_at(step, args.lr, args.warmup, args.steps, final_ratio)
            t1 = step + 1
            for name, w in params.items():
                g = w.grad * clip
                m[name].mul_(beta1).add_(g, alpha=1 - beta1)
                v[name].mul_(beta2).addcmul_(g, g, value=1 - beta2)
                update = (m[name] / (1 - beta1**t1)) / ((v[name] / (1 - beta2**t1)).sqrt() + eps)
                if decay[name]:
                    update = update + weight_decay * w
                w.sub_(lr * update)
        step_ms = (time.perf_counter() - started) * 1000.0
        tokens_per_s = args.batch * args.context / (step_ms / 1000.0)
        if step > 0:  # as samples/train: the first step pays for first-touch page faults
            total_ms += step_ms
            timed += 1
        evaluate_now = (args.eval_every > 0 and (step + 1) % args.eval_every == 0) or step + 1 == args.steps
        val = evaluate() if evaluate_now else None
        if val is not None:
            last_val = val
        if not args.quiet or evaluate_now:
            print(f"step {step + 1:4d}/{args.steps}  loss {loss.item():.4f}  val "
                  f"{'%.4f' % val if val is not None else '     -'}  lr {lr:.2e}  norm {norm:.3f}  "
                  f"{step_ms:7.1f} ms  {tokens_per_s:8.0f} tok/s", flush=True)
        if log:
            log.write(json.dumps({"step": step + 1, "loss": loss.item(), "val_loss": val, "lr": lr,
                                  "grad_norm": norm, "step_ms": step_ms, "tokens_per_s": tokens_per_s,
                                  "label": args.label}) + "\n")
            log.flush()
    if timed:
        print(f"done: {args.steps} steps, mean {total_ms / timed:.1f} ms/step, "
              f"{args.batch * args.context * timed / (total_ms / 1000.0):.0f} tokens/s (steps 2..), "
              f"last val loss {last_val:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
