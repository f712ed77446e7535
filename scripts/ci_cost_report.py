#!/usr/bin/env python3
"""Where a test run's time went: the slowest build steps (.ninja_log) and the slowest tests
(CTest's Testing/Temporary/CTestCostData.txt) of each build tree given.

scripts/ci_cost_report.py BUILD_DIR... [--top N] [--costs DIR]

--costs DIR writes DIR/<tree>.txt: the tests of over a second with their times, in CTest's cost
format. scripts/test.sh seeds a fresh tree's cost data from tests/ctest_costs/ with them, so that
a cold run starts its longest tests first."""
import argparse
import math
from pathlib import Path


def build_steps(tree: Path):
    """(seconds, output) of the last build of every output, from .ninja_log (v5)."""
    log = tree / ".ninja_log"
    if not log.exists():
        return []
    last: dict[str, float] = {}
    for line in log.read_text().splitlines()[1:]:
        fields = line.split("\t")
        if len(fields) >= 4:
            last[fields[3]] = (int(fields[1]) - int(fields[0])) / 1000.0
    return sorted(((seconds, output) for output, seconds in last.items()), reverse=True)


def test_times(tree: Path):
    """(seconds, name) of every test's last run, from CTestCostData.txt: of the tests the run
    selected (tests_run.txt, scripts/select_tests.py), where it says, since a fresh tree's cost
    data is seeded from tests/ctest_costs/ with tests its selection may leave out."""
    data = tree / "Testing" / "Temporary" / "CTestCostData.txt"
    if not data.exists():
        return []
    run_list = tree / "tests_run.txt"
    selected = set(run_list.read_text().splitlines()) if run_list.exists() else None
    result = []
    for line in data.read_text().splitlines():
        if line.startswith("---"):
            break
        # "<name with spaces> <runs> <average seconds>"
        name, _, seconds = line.rpartition(" ")
        name, _, runs = name.rpartition(" ")
        try:
            value = float(seconds)
        except ValueError:
            continue
        # Entries of tests that never ran here (0 runs, an infinite cost) are CTest's guesses.
        if runs != "0" and math.isfinite(value) and (selected is None or name in selected):
            result.append((value, name))
    return sorted(result, reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("trees", nargs="+", type=Path)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--costs", type=Path)
    args = parser.parse_args()
    if args.costs:
        for tree in args.trees:
            lines = [f"{name} 1 {seconds:.1f}\n" for seconds, name in test_times(tree) if seconds >= 1.0]
            (args.costs / f"{tree.name}.txt").write_text("".join(lines))
            print(f"{args.costs / tree.name}.txt: {len(lines)} tests")
        return
    for tree in args.trees:
        steps = build_steps(tree)
        tests = test_times(tree)
        if not steps and not tests:
            continue
        print(f"-- {tree.name}: {len(steps)} build steps, {sum(s for s, _ in steps):.0f} s of "
              f"compiler time; {len(tests)} tests, {sum(s for s, _ in tests):.0f} s of test time")
        for seconds, output in steps[: args.top]:
            print(f"   build {seconds:7.1f} s  {output}")
        for seconds, name in tests[: args.top]:
            print(f"   test  {seconds:7.1f} s  {name[:110]}")


if __name__ == "__main__":
    main()
