#!/usr/bin/env python3
"""The kernel contract on every format: a conformance kernel pack is what a
device that loads none of halconform's own kernel sources is certified with,
and a device on which no conformance kernel loads is "kernels: not certified"
and never passes.

1. The reference plugin in the "minimal" shape loads CPU shared objects only;
   with halconform's own object out of the way (--kernels of a path that does
   not exist) and a pack (a manifest naming the object as the vendor's native
   format) it is certified, every core kernel test naming the pack.
2. Without the pack, the same device is "kernels: not certified": the run
   fails and the record says why.
3. A run of another plugin that compiles the dialect (opencl on PoCL, when
   built) runs every core kernel test with no skip for a missing CPU object.

Usage: kernel_pack_test.py --halconform EXE --reference PATH --kernels SO
         --work DIR [--opencl]
"""
import argparse
import json
import os
import subprocess
import sys


def certify(args, extra_args, environment, name):
    report = os.path.join(args.work, f"{name}.json")
    if os.path.exists(report):
        os.remove(report)
    command = [args.halconform, "--profile", "core", "--filter", "core.kernels.*",
               "--tier", "ci", "--timeout", "120", "--report", report] + extra_args
    completed = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env=dict(os.environ, **environment))
    record = None
    if os.path.exists(report):
        with open(report) as file:
            record = json.load(file)
    return completed, record


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--halconform", required=True)
    parser.add_argument("--reference", required=True)
    parser.add_argument("--kernels", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--opencl", action="store_true")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    problems = []
    missing = os.path.join(args.work, "no-such-kernels.so")
    minimal = {"HALCONFORM_SHAPE": "minimal", "HAL_CPU_DEVICES": "1"}

    # 1. The pack alone certifies the device.
    manifest = os.path.join(args.work, "hal_plugin_reference.kernels")
    with open(manifest, "w") as file:
        file.write("# halconform's conformance kernels, as a vendor ships them\n")
        file.write(f"HAL_MODULE_FORMAT_CPU_SHARED_OBJECT {args.kernels}\n")
        file.write("HAL_MODULE_FORMAT_PTX sm_80.ptx  # for another device: not loaded here\n")
    completed, record = certify(args, ["--plugin", args.reference, "--kernel-pack", manifest,
                                       "--kernels", missing], minimal, "pack")
    device = record["devices"][0] if record else None
    if completed.returncode != 0 or device is None or device["kernels"]["status"] != "certified":
        problems.append("with the pack: the run did not pass certified:\n" + completed.stdout[-2000:])
    else:
        for test in device["tests"]:
            if test["status"] == "pass" and "conformance kernel pack" not in test["message"] and \
                    test["name"] != "core.kernels.device_mismatch":
                problems.append(f"with the pack: {test['name']} does not name the pack: "
                                f"{test['message'][:200]}")
    print(("PASSED  " if not problems else "FAILED  ") + "a kernel pack certifies the device")

    # 2. No source at all: not certified, never a pass.
    before = len(problems)
    completed, record = certify(args, ["--plugin", args.reference, "--kernels", missing], minimal,
                                "none")
    device = record["devices"][0] if record else None
    if (completed.returncode != 1 or device is None or device["verdict"] != "fail" or
            device["kernels"]["status"] != "not certified" or
            "kernels: not certified" not in completed.stdout):
        problems.append("without a kernel source: expected 'kernels: not certified' and a "
                        "failed run:\n" + completed.stdout[-2000:])
    print(("PASSED  " if len(problems) == before else "FAILED  ") +
          "a device that loads no conformance kernel is not certified")

    # 3. opencl: the core kernel tests run through the dialect, no skip for a CPU object.
    if args.opencl:
        before = len(problems)
        completed, record = certify(args, ["--plugin", "opencl"], {}, "opencl")
        tests = record["devices"][0]["tests"] if record else []
        skipped = [t for t in tests if t["status"] == "skip" and
                   t["name"] != "core.kernels.device_mismatch"]
        if completed.returncode != 0 or not tests or skipped:
            problems.append("opencl: " + "; ".join(f"{t['name']} skipped: {t['message'][:160]}"
                                                    for t in skipped) + completed.stdout[-1500:])
        print(("PASSED  " if len(problems) == before else "FAILED  ") +
              f"opencl runs the {len(tests)} core kernel tests, {len(skipped)} skipped")

    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
