#!/usr/bin/env python3
"""halconform's self-test: run it over a deliberately broken plugin, once per
planted fault (HALCONFORM_FAULT selects it), and check that the certification
fails with the right test named and a message that names the fault; then check
that the healthy plugin passes every test that caught one. Prints "caught N/M
planted faults"; exits non-zero unless every fault (at least 30) is caught."""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys

# (fault, profile, the test that must fail (also the filter), words its message must hold,
# timeout s). Each fault is one HALCONFORM_FAULT mode of hal_plugin_fault.so.
PLANTED = [
    # copies and fills
    ("copy_short", "core", "core.memory.copy_directions", "hal_memcpy_async", 60),
    ("copy_dst_off_by_one", "core", "core.memory.copy_directions", "hal_memcpy_async", 60),
    ("copy_dropped_sometimes", "core", "core.streams.concurrent_enqueue", "hal_memcpy_async", 60),
    ("copy_small_staged", "core", "core.memory.small_copies_held", "small host->device", 60),
    ("memset_tail_zero", "core", "core.memory.fill", "hal_memset_async", 60),
    ("memset_high_bit", "core", "core.memory.fill", "hal_memset_async", 60),
    # memory
    ("alignment_ignored", "core", "core.memory.alignment", "alignment", 60),
    ("alloc_overlap_under_pressure", "core", "core.memory.pressure", "overlaps a live allocation",
     60),
    ("memory_overstated", "core", "core.memory.total_declared", "declared", 60),
    ("leak", "stress", "stress.memory.churn", "not coming back", 60),
    # streams
    ("stream_reorder", "core", "core.streams.in_order", "out of order", 60),
    ("hang", "core", "core.streams.synchronize", "timed out", 3),
    ("device_synchronize_skips_streams", "core", "core.streams.device_synchronize",
     "hal_device_synchronize returned with", 60),
    ("stream_query_always_done", "core", "core.streams.query", "hal_stream_query", 60),
    ("host_fn_immediate", "core", "core.streams.host_fn_order", "saw the fill value", 60),
    # events
    ("event_early", "core", "core.events.synchronize", "hal_event_synchronize", 60),
    ("event_query_never_ready", "core", "core.events.query", "returned HAL_NOT_READY", 60),
    ("event_record_captures_nothing", "core", "core.events.query", "expected HAL_NOT_READY", 60),
    ("wait_event_ignored", "core", "core.events.cross_stream_wait", "did not wait", 60),
    # a deadlock that only the HostGate's own time-out (20 s) breaks: a failure, never a pass
    ("wait_event_on_host", "core", "core.events.cross_stream_wait", "opened by itself", 60),
    ("crash", "core", "core.events.timing", "crashed", 60),
    ("elapsed_negated", "core", "core.events.timing", "elapsed", 60),
    ("elapsed_in_microseconds", "core", "core.events.timing", "elapsed", 60),
    ("destroy_result", "core", "core.errors.destroyed_handles", "hal_stream_destroy", 60),
    # kernels
    ("launch_skips_last_block", "core", "core.kernels.grid_coverage", "hal_launch_kernel", 60),
    ("grid_dims_swapped", "core", "core.kernels.grid_coverage", "hal_launch_kernel", 60),
    ("max_block_capped", "core", "core.kernels.max_block", "written 0 times", 60),
    ("max_grid_capped", "core", "core.kernels.max_grid", "written 0 times", 60),
    ("last_arg_zeroed", "core", "core.kernels.arguments", "argument 64 of 64", 60),
    ("compute_units_overstated", "core", "core.kernels.parallelism", "overstated", 60),
    ("module_load_wrong_error", "core", "core.kernels.module_load", "HAL_ERROR_INVALID_MODULE",
     60),
    ("kernel_get_wrong_error", "core", "core.kernels.signature", "HAL_ERROR_NOT_FOUND", 60),
    # collectives
    ("collective_half_ulp_off", "collectives", "collectives.matrix.half_exact",
     "round to nearest even", 60),
    ("collective_deadline_ignored", "collectives", "collectives.abort.deadline",
     "deadline is ignored", 60),
    # operators: each failure names the op and the shape
    ("conv_padding_swapped", "operators", "operators.convolution.geometry",
     "convolution f32->f32 channels_first x[2,4,11,10]", 120),
    ("conv_filter_flipped", "operators", "operators.convolution.dtypes_and_layouts",
     "convolution f32->f32 channels_first x[2,5,9,7] w[6,5,3,3]", 120),
    ("batch_norm_unbiased_variance", "operators", "operators.batch_norm.training",
     "batch_norm f32 channels_first x[2,6,5,7] training", 120),
    ("pooling_indices_off_by_one", "operators", "operators.pooling.max",
     "pooling max f32 channels_first x[2,3,11,10] y[2,3,6,5]", 120),
    ("count_include_pad_inverted", "operators", "operators.pooling.average",
     "pooling average f32 channels_first x[2,3,11,10]", 120),
]


def run(args, plugin, fault, profile, glob, timeout):
    report = os.path.join(args.work, f"{fault}.json")
    if os.path.exists(report):
        os.remove(report)
    command = [args.halconform, "--plugin", os.path.join(args.faults, plugin), "--device", "0",
               "--profile", profile, "--filter", glob, "--timeout",
               str(timeout * args.timeout_scale), "--duration", "1", "--report", report]
    environment = dict(os.environ, HALCONFORM_FAULT=fault)
    completed = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env=environment)
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
    parser.add_argument("--only", help="comma-separated fault names (a quicker run while editing)")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)

    only = set(args.only.split(",")) if args.only else None
    planted = [p for p in PLANTED if only is None or p[0] in only]
    caught = 0
    # The faults run a few at a time, each in its own halconform process with its own
    # report: most of this test's time is waiting (a deadlock held until the HostGate's
    # 20 s time-out, a hang until the test's deadline), not work. Results print in order.
    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        runs = [pool.submit(run, args, "hal_plugin_fault.so", fault, profile, expected, timeout)
                for fault, profile, expected, words, timeout in planted]
    for (fault, profile, expected, words, timeout), finished in zip(planted, runs):
        completed, record = finished.result()
        tests = {t["name"]: t for t in (record or {}).get("tests", [])}
        test = tests.get(expected)
        ok = (completed.returncode == 1 and record is not None and record["verdict"] == "fail"
              and test is not None and test["status"] == "fail" and words in test["message"])
        if ok:
            caught += 1
            print(f"CAUGHT  {fault:34} by {expected}: {test['message'][:200]}")
        else:
            print(f"MISSED  {fault:34} expected {expected} to fail with '{words}' (exit "
                  f"{completed.returncode}, status {test['status'] if test else 'absent'}, "
                  f"message {test['message'][:300] if test else ''!r})")
            print(completed.stdout[-3000:])

    # The healthy wrapper passes every test that catches a fault: each catch is the fault's.
    catching = sorted({p[2] for p in planted})
    profiles = ",".join(sorted({p[1] for p in planted}))
    completed, record = run(args, "hal_plugin_fault.so", "none", profiles, ",".join(catching), 120)
    statuses = {t["name"]: t["status"] for t in (record or {}).get("tests", [])}
    healthy_ok = (completed.returncode == 0 and all(statuses.get(t) == "pass" for t in catching))
    print(("PASSED  " if healthy_ok else "FAILED  ") +
          f"the healthy plugin over the {len(catching)} catching tests")
    if not healthy_ok:
        print(completed.stdout[-3000:])

    # Known-failure data must stay honest: an entry for a passing test is XPASS.
    completed, record = run(args, "hal_plugin_fault_none.so", "none", "core",
                            "core.memory.fill,core.memory.zero_size", 60)
    statuses = {t["name"]: t["status"] for t in (record or {}).get("tests", [])}
    xpass_ok = (completed.returncode == 1 and statuses.get("core.memory.fill") == "xpass"
                and statuses.get("core.memory.zero_size") == "pass")
    print(("CAUGHT  " if xpass_ok else "MISSED  ") + "stale known-failure entry reported as XPASS")

    print(f"caught {caught}/{len(planted)} planted faults")
    everything = (caught == len(planted) and healthy_ok and xpass_ok
                  and (only is not None or len(planted) >= 30))
    if everything:
        print("every planted fault caught")
    return 0 if everything else 1


if __name__ == "__main__":
    sys.exit(main())
