#!/usr/bin/env python3
"""Runs the failed tests of a ctest run again, once, when tests/known_flaky.txt names them.

scripts/rerun_known_flaky.py BUILD_DIR KNOWN_FLAKY_FILE

Reads BUILD_DIR/Testing/Temporary/LastTestsFailed.log and LastTest.log. A failed test is run again
only when an entry of the file matches both its name and its output; it then must pass. Exits 0
when every failure was such a one and passed again, 1 otherwise (naming each failure that was
not known, and why)."""
import re
import subprocess
import sys
from pathlib import Path


def entries(path: Path):
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = [part.strip() for part in line.split(" | ", 2)]
        if len(parts) != 3 or not parts[2]:
            sys.exit(f"{path}:{number}: want '<name regex> | <output regex> | <reason>'")
        yield re.compile(parts[0]), re.compile(parts[1]), parts[2]


def outputs(log: Path) -> dict[str, str]:
    """The output of each test in ctest's LastTest.log, by name."""
    result: dict[str, str] = {}
    name = None
    lines: list[str] = []
    for line in log.read_text(errors="replace").splitlines():
        start = re.match(r"^\d+/\d+ Test: (.*)$", line)
        if start:
            name, lines = start.group(1), []
            continue
        end = re.match(r'^"(.*)" end time:', line)
        if end and name is not None:
            result[name] = "\n".join(lines)
            name = None
            continue
        if name is not None:
            lines.append(line)
    return result


def main() -> int:
    if len(sys.argv) != 3:
        sys.exit("usage: rerun_known_flaky.py BUILD_DIR KNOWN_FLAKY_FILE")
    build, known_file = Path(sys.argv[1]), Path(sys.argv[2])
    temporary = build / "Testing" / "Temporary"
    failed_log = temporary / "LastTestsFailed.log"
    if not failed_log.exists():
        print("rerun_known_flaky: no list of failed tests; nothing is known to rerun")
        return 1
    failed = [line.split(":", 1)[1] for line in failed_log.read_text().splitlines() if ":" in line]
    known = list(entries(known_file))
    output = outputs(temporary / "LastTest.log")
    verdict = 0
    for name in failed:
        text = output.get(name, "")
        reason = next((why for name_re, out_re, why in known
                       if name_re.search(name) and out_re.search(text)), None)
        if reason is None:
            print(f"rerun_known_flaky: {name}: failed, and no entry of {known_file.name} "
                  "matches it: a real failure")
            verdict = 1
            continue
        print(f"rerun_known_flaky: {name}: known flaky ({reason[:100]}...); running it again")
        again = subprocess.run(["ctest", "--output-on-failure", "-R", "^" + re.escape(name) + "$"],
                               cwd=build)
        if again.returncode != 0:
            print(f"rerun_known_flaky: {name}: failed again")
            verdict = 1
    return verdict


if __name__ == "__main__":
    sys.exit(main())
