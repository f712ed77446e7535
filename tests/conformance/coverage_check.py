#!/usr/bin/env python3
"""halconform's self-check: every documented path of the API is exercised.

Reads certification records (halconform --report) and unites their coverage
reports over every device: a path passes when a test exercised it on some
device, or when it is waived (conformance/coverage_waivers.txt, with a
reason). Every other path (uncovered everywhere, or applicable to no device
of the set) fails the check, named with where the headers or SPEC.md define
it. A new function, enumerator or descriptor field is such a path until a
test exercises it.

Usage: coverage_check.py RECORD... [--only GLOB[,GLOB]] [--extra-path PATH]...
  --only        check only the paths matching a glob (the self-test's planted gaps)
  --extra-path  a path that must be covered as well (a planted enumerator no test knows)
"""
import argparse
import collections
import fnmatch
import json
import sys

RANK = {"covered": 3, "waived": 2, "uncovered": 1, "not_applicable": 0}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("records", nargs="+")
    parser.add_argument("--only")
    parser.add_argument("--extra-path", action="append", default=[])
    args = parser.parse_args()
    best = {}
    where = {}
    devices = 0
    unlisted = collections.Counter()
    for path in args.records:
        with open(path) as file:
            record = json.load(file)
        for device in record["devices"]:
            devices += 1
            label = f"{device['plugin']['name']}:{device['device']['index']}"
            for name in device["coverage"]["unlisted"]:
                unlisted[name] += 1
            for entry in device["coverage"]["paths"]:
                name = entry["path"]
                where.setdefault(name, entry["source"])
                current = best.get(name)
                if current is None or RANK[entry["status"]] > RANK[current[0]]:
                    best[name] = (entry["status"], label, entry["reason"])
    for name in args.extra_path:
        best.setdefault(name, ("uncovered", "planted", "a path no test knows"))
        where.setdefault(name, "planted by the self-test")
    globs = [g for g in (args.only or "").split(",") if g]
    names = sorted(n for n in best if not globs or any(fnmatch.fnmatch(n, g) for g in globs))
    counts = collections.Counter(best[n][0] for n in names)
    failing = [n for n in names if best[n][0] in ("uncovered", "not_applicable")]
    for name in failing:
        status, label, reason = best[name]
        why = "applies to no device of the set: " + reason if status == "not_applicable" else (
            "no test exercised it on any device")
        print(f"UNCOVERED {name} (defined in {where[name]}): {why}")
    for name in sorted(unlisted):
        print(f"UNLISTED  {name}: recorded by a coverage hook that has no row in the table")
    print(f"coverage: {len(names)} paths over {devices} devices: {counts['covered']} covered, "
          f"{counts['waived']} waived, {len(failing)} uncovered")
    if failing or unlisted:
        return 1
    print("every documented path is exercised or waived with a reason")
    return 0


if __name__ == "__main__":
    sys.exit(main())
