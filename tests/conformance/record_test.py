#!/usr/bin/env python3
"""The certification record CI reads: one file, every device, reproducible.

Runs halconform twice with the same arguments and checks that
  - each run writes exactly the files it was told to (--report, --junit,
    --html), one each, whatever the number of devices;
  - the record is valid (schema and validate_report.py's cross-checks) and
    holds the expected devices;
  - the two records are identical once the fields that are times or
    measurements are removed (started_utc, duration_s, metric values): the
    declared figures, names and fingerprints must not move between runs.

Usage: record_test.py --halconform BIN --schema SCHEMA --work DIR
           [--devices N] [--plugins a,b] -- HALCONFORM_ARGS...
"""
import argparse
import difflib
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import validate_report  # noqa: E402  (same folder)

# Fields that are times or measured values, removed before the comparison.
TIMES = {"started_utc", "duration_s"}


def stable(record):
    """The record without its times and measured values."""
    if isinstance(record, dict):
        out = {k: stable(v) for k, v in record.items() if k not in TIMES}
        if {"name", "value", "unit", "declared"} <= record.keys():  # a metric
            out.pop("value", None)
        return out
    if isinstance(record, list):
        return [stable(item) for item in record]
    return record


def run_once(args, work, passthrough):
    if os.path.exists(work):
        shutil.rmtree(work)
    os.makedirs(work)
    outputs = {"record.json", "record.xml", "record.html"}
    # Relative names, run in |work|: the recorded command is the same both times.
    command = [args.halconform, *passthrough, "--report", "record.json", "--junit", "record.xml",
               "--html", "record.html"]
    completed = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, cwd=work)
    problems = []
    if completed.returncode not in (0, 1):
        problems.append(f"exit status {completed.returncode}")
    written = set(os.listdir(work))
    if written != outputs:
        problems.append(f"wrote {sorted(written)}, expected exactly {sorted(outputs)}")
    record = None
    if "record.json" in written:
        with open(os.path.join(work, "record.json")) as file:
            record = json.load(file)
    return completed, record, problems


def check_present(record, present):
    """Every plugin in |present| has devices in the record or is listed
    without devices, with the load report's reason (which says "0 devices")."""
    problems = []
    with_devices = {d["plugin"]["name"] for d in record["devices"]}
    without = {p["name"]: p for p in record.get("plugins_without_devices", [])}
    for name in filter(None, present.split(",")):
        if name in with_devices:
            continue
        if name not in without:
            problems.append(f"plugin {name} is neither certified nor listed without devices")
        elif not without[name]["reason"].endswith("0 devices"):
            problems.append(f"plugin {name} is listed without devices but its reason "
                            f"{without[name]['reason']!r} does not say so")
    return problems


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--halconform", required=True)
    parser.add_argument("--schema", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--devices", type=int)
    parser.add_argument("--plugins")
    parser.add_argument("--present", default="",
                        help="plugins built here that must each be in the record: certified "
                             "devices, or listed with 0 devices and their reason")
    parser.add_argument("passthrough", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    passthrough = [a for a in args.passthrough if a != "--"]
    args.halconform = os.path.abspath(args.halconform)  # each run's cwd is its work folder

    import jsonschema
    with open(args.schema) as file:
        schema = json.load(file)
    problems = []
    records = []
    for run in ("first", "second"):
        completed, record, run_problems = run_once(args, os.path.join(args.work, run), passthrough)
        problems += [f"{run} run: {p}" for p in run_problems]
        if record is None:
            print(completed.stdout[-4000:])
            continue
        try:
            jsonschema.Draft202012Validator(schema).validate(record)
        except jsonschema.ValidationError as error:
            problems.append(f"{run} run: not valid against the schema: {error.message}")
        problems += [f"{run} run: {p}" for p in validate_report.check(record, args)]
        problems += [f"{run} run: {p}" for p in check_present(record, args.present)]
        records.append(record)
    if len(records) == 2:
        first, second = (json.dumps(stable(r), indent=1, sort_keys=True).splitlines()
                         for r in records)
        if first != second:
            problems.append("the records differ beyond times and measured values:\n" +
                            "\n".join(difflib.unified_diff(first, second, "first", "second",
                                                           lineterm="", n=2)))
        devices = ", ".join(f"{d['plugin']['name']}:{d['device']['index']}"
                            for d in records[0]["devices"])
        print(f"one record of {len(records[0]['devices'])} devices ({devices}), twice")
    for problem in problems:
        print("FAIL:", problem)
    if not problems:
        print("records valid and identical across runs (times and measured values aside)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
