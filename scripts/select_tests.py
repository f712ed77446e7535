#!/usr/bin/env python3
"""Writes a ctest -I file: the tests of a build tree that run there, each test run once per CI.

scripts/select_tests.py TREE OUT --skip-tiers REGEX [--once REGEX --ran-in TREE...]
scripts/select_tests.py --write-run-list TREE CTEST_OPTIONS...

A test of TREE is selected when its tier label does not match --skip-tiers. With --once, a test
whose tier matches REGEX is selected only when none of the --ran-in trees has a test of the same
name: it ran there already. scripts/test.sh uses it so that Release does not repeat the unit,
contract and concurrency tests the ASan tree ran, yet still runs the ones only Release builds
(the Python and PyTorch bindings, the coverage report and its certification runs, the cases only
an unsanitized allocator can check). Prints how many tests were selected and skipped.

What a --ran-in tree ran is the list --write-run-list wrote there (the names its ctest options
selected: a test its labels or excludes left out runs here), or else every test it has.

ctest numbers a tree's tests in the order of its --show-only=json-v1 listing, from 1; -I with
"0,0,0,<n>,<n>..." runs exactly those numbers."""
import argparse
import json
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path


def listing(tree: Path, selection: Sequence[str] = ()) -> list[tuple[str, str, list[str], bool]]:
    """(name, tier label, command, whether it requires a fixture) of each test of the tree (of
    those |selection|, ctest's options, picks), in ctest's numbering order."""
    text = subprocess.run(["ctest", "--show-only=json-v1", *selection], cwd=tree, check=True,
                          capture_output=True, text=True).stdout
    tests = []
    for test in json.loads(text)["tests"]:
        label = ""
        needs_fixture = False
        for prop in test.get("properties", []):
            if prop["name"] == "LABELS":
                value = prop["value"]
                label = value[0] if isinstance(value, list) else value
            elif prop["name"] == "FIXTURES_REQUIRED":
                needs_fixture = True
        # ctest leaves the command out when it cannot find the test's program (yet: ctest looks
        # again when the test starts).
        command = test.get("command") or []
        tests.append((test["name"], label, command, needs_fixture))
    return tests


def missing_programs(tree: Path, command: list[str]) -> list[str]:
    """What |command| runs from |tree| that the tree did not build: its program, or a program or
    library under the tree's bin/ or lib/ it passes on (mpiexec's worker, a plugin to certify).
    Other paths in the tree may be outputs the test writes."""
    if not command:
        return ["its program is not in the tree"]
    root = str(tree.resolve())
    built = (f"{root}/bin/", f"{root}/lib/")
    wanted = [command[0]] if command[0].startswith(root) else []
    wanted += [arg for arg in command[1:] if arg.startswith(built)]
    return [path for path in wanted if not Path(path).exists()]


# The names of the tests a tree ran (scripts/select_tests.py --write-run-list).
RUN_LIST = "tests_run.txt"


def write_run_list(tree: Path, selection: list[str]) -> int:
    names = [name for name, _, _, _ in listing(tree, selection)]
    (tree / RUN_LIST).write_text("".join(f"{name}\n" for name in names))
    return 0


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--write-run-list":
        # --write-run-list TREE CTEST_OPTIONS...: the names of the tests those options select.
        return write_run_list(Path(sys.argv[2]), sys.argv[3:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--skip-tiers", required=True, help="regex of the tiers not run")
    parser.add_argument("--once", help="regex of the tiers whose tests run only where no --ran-in "
                        "tree has them")
    parser.add_argument("--ran-in", type=Path, nargs="*", default=[])
    args = parser.parse_args()
    skip = re.compile(args.skip_tiers)
    once = re.compile(args.once) if args.once else None
    ran: set[str] = set()
    for tree in args.ran_in:
        # What the tree ran: scripts/test.sh writes the names it selected there (labels and
        # excludes: a test excluded there must run here); else every test it has.
        run = tree / RUN_LIST
        if run.exists():
            ran.update(line for line in run.read_text().splitlines() if line)
        else:
            ran.update(name for name, _, _, _ in listing(tree))
    numbers = []
    repeated = 0
    tests = listing(args.tree)
    not_built = 0
    unbuilt = []
    for number, (name, tier, command, needs_fixture) in enumerate(tests, 1):
        # Catch2's stand-in for a suite this tree did not build (HAL_TESTS_IN_ALL=OFF): none of
        # its tests is one this tree runs (cmake/HalTesting.cmake, hal_unsanitized_targets).
        if "_NOT_BUILT" in name:
            not_built += 1
            continue
        if skip.fullmatch(tier):
            continue
        if once and once.fullmatch(tier) and name in ran:
            repeated += 1
            continue
        numbers.append(number)
        # A selected test whose program this tree did not build (HAL_TESTS_IN_ALL=OFF builds
        # only the tier targets): its registration lacks TARGETS, or scripts/test.sh left it to
        # a tree that does not build what it runs.
        missing = missing_programs(args.tree, command)
        # A program a fixture's setup test makes (hal_torch's suites run the Python of the
        # environment torch.wheel creates) is there when the test starts.
        if missing and not (needs_fixture and not command):
            unbuilt.append(f"  {name}: {', '.join(missing)}")
    if unbuilt:
        print(f"select_tests: {len(unbuilt)} selected tests run a program {args.tree.name} did not "
              "build; name it in their registration's TARGETS (cmake/HalTesting.cmake), or leave "
              "them to a tree that builds it (scripts/test.sh):\n"
              + "\n".join(unbuilt), file=sys.stderr)
        return 1
    if not numbers:
        print(f"select_tests: no test of {args.tree} selected", file=sys.stderr)
        return 1
    args.out.write_text("0,0,0," + ",".join(map(str, numbers)) + "\n")
    print(f"select_tests: {len(numbers)} of {len(tests)} tests of {args.tree.name}"
          + (f"; {repeated} tests of the tiers {args.once} already ran in "
             + ", ".join(tree.name for tree in args.ran_in) if args.once else "")
          + (f"; {not_built} suites not built here" if not_built else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
