"""samples/train's progress line: drawn on stderr when stderr is a terminal (steps, tokens per
second, time left), redrawn in place and erased before other output; absent when stderr is a
pipe or a file. The train binary comes from HAL_TRAIN_BINARY (CTest sets it)."""
import os
import pty
import re
import select
import subprocess

import pytest

TRAIN = os.environ.get("HAL_TRAIN_BINARY", "")
SMALL = ["--layers", "1", "--width", "16", "--heads", "2", "--context", "16", "--batch", "2",
         "--steps", "40", "--warmup", "2", "--eval-every", "0", "--devices", "1"]
ENV = dict(os.environ, HAL_PLUGINS="cpu", HAL_CPU_DEVICES="1")
PROGRESS = re.compile(r"step (\d+)/40  (\d+|-) tok/s  ETA (\d+:\d\d|-)")

pytestmark = pytest.mark.skipif(not os.path.exists(TRAIN), reason="HAL_TRAIN_BINARY not built")


def run_with_terminal_stderr(arguments):
    """Runs train with stderr on a pseudo-terminal; returns (stdout, what the terminal got)."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen([TRAIN, *arguments], stdout=subprocess.PIPE, stderr=terminal,
                               env=ENV)
    os.close(terminal)
    screen = b""
    while True:
        ready, _, _ = select.select([controller], [], [], 120)
        if not ready:
            process.kill()
            pytest.fail("train printed nothing on its terminal for 120 s")
        try:
            chunk = os.read(controller, 4096)
        except OSError:  # EIO: the terminal's last writer has gone
            break
        if not chunk:
            break
        screen += chunk
    os.close(controller)
    stdout = process.stdout.read().decode()
    assert process.wait(timeout=60) == 0, stdout
    return stdout, screen.decode()


def test_progress_on_a_terminal():
    stdout, screen = run_with_terminal_stderr([*SMALL, "--quiet"])
    drawn = PROGRESS.findall(screen)
    assert drawn, screen
    steps = [int(step) for step, _, _ in drawn]
    assert steps == sorted(steps) and steps[-1] == 40  # the last step is always drawn
    assert any(rate != "-" and eta != "-" for _, rate, eta in drawn[1:]), drawn
    # Each redraw returns to the line's start and erases it; the last one is erased too.
    assert screen.count("\r\033[K") >= len(drawn) + 1
    assert screen.endswith("\r\033[K")
    assert "done: 40 steps" in stdout and "ETA" not in stdout


def test_no_progress_when_stderr_is_not_a_terminal():
    result = subprocess.run([TRAIN, *SMALL, "--quiet"], capture_output=True, text=True, env=ENV,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert "ETA" not in result.stderr and "\033[K" not in result.stderr
    assert "ETA" not in result.stdout
