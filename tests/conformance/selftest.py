#!/usr/bin/env python3
"""halconform's self-test: run it over each deliberately broken plugin and
check that the certification fails with the right test named. Prints
"caught N/M planted faults"; exits non-zero unless every fault is caught."""
import argparse
import json
import os
import subprocess
import sys

# (fault, profile, filter, the test that must fail, a word its message must hold, timeout s)
PLANTED = [
    ("copy_short", "core", "core.memory.*", "core.memory.copy_directions", "", 60),
    ("event_early", "core", "core.events.*", "core.events.synchronize", "", 60),
    ("stream_reorder", "core", "core.streams.*", "core.streams.in_order", "out of order", 60),
    ("launch_skips_last_block", "core", "core.kernels.*", "core.kernels.grid_coverage", "", 60),
    ("alignment_ignored", "core", "core.memory.*", "core.memory.alignment", "", 60),
    ("leak", "stress", "stress.memory.*", "stress.memory.churn", "not coming back", 60),
    ("crash", "core", "core.events.*", "core.events.timing", "crashed", 60),
    ("hang", "core", "core.streams.synchronize", "core.streams.synchronize", "timed out", 3),
    ("destroy_result", "core", "core.errors.*", "core.errors.destroyed_handles", "", 60),
    ("memory_overstated", "core", "core.memory.*", "core.memory.total_declared", "declared", 60),
]


def run(args, fault, profile, glob, timeout):
    report = os.path.join(args.work, f"{fault}.json")
    if os.path.exists(report):
        os.remove(report)
    plugin = os.path.join(args.faults, f"hal_plugin_fault_{fault}.so")
    command = [args.halconform, "--plugin", plugin, "--device", "0", "--profile", profile,
               "--filter", glob, "--timeout", str(timeout * args.timeout_scale), "--duration", "1",
               "--report", report]
    completed = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    record = None
    if os.path.exists(report):
        with open(report) as file:
            whole = json.load(file)
        # One device was asked for (--device 0): the record holds it alone.
        devices = whole.get("devices", [])
        record = devices[0] if len(devices) == 1 else None
        if record is not None:
            validate(args, whole)
    return completed, record


def validate(args, record):
    try:
        import jsonschema
    except ImportError:
        return True  # conformance.schema reports the missing module
    with open(args.schema) as file:
        jsonschema.validate(record, json.load(file))
    return True


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--halconform", required=True)
    parser.add_argument("--faults", required=True)
    parser.add_argument("--schema", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--timeout-scale", type=int, default=1)
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)

    caught = 0
    for fault, profile, glob, expected, word, timeout in PLANTED:
        completed, record = run(args, fault, profile, glob, timeout)
        tests = {t["name"]: t for t in (record or {}).get("tests", [])}
        test = tests.get(expected)
        ok = (completed.returncode == 1 and record is not None and record["verdict"] == "fail"
              and test is not None and test["status"] == "fail" and word in test["message"])
        if ok:
            caught += 1
            print(f"CAUGHT  {fault:24} by {expected}: {test['message'][:150]}")
        else:
            print(f"MISSED  {fault:24} expected {expected} to fail (exit {completed.returncode}, "
                  f"status {test['status'] if test else 'absent'})")
            print(completed.stdout[-3000:])

    # Known-failure data must stay honest: an entry for a passing test is XPASS.
    completed, record = run(args, "none", "core", "core.memory.fill,core.memory.zero_size", 60)
    statuses = {t["name"]: t["status"] for t in (record or {}).get("tests", [])}
    xpass_ok = (completed.returncode == 1 and statuses.get("core.memory.fill") == "xpass"
                and statuses.get("core.memory.zero_size") == "pass")
    print(("CAUGHT  " if xpass_ok else "MISSED  ") + "stale known-failure entry reported as XPASS")

    print(f"caught {caught}/{len(PLANTED)} planted faults")
    return 0 if caught == len(PLANTED) and xpass_ok else 1


if __name__ == "__main__":
    sys.exit(main())
