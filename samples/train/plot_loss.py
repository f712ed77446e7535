#!/usr/bin/env python3
"""Draws loss curves from samples/train (or bench/train/train_torch.py) logs as SVG.

    plot_loss.py --out loss.svg LOG.jsonl [LOG.jsonl ...]

Each log holds one JSON object per line with "step", "loss", and optionally
"val_loss" (a number or null) and "label". Training loss is drawn as a line
per run, validation loss as markers on it. Plain Python, no plotting
library: the SVG is written by hand. Exit status 2 with a sentence naming
the file and line when a log cannot be read.
"""
from __future__ import annotations

import argparse
import html
import json
import math
import os
import sys

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2"]
WIDTH, HEIGHT = 860, 520
LEFT, RIGHT, TOP, BOTTOM = 70, 220, 50, 60


class LogError(Exception):
    pass


def read_log(path: str) -> dict:
    try:
        handle = open(path, encoding="utf-8")
    except OSError as error:
        raise LogError(f"{path}: cannot open: {error.strerror}") from error
    steps, losses, val_steps, val_losses, label = [], [], [], [], None
    with handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                step, loss = record["step"], record["loss"]
                if not isinstance(step, (int, float)) or not isinstance(loss, (int, float)):
                    raise TypeError("step and loss must be numbers")
                if not (math.isfinite(step) and math.isfinite(loss)):
                    raise ValueError("step and loss must be finite")
            except (ValueError, KeyError, TypeError) as error:
                raise LogError(f"{path}:{number}: not a training log record ({error})") from error
            steps.append(float(step))
            losses.append(float(loss))
            val = record.get("val_loss")
            if isinstance(val, (int, float)) and math.isfinite(val):
                val_steps.append(float(step))
                val_losses.append(float(val))
            if label is None and isinstance(record.get("label"), str):
                label = record["label"]
    if not steps:
        raise LogError(f"{path}: holds no step")
    return {"label": label or os.path.splitext(os.path.basename(path))[0], "steps": steps,
            "losses": losses, "val_steps": val_steps, "val_losses": val_losses}


def nice_ticks(low: float, high: float, count: int = 6) -> list[float]:
    if high <= low:
        high = low + 1.0
    raw = (high - low) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = min((m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw), default=raw)
    first = math.ceil(low / step) * step
    ticks, value = [], first
    while value <= high + 1e-9 * step:
        ticks.append(round(value, 10))
        value += step
    return ticks


def render(runs: list[dict], title: str) -> str:
    all_steps = [s for run in runs for s in run["steps"]]
    all_losses = [v for run in runs for v in run["losses"] + run["val_losses"]]
    x_low, x_high = min(all_steps), max(all_steps)
    y_low, y_high = min(all_losses), max(all_losses)
    if x_high == x_low:
        x_high = x_low + 1
    pad = (y_high - y_low) * 0.05 or 0.5
    y_low, y_high = y_low - pad, y_high + pad
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x_of(step: float) -> float:
        return LEFT + (step - x_low) / (x_high - x_low) * plot_w

    def y_of(loss: float) -> float:
        return TOP + (y_high - loss) / (y_high - y_low) * plot_h

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
           f'<text x="{LEFT + plot_w / 2}" y="28" text-anchor="middle" font-size="16">'
           f'{html.escape(title)}</text>']
    for tick in nice_ticks(x_low, x_high):
        x = x_of(tick)
        out.append(f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{TOP + plot_h}" stroke="#eee"/>')
        out.append(f'<text x="{x:.1f}" y="{TOP + plot_h + 18}" text-anchor="middle">{tick:g}</text>')
    for tick in nice_ticks(y_low, y_high):
        y = y_of(tick)
        out.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{LEFT + plot_w}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{LEFT - 8}" y="{y + 4:.1f}" text-anchor="end">{tick:g}</text>')
    out.append(f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#333"/>')
    out.append(f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 15}" text-anchor="middle">step</text>')
    out.append(f'<text x="18" y="{TOP + plot_h / 2}" text-anchor="middle" '
               f'transform="rotate(-90 18 {TOP + plot_h / 2})">cross-entropy (nats/byte)</text>')
    for index, run in enumerate(runs):
        color = COLORS[index % len(COLORS)]
        points = " ".join(f"{x_of(s):.1f},{y_of(v):.1f}" for s, v in zip(run["steps"], run["losses"]))
        out.append(f'<polyline class="train" fill="none" stroke="{color}" stroke-width="1.2" '
                   f'stroke-opacity="0.85" points="{points}"/>')
        for s, v in zip(run["val_steps"], run["val_losses"]):
            out.append(f'<circle class="val" cx="{x_of(s):.1f}" cy="{y_of(v):.1f}" r="4" fill="white" '
                       f'stroke="{color}" stroke-width="2"/>')
        y = TOP + 10 + index * 36
        out.append(f'<line x1="{LEFT + plot_w + 15}" y1="{y}" x2="{LEFT + plot_w + 40}" y2="{y}" '
                   f'stroke="{color}" stroke-width="2"/>')
        out.append(f'<text x="{LEFT + plot_w + 46}" y="{y + 4}">{html.escape(run["label"])}</text>')
        if run["val_losses"]:
            out.append(f'<text x="{LEFT + plot_w + 46}" y="{y + 19}" fill="#555">'
                       f'val {run["val_losses"][-1]:.4f} at step {run["val_steps"][-1]:g}</text>')
    out.append(f'<text x="{LEFT + plot_w + 15}" y="{TOP + plot_h}" fill="#555">'
               'line: train loss; o: validation</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Loss curves from training logs, as SVG.")
    parser.add_argument("--out", required=True, help="the SVG file to write")
    parser.add_argument("--title", default="samples/train: loss per step")
    parser.add_argument("logs", nargs="+", help="JSON-lines logs (train --log, train_torch.py --log)")
    args = parser.parse_args(argv)
    try:
        runs = [read_log(path) for path in args.logs]
    except LogError as error:
        print(f"plot_loss.py: {error}", file=sys.stderr)
        return 2
    svg = render(runs, args.title)
    try:
        with open(args.out, "w", encoding="utf-8") as out:
            out.write(svg)
    except OSError as error:
        print(f"plot_loss.py: cannot write {args.out}: {error.strerror}", file=sys.stderr)
        return 2
    print(f"plot_loss.py: wrote {args.out} ({len(runs)} run(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
