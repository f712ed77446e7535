"""bench/train/summarize.py (compare.sh's table): tokens per second is total tokens over total
time, not the mean of the per-step rates."""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "train"))
import summarize  # noqa: E402


def write_log(path, label, steps):
    with open(path, "w") as log:
        for step, (ms, tokens) in enumerate(steps, start=1):
            log.write(json.dumps({"step": step, "loss": 5.0 - step, "val_loss": None,
                                  "step_ms": ms, "tokens_per_s": tokens / (ms / 1000.0),
                                  "label": label}) + "\n")


def test_rate_is_total_tokens_over_total_time(tmp_path):
    # Step 1 is left out; steps 2 and 3 train 100 tokens each in 10 ms and 90 ms: 200 tokens in
    # 0.1 s are 2000 tokens/s (the mean of the two rates, 10000 and 1111, would be 5556).
    path = tmp_path / "hal.jsonl"
    write_log(path, "HAL cpu, 1 device", [(500.0, 100), (10.0, 100), (90.0, 100)])
    row = summarize.summarize(str(path))
    assert row.tokens_per_s == pytest.approx(2000.0)
    assert row.ms_per_step == pytest.approx(50.0)
    assert row.steps == 3 and row.loss == 2.0


def test_ratio_to_pytorch_uses_the_totals(tmp_path):
    hal, torch = tmp_path / "hal.jsonl", tmp_path / "torch.jsonl"
    # The same 300 tokens in the same 0.3 s, with other per-step spreads: the ratio is 1.00x.
    write_log(hal, "HAL cpu, 1 device", [(1.0, 100), (20.0, 100), (280.0, 200)])
    write_log(torch, "PyTorch cpu", [(1.0, 100), (150.0, 150), (150.0, 150)])
    lines = summarize.table([summarize.summarize(str(hal)), summarize.summarize(str(torch))])
    assert "1000" in lines[1] and "1.00x" in lines[1] and "1.00x" in lines[2]


def test_an_empty_log_is_an_error(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    with pytest.raises(ValueError, match="no step"):
        summarize.summarize(str(path))
