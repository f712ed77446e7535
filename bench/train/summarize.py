#!/usr/bin/env python3
"""The table of bench/train/compare.sh: one row per --log file of samples/train or
train_torch.py (tokens/s, ms/step, ratio to PyTorch, last loss, validation loss).

Tokens per second is the tokens of the timed steps over their total time (step 1 is left
out: it pays for first-touch page faults and kernel compiles). A mean of per-step rates would
weight fast steps up: it printed 0.64x PyTorch where the totals were 4,202 and 4,212 tokens/s.
"""
from __future__ import annotations

import json
import math
import sys
from typing import NamedTuple


class Row(NamedTuple):
    label: str
    tokens_per_s: float
    ms_per_step: float
    loss: float
    val_loss: float
    steps: int


def summarize(path: str) -> Row:
    with open(path) as log:
        records = [json.loads(line) for line in log if line.strip()]
    if not records:
        raise ValueError(f"{path}: no step recorded")
    timed = [r for r in records if r["step"] > 1]
    seconds = sum(r["step_ms"] for r in timed) / 1000.0
    # Each record has the step's rate and time; their product is its tokens.
    tokens = sum(r["tokens_per_s"] * r["step_ms"] / 1000.0 for r in timed)
    vals = [r for r in records if r.get("val_loss") is not None]
    return Row(records[0]["label"], tokens / seconds if seconds > 0 else math.nan,
               1000.0 * seconds / len(timed) if timed else math.nan, records[-1]["loss"],
               vals[-1]["val_loss"] if vals else math.nan, records[-1]["step"])


def table(rows: list[Row]) -> list[str]:
    torch = next((r for r in rows if r.label.startswith("PyTorch")), None)
    lines = [f"{'run':<22} {'tokens/s':>10} {'ms/step':>9} {'vs PyTorch':>11} "
             f"{'last loss':>10} {'val loss':>9} {'steps':>6}"]
    for r in rows:
        ratio = f"{r.tokens_per_s / torch.tokens_per_s:.2f}x" if torch else "-"
        lines.append(f"{r.label:<22} {r.tokens_per_s:>10.0f} {r.ms_per_step:>9.1f} {ratio:>11} "
                     f"{r.loss:>10.4f} {r.val_loss:>9.4f} {r.steps:>6}")
    one = next((r for r in rows if r.label.endswith("1 device")), None)
    for r in rows:
        if one and r is not one and r.label.startswith("HAL"):
            lines.append(f"scaling {r.label}: {r.tokens_per_s / one.tokens_per_s:.2f}x the "
                         "1-device tokens/s")
    return lines


if __name__ == "__main__":
    print("\n".join(table([summarize(path) for path in sys.argv[1:]])))
