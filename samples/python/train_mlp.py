"""Trains a two-layer perceptron with hal.ops alone: forward, backward and AdamW on a HAL
device, the host only feeding batches and reading the loss.

    PYTHONPATH=<build>/python HAL_PLUGINS=cpu python3 samples/python/train_mlp.py [--steps 300]

The task is synthetic and learnable: 32 features, 8 classes, the label of a point the class
whose (hidden) prototype it is nearest. Prints the loss every 50 steps and the held-out
accuracy at the end; exits non-zero when the loss did not fall.
"""
import argparse
import sys

import numpy as np

import hal
from hal import ops

FEATURES, HIDDEN, CLASSES, BATCH = 32, 128, 8, 256


def make_data(rng, prototypes, count):
    x = rng.standard_normal((count, FEATURES), dtype=np.float32)
    labels = np.argmax(x @ prototypes, axis=1).astype(np.int32)
    return x, labels


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--device", type=int, default=0)
    args = parser.parse_args()

    dev = hal.device(args.device)
    rng = np.random.default_rng(7)
    prototypes = rng.standard_normal((FEATURES, CLASSES), dtype=np.float32)

    def init(*shape, scale):
        return hal.to_device(rng.standard_normal(shape, dtype=np.float32) * scale, dev)

    params = [init(FEATURES, HIDDEN, scale=FEATURES ** -0.5), init(HIDDEN, scale=0.0),
              init(HIDDEN, CLASSES, scale=HIDDEN ** -0.5), init(CLASSES, scale=0.0)]
    moments = [[init(*p.shape, scale=0.0) for p in params] for _ in range(2)]
    pre = hal.empty((BATCH, HIDDEN), np.float32, dev)  # the pre-activation, for the backward

    def forward(x):
        h = ops.matmul(x, params[0], bias=params[1], activation="gelu_erf", aux=pre)
        return ops.matmul(h, params[2], bias=params[3]), h

    first = last = None
    for step in range(1, args.steps + 1):
        xs, ys = make_data(rng, prototypes, BATCH)
        x, labels = hal.to_device(xs, dev), hal.to_device(ys, dev)
        logits, h = forward(x)
        result = ops.cross_entropy(logits, labels, grad=True, grad_logits=logits)
        dlogits = result.grad_logits
        assert dlogits is not None  # grad=True
        # The backward pass, one op per line.
        dw2 = ops.matmul(h, dlogits, transpose_a=True)
        _, db2 = ops.bias_activation_backward(dlogits, compute_bias_grad=True)
        dh = ops.matmul(dlogits, params[2], transpose_b=True)
        dpre, db1 = ops.bias_activation_backward(dh, pre, activation="gelu_erf",
                                                 compute_bias_grad=True, grad_pre=dh)
        dw1 = ops.matmul(x, dpre, transpose_a=True)
        ops.adamw(params, [dw1, db1, dw2, db2], *moments, lr=args.lr, step=step,
                  weight_decay=0.01, max_grad_norm=1.0)
        if step == 1 or step % 50 == 0 or step == args.steps:
            loss = float(result.loss.to_numpy()[0])
            first = loss if first is None else first
            last = loss
            print(f"step {step:4d}  loss {loss:.4f}")

    xs, ys = make_data(rng, prototypes, BATCH)
    logits, _ = forward(hal.to_device(xs, dev))
    accuracy = float((np.argmax(logits.to_numpy(), axis=1) == ys).mean())
    print(f"held-out accuracy {accuracy:.3f} (chance {1 / CLASSES:.3f})")
    assert first is not None and last is not None
    fell = last < 0.5 * first
    print(f"train_mlp: loss {first:.4f} -> {last:.4f}: " +
          ("the loss fell" if fell else "THE LOSS DID NOT FALL"))
    return 0 if fell else 1


if __name__ == "__main__":
    sys.exit(main())
