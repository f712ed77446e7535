#!/usr/bin/env python3
"""Validates halconform certification records against the JSON Schema, and
what a schema cannot say: the run's verdict is the conjunction of the
devices', each profile's counts add up to its tests, device indices are
distinct.

Usage: validate_report.py SCHEMA RECORD... [--devices N] [--plugins a,b]
  --devices N    the record must hold exactly N devices
  --plugins a,b  the record must hold a device of each named plugin
"""
import argparse
import collections
import json
import sys

import jsonschema


def check(record, args):
    problems = []
    devices = record["devices"]
    verdicts = [d["verdict"] for d in devices]
    expected = "pass" if all(v == "pass" for v in verdicts) else "fail"
    if record["verdict"] != expected:
        problems.append(f"run verdict {record['verdict']} but device verdicts {verdicts}")
    indices = [d["device"]["index"] for d in devices]
    if len(set(indices)) != len(indices):
        problems.append(f"device indices repeat: {indices}")
    for device in devices:
        where = f"{device['plugin']['name']}:{device['device']['index']}"
        statuses = collections.Counter((t["profile"], t["status"]) for t in device["tests"])
        for profile in device["profiles"]:
            for status in ("pass", "fail", "skip", "xfail", "xpass"):
                if profile[status] != statuses[(profile["name"], status)]:
                    problems.append(f"{where}: profile {profile['name']} counts {profile[status]} "
                                    f"{status}, its tests {statuses[(profile['name'], status)]}")
        failing = any(t["status"] in ("fail", "xpass") for t in device["tests"])
        # A device on which no conformance kernel loads never passes.
        failing |= device.get("kernels", {}).get("status") == "not certified"
        if device["verdict"] != ("fail" if failing else "pass"):
            problems.append(f"{where}: verdict {device['verdict']} disagrees with its tests")
    if args.devices is not None and len(devices) != args.devices:
        problems.append(f"{len(devices)} devices, expected {args.devices}")
    for plugin in filter(None, (args.plugins or "").split(",")):
        if not any(d["plugin"]["name"] == plugin for d in devices):
            problems.append(f"no device of plugin {plugin}")
    return problems


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("schema")
    parser.add_argument("records", nargs="+")
    parser.add_argument("--devices", type=int)
    parser.add_argument("--plugins")
    args = parser.parse_args()
    with open(args.schema) as file:
        schema = json.load(file)
    jsonschema.Draft202012Validator.check_schema(schema)
    failed = False
    for path in args.records:
        with open(path) as file:
            record = json.load(file)
        jsonschema.Draft202012Validator(schema).validate(record)
        problems = check(record, args)
        for problem in problems:
            print(f"{path}: {problem}")
        failed |= bool(problems)
        tests = sum(len(d["tests"]) for d in record["devices"])
        print(f"{path}: {'INVALID' if problems else 'valid'} ({len(record['devices'])} devices, "
              f"{tests} tests, verdict {record['verdict']})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
