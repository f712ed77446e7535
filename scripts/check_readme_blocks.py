#!/usr/bin/env python3
"""Runs the code blocks of HAL's READMEs, so a quick start cannot rot.

    scripts/check_readme_blocks.py --build BUILD_DIR [README.md ...]

Without files it checks README.md, bindings/*/README.md, samples/*/README.md and
plugins/*/README.md. Every fenced block is one of:

- a ``python`` block: run with this interpreter, the build's package first on the path
  (``BUILD/python``, as ``pip install`` would provide ``import hal``);
- an ``sh`` or ``bash`` block: run with ``bash -euo pipefail``;
- a block the line before marks ``<!-- not run: REASON -->`` (an output example, a command
  that needs what CI lacks, one that CI runs elsewhere), with a reason that says which.

A block of any other language, or without one, must be marked. The blocks of one README run
in order in one scratch directory, as a reader would type them: it holds links to the
repository's top-level entries and ``_build-rel`` links to BUILD_DIR, so ``scripts/...``,
``samples/...`` and ``./_build-rel/bin/...`` resolve, and what the blocks write lands there.
A block fails on a non-zero exit status; the report names the README, its line, and the
block's output. Exit status: 0 when every block ran or is marked, 1 otherwise, 2 for usage.
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_READMES = ["README.md", "bindings/*/README.md", "samples/*/README.md",
                   "plugins/*/README.md"]
RUNNERS = {"python": "python", "py": "python", "sh": "sh", "bash": "sh", "shell": "sh"}
MARK = re.compile(r"^\s*<!--\s*not run:\s*(?P<reason>.*?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+|~~~+)\s*(?P<info>[^`\s]*)?.*$")
# The build tree's name in the READMEs' commands.
BUILD_NAME = "_build-rel"


@dataclass
class Block:
    readme: str
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    skip_reason: str | None  # None: run it; "": marked without a reason (an error)


def blocks_of(path: str) -> list[Block]:
    """The fenced blocks of a Markdown file, with the mark of the line before each."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        language = (opening["info"] or "").lower()
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            closing = FENCE.match(lines[j])
            if closing and closing["fence"].startswith(fence[0]) and \
                    len(closing["fence"]) >= len(fence) and not closing["info"]:
                break
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
            j += 1
        if j == len(lines):
            raise ValueError(f"{path}:{i + 1}: the code block is never closed")
        previous = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        mark = MARK.match(previous)
        reason = mark["reason"] if mark else None
        found.append(Block(path, i + 1, language, "\n".join(body) + "\n", reason))
        i = j + 1
    return found


def scratch_directory(build: str) -> str:
    """A directory that looks like the repository root to the blocks (see the module doc)."""
    scratch = tempfile.mkdtemp(prefix="hal-readme-")
    for entry in os.listdir(ROOT):
        if entry.startswith(".") or entry.startswith("_build") or entry == "build":
            continue
        os.symlink(os.path.join(ROOT, entry), os.path.join(scratch, entry))
    os.symlink(os.path.abspath(build), os.path.join(scratch, BUILD_NAME))
    return scratch


def run_block(block: Block, cwd: str, build: str, timeout: float) -> tuple[bool, str, float]:
    env = dict(os.environ)
    python_dir = os.path.join(os.path.abspath(build), "python")
    env["PYTHONPATH"] = python_dir + (os.pathsep + env["PYTHONPATH"]
                                      if env.get("PYTHONPATH") else "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if RUNNERS[block.language] == "python":
        # From a file, as a reader's script would run: inspect (which @hal.kernel uses) needs
        # the source of what it translates.
        script = os.path.join(cwd, f"readme_block_{block.line}.py")
        with open(script, "w", encoding="utf-8") as f:
            f.write(block.code)
        command = [sys.executable, script]
    else:
        command = ["bash", "-euo", "pipefail", "-c", block.code]
    start = time.monotonic()
    try:
        result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                                timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as expired:
        output = (expired.stdout or "") + (expired.stderr or "")
        if isinstance(output, bytes):
            output = output.decode(errors="replace")
        return False, f"timed out after {timeout:.0f} s\n{output}", time.monotonic() - start
    output = result.stdout + result.stderr
    if result.returncode != 0:
        return False, f"exit status {result.returncode}\n{output}", time.monotonic() - start
    return True, output, time.monotonic() - start


def check(readmes: list[str], build: str, timeout: float, verbose: bool) -> int:
    problems: list[str] = []
    ran = marked = 0
    for readme in readmes:
        relative = os.path.relpath(readme, ROOT) if readme.startswith(ROOT) else readme
        try:
            blocks = blocks_of(readme)
        except ValueError as error:
            problems.append(str(error))
            continue
        scratch = None
        try:
            for block in blocks:
                where = f"{relative}:{block.line}"
                if block.skip_reason is not None:
                    if not block.skip_reason:
                        problems.append(f"{where}: '<!-- not run: -->' needs a reason")
                    else:
                        marked += 1
                        if verbose:
                            print(f"{where}: not run ({block.skip_reason})")
                    continue
                if block.language not in RUNNERS:
                    what = f"a '{block.language}' block" if block.language else \
                        "a block without a language"
                    problems.append(f"{where}: {what} cannot run: mark it "
                                    "'<!-- not run: REASON -->' on the line before, or give "
                                    "it a language this check runs (python, sh, bash)")
                    continue
                if scratch is None:
                    scratch = scratch_directory(build)
                ok, output, seconds = run_block(block, scratch, build, timeout)
                ran += 1
                if ok:
                    if verbose:
                        print(f"{where}: ran ({block.language}, {seconds:.1f} s)")
                else:
                    tail = "\n".join("    " + line for line in output.rstrip().split("\n")[-40:])
                    problems.append(f"{where}: the {block.language} block failed: {tail.strip()}"
                                    if "\n" not in tail.strip() else
                                    f"{where}: the {block.language} block failed:\n{tail}")
        finally:
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
    for problem in problems:
        print(f"FAILED {problem}", file=sys.stderr)
    print(f"readme blocks: {ran} ran, {marked} marked not run, {len(problems)} problem(s) in "
          f"{len(readmes)} README(s)")
    return 1 if problems else 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", required=True, help="a build tree of HAL (its bin/, python/)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per block")
    parser.add_argument("--verbose", action="store_true", help="a line per block")
    parser.add_argument("readmes", nargs="*", help="README files (default: HAL's)")
    args = parser.parse_args(argv)
    if not os.path.isdir(args.build):
        parser.error(f"--build {args.build}: not a directory")
    readmes = args.readmes or sorted(
        path for pattern in DEFAULT_READMES for path in glob.glob(os.path.join(ROOT, pattern)))
    return check(readmes, args.build, args.timeout, args.verbose)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
