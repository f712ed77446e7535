"""samples/train/plot_loss.py: an SVG with one curve per run, and clear errors."""
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "samples", "train", "plot_loss.py")
SVG = "{http://www.w3.org/2000/svg}"


def write_log(path, label, losses, val_every=2):
    with open(path, "w") as out:
        for step, loss in enumerate(losses, start=1):
            val = loss + 0.1 if step % val_every == 0 else None
            out.write(json.dumps({"step": step, "loss": loss, "val_loss": val, "label": label}) + "\n")


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


def test_one_curve_per_run_with_labels_and_markers(tmp_path):
    write_log(tmp_path / "a.jsonl", "HAL cpu, 1 device", [5.5, 4.0, 3.2, 2.9])
    write_log(tmp_path / "b.jsonl", "PyTorch <cpu>", [5.5, 4.1, 3.1, 2.8])
    out = tmp_path / "loss.svg"
    result = run("--out", str(out), str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"))
    assert result.returncode == 0, result.stderr
    root = ET.parse(out).getroot()
    lines = root.findall(f"{SVG}polyline")
    assert len(lines) == 2
    assert all(len(line.get("points").split()) == 4 for line in lines)
    assert len(root.findall(f"{SVG}circle")) == 4  # validation at steps 2 and 4 of each run
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "HAL cpu, 1 device" in texts and "PyTorch <cpu>" in texts  # escaped, still readable


def test_lower_loss_is_drawn_lower(tmp_path):
    write_log(tmp_path / "a.jsonl", "run", [5.0, 1.0])
    out = tmp_path / "loss.svg"
    assert run("--out", str(out), str(tmp_path / "a.jsonl")).returncode == 0
    points = ET.parse(out).getroot().find(f"{SVG}polyline").get("points").split()
    (x0, y0), (x1, y1) = (tuple(map(float, p.split(","))) for p in points)
    assert x1 > x0 and y1 > y0  # SVG y grows downwards


def test_malformed_and_missing_logs_exit_2_naming_the_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"step": 1, "loss": 5.0}\n{"step": 2, "loss": "high"}\n')
    result = run("--out", str(tmp_path / "x.svg"), str(bad))
    assert result.returncode == 2
    assert "bad.jsonl:2" in result.stderr
    result = run("--out", str(tmp_path / "x.svg"), str(tmp_path / "missing.jsonl"))
    assert result.returncode == 2 and "cannot open" in result.stderr
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    result = run("--out", str(tmp_path / "x.svg"), str(empty))
    assert result.returncode == 2 and "holds no step" in result.stderr
    assert not (tmp_path / "x.svg").exists()
