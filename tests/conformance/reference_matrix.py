#!/usr/bin/env python3
"""A correct plugin must pass: the reference plugins certified, every profile,
at 1, 2 and 4 devices, with a CPU hog running beside them (a loaded machine
must not make a correct plugin fail). A false failure here is as serious as a
missed fault in the self-test.

The reference plugins: the null skeleton (HAL_NULL_DEVICES), the loader's
minimal plugin (nine entries, one device), and the cpu plugin in every shape
of the reference wrapper (HALCONFORM_SHAPE: full, no_ops, no_collectives,
minimal, dialect_only; HAL_CPU_DEVICES).

Usage: reference_matrix.py --halconform EXE --null PATH --minimal PATH
         --reference PATH --work DIR [--tier smoke|ci|full] [--devices 1,2,4]
         [--shapes full,no_ops,...] [--plugins null,minimal,reference]
         [--profiles all] [--reference-profiles P,P] [--hog] [--timeout S] [--jobs N]
Each run's record is kept in --work (the coverage self-check reads them).
"""
import argparse
import concurrent.futures
import json
import multiprocessing
import os
import subprocess
import sys
import time


def hog(stop):
    """Burns one core until |stop| is set: the load a correct plugin must stand."""
    x = 0
    while not stop.is_set():
        for _ in range(100000):
            x = (x * 1103515245 + 12345) & 0xffffffff


def runs(args):
    """(label, plugin path, extra environment) for every run of the matrix."""
    out = []
    devices = [int(d) for d in args.devices.split(",")]
    plugins = args.plugins.split(",")
    reference_profiles = args.reference_profiles or args.profiles
    for count in devices:
        if "null" in plugins:
            out.append((f"null-{count}", args.null, {"HAL_NULL_DEVICES": str(count)},
                        args.profiles))
        if "reference" in plugins:
            for shape in args.shapes.split(","):
                out.append((f"cpu-{shape}-{count}", args.reference,
                            {"HALCONFORM_SHAPE": shape, "HAL_CPU_DEVICES": str(count)},
                            reference_profiles))
    if "minimal" in plugins:
        # The loader's test plugin has one device.
        out.append(("minimal-1", args.minimal, {}, args.profiles))
    return out


def certify(args, label, plugin, extra, profiles):
    report = os.path.join(args.work, f"{label}.json")
    if os.path.exists(report):
        os.remove(report)
    command = [args.halconform, "--plugin", plugin, "--profile", profiles, "--tier",
               args.tier, "--timeout", str(args.timeout), "--duration", "1", "--report", report]
    environment = dict(os.environ, **extra)
    start = time.monotonic()
    completed = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env=environment)
    seconds = time.monotonic() - start
    failures = []
    if os.path.exists(report):
        with open(report) as file:
            record = json.load(file)
        for device in record["devices"]:
            for test in device["tests"]:
                if test["status"] in ("fail", "xpass"):
                    failures.append(f"{device['plugin']['name']}:{device['device']['index']} "
                                    f"{test['name']}: {test['message'][:400]}")
            if device["kernels"]["status"] == "not certified":
                failures.append(f"kernels: not certified: {device['kernels']['detail'][:300]}")
    return completed, failures, seconds


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--halconform", required=True)
    parser.add_argument("--null", required=True)
    parser.add_argument("--minimal", required=True)
    parser.add_argument("--reference", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--tier", default="ci")
    parser.add_argument("--devices", default="1,2,4")
    parser.add_argument("--shapes", default="full,no_ops,no_collectives,minimal,dialect_only")
    parser.add_argument("--plugins", default="null,minimal,reference")
    parser.add_argument("--profiles", default="all")
    parser.add_argument("--reference-profiles",
                        help="the profiles of the cpu shapes (default: --profiles)")
    parser.add_argument("--hog", action="store_true", help="keep one core busy during the runs")
    parser.add_argument("--timeout", type=int, default=120)
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)

    stop = multiprocessing.Event()
    burner = multiprocessing.Process(target=hog, args=(stop,), daemon=True) if args.hog else None
    if burner:
        burner.start()
    passed = 0
    matrix = runs(args)
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = [pool.submit(certify, args, label, plugin, extra, profiles)
                       for label, plugin, extra, profiles in matrix]
        for (label, _, extra, profiles), future in zip(matrix, futures):
            completed, failures, seconds = future.result()
            setting = " ".join([f"{k}={v}" for k, v in extra.items()] + [f"profiles {profiles}"])
            if completed.returncode == 0 and not failures:
                passed += 1
                print(f"PASSED  {label:28} {seconds:6.1f} s  ({setting})")
            else:
                print(f"FAILED  {label:28} {seconds:6.1f} s  ({setting}), exit "
                      f"{completed.returncode}: a correct plugin must pass")
                for failure in failures:
                    print(f"        {failure}")
                if not failures:
                    print(completed.stdout[-3000:])
    finally:
        if burner:
            stop.set()
            burner.join()
    print(f"{passed}/{len(matrix)} reference certifications passed"
          f"{' under a CPU hog' if args.hog else ''} (tier {args.tier})")
    if passed == len(matrix):
        print("every reference plugin passed")
        return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
