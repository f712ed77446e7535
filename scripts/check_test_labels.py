#!/usr/bin/env python3
"""Fails when a test of a build tree does not carry exactly one tier label.

scripts/check_test_labels.py BUILD_DIR

The tiers are cmake/HalTesting.cmake's HAL_TEST_TIERS; scripts/test.sh chooses per build tree
which of them run, so a test with no tier would silently run nowhere (or everywhere)."""
import json
import re
import subprocess
import sys
from pathlib import Path


def tiers(root: Path) -> list[str]:
    text = (root / "cmake" / "HalTesting.cmake").read_text()
    match = re.search(r"set\(HAL_TEST_TIERS ([^)]*)\)", text)
    if not match:
        sys.exit("check_test_labels: HAL_TEST_TIERS not found in cmake/HalTesting.cmake")
    return match.group(1).split()


def main() -> int:
    if len(sys.argv) != 2:
        sys.exit("usage: check_test_labels.py BUILD_DIR")
    build = Path(sys.argv[1])
    root = Path(__file__).resolve().parent.parent
    known = set(tiers(root))
    listing = subprocess.run(["ctest", "--show-only=json-v1"], cwd=build, check=True,
                             capture_output=True, text=True).stdout
    problems = []
    count = 0
    for test in json.loads(listing)["tests"]:
        # Catch2's stand-in for a suite whose binary this tree did not build (a tree that builds
        # only some tiers' targets); ctest fails it wherever a run selects it.
        if "_NOT_BUILT" in test["name"]:
            continue
        count += 1
        labels = []
        for prop in test.get("properties", []):
            if prop["name"] == "LABELS":
                labels = prop["value"] if isinstance(prop["value"], list) else [prop["value"]]
        tier_labels = [label for label in labels if label in known]
        unknown = [label for label in labels if label not in known]
        if len(tier_labels) != 1 or unknown:
            problems.append(f"  {test['name']}: labels {labels or 'none'}")
    if problems:
        print(f"check_test_labels: {len(problems)} of {count} tests of {build} do not carry "
              f"exactly one tier label of {sorted(known)} (cmake/HalTesting.cmake):",
              file=sys.stderr)
        print("\n".join(problems[:40]), file=sys.stderr)
        if len(problems) > 40:
            print(f"  ... and {len(problems) - 40} more", file=sys.stderr)
        return 1
    print(f"check_test_labels: each of the {count} tests of {build.name} has one tier label")
    return 0


if __name__ == "__main__":
    sys.exit(main())
