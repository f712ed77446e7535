"""What the Python bindings add to HAL: launch + synchronize from Python (compare with
bench/launch_latency, the same empty kernel from C), an operator's dispatch from Python
(hal.ops.relu on 256 floats, through the plan cache and through OpPlan.execute, beside
numpy.maximum on the same array), and a numpy -> HAL -> numpy round trip beside numpy's own
copy. Not a test: nothing asserts on time.

    PYTHONPATH=<build>/python HAL_PLUGINS=cpu python3 bench/python/overhead.py \
        [--module <build>/bench/empty_kernel.so] [--reps 9]

Prints the median [min-max] over the repetitions.
"""
import argparse
import os
import statistics
import time

import numpy as np

import hal


def median_range(samples):
    return f"{statistics.median(samples):10.2f} [{min(samples):.2f}-{max(samples):.2f}]"


def pyopencl_rows(args):
    """The same empty kernel launched from Python through pyopencl on PoCL (the peer the
    issue names), when pyopencl is installed (pip install pyopencl; not a CI dependency)."""
    try:
        import pyopencl as cl
    except ImportError:
        print("pyopencl launch                  (pyopencl not installed: pip install pyopencl)")
        return
    ctx = cl.Context(devices=[cl.get_platforms()[0].get_devices()[0]])
    queue = cl.CommandQueue(ctx)
    kernel = cl.Program(ctx, "kernel void empty(void) {}").build().empty
    sync_us, pipe_us = [], []
    calls_sync, calls_pipe = max(1, args.sync // 10), max(1, args.pipelined // 10)
    for _ in range(args.reps):
        start = time.perf_counter()
        for _ in range(calls_sync):
            kernel(queue, (1,), (1,))
            queue.finish()
        sync_us.append((time.perf_counter() - start) / calls_sync * 1e6)
        start = time.perf_counter()
        for _ in range(calls_pipe):
            kernel(queue, (1,), (1,))
        queue.finish()
        pipe_us.append((time.perf_counter() - start) / calls_pipe * 1e6)
    print(f"launch+finish  (pyopencl, PoCL)  us/launch {median_range(sync_us)}")
    print(f"launch pipelined (pyopencl, PoCL) us/launch {median_range(pipe_us)}")


def main():
    here = os.path.dirname(hal.__file__)
    default_module = os.path.join(here, "..", "..", "bench", "empty_kernel.so")
    parser = argparse.ArgumentParser()
    parser.add_argument("--module", default=os.path.normpath(default_module))
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--sync", type=int, default=2000)
    parser.add_argument("--pipelined", type=int, default=10000)
    args = parser.parse_args()

    dev = hal.device(0)
    kernel = hal.Module(dev, path=args.module, format="cpu_shared_object").kernel("empty")
    stream = hal.Stream(dev)
    sync_us, pipe_us = [], []
    for _ in range(args.reps):
        start = time.perf_counter()
        for _ in range(args.sync):
            kernel.launch(1, 1, stream=stream)
            stream.synchronize()
        sync_us.append((time.perf_counter() - start) / args.sync * 1e6)
        start = time.perf_counter()
        for _ in range(args.pipelined):
            kernel.launch(1, 1, stream=stream)
        stream.synchronize()
        pipe_us.append((time.perf_counter() - start) / args.pipelined * 1e6)
    print(f"launch+synchronize (python)      us/launch {median_range(sync_us)}")
    print(f"launch pipelined   (python)      us/launch {median_range(pipe_us)}")

    pyopencl_rows(args)

    # An operator's dispatch: what the plan cache and the binding cost per call. The op is
    # tiny so that the figure is the overhead, not the work.
    host = np.linspace(-1, 1, 256, dtype=np.float32)
    x, y = hal.to_device(host, dev), hal.empty(256, np.float32, dev)
    plan = hal.ops.plan("unary", dev, activation="relu", alpha=1.0, x=x, out=y)
    host_out = np.empty_like(host)
    calls = args.pipelined // 2
    cached_us, plan_us, numpy_us = [], [], []
    for _ in range(args.reps):
        start = time.perf_counter()
        for _ in range(calls):
            hal.ops.relu(x, out=y, stream=stream)
        stream.synchronize()
        cached_us.append((time.perf_counter() - start) / calls * 1e6)
        start = time.perf_counter()
        for _ in range(calls):
            plan.execute([x, y], stream=stream)
        stream.synchronize()
        plan_us.append((time.perf_counter() - start) / calls * 1e6)
        start = time.perf_counter()
        for _ in range(calls):
            np.maximum(host, 0, out=host_out)
        numpy_us.append((time.perf_counter() - start) / calls * 1e6)
    print(f"hal.ops.relu(256) pipelined      us/call   {median_range(cached_us)}")
    print(f"OpPlan.execute(256) pipelined    us/call   {median_range(plan_us)}")
    print(f"numpy.maximum(256)               us/call   {median_range(numpy_us)}")
    # The round trip writes into an existing numpy array (wrapped by hal.from_dlpack), as
    # numpy.copyto does: Buffer.to_numpy() allocates a new array, whose first touch costs
    # page faults that are not HAL's.

    rng = np.random.default_rng(1)
    for size in (1 << 20, 256 << 20):
        x = rng.integers(0, 255, size, dtype=np.uint8)
        out = np.empty_like(x)
        out[:] = 0  # touched, as numpy's own destination is
        buf = hal.empty(size, np.uint8, dev)
        out_view = hal.from_dlpack(out, dev)  # the numpy result array, wrapped in place
        reps = args.reps if size <= (1 << 20) else max(3, args.reps // 3)
        hal_ms, np_ms = [], []
        for _ in range(reps):
            start = time.perf_counter()
            buf.copy_from(x, stream=stream)
            out_view.copy_from(buf, stream=stream)
            stream.synchronize()
            hal_ms.append((time.perf_counter() - start) * 1e3)
            start = time.perf_counter()
            np.copyto(out, x)
            np.copyto(x, out)
            np_ms.append((time.perf_counter() - start) * 1e3)
        # Zero-copy both ways on host-visible memory: the same bytes, checked by address.
        zero_us = []
        for _ in range(reps):
            start = time.perf_counter()
            back = np.from_dlpack(hal.from_dlpack(x, dev))
            zero_us.append((time.perf_counter() - start) * 1e6)
            same = back.__array_interface__["data"][0] == x.__array_interface__["data"][0]
            del back
        label = f"{size >> 20} MiB"
        print(f"numpy->HAL->numpy zero-copy {label:>8} us {median_range(zero_us)}"
              f"  same address: {same}")
        print(f"numpy->HAL->numpy {label:>8}        ms {median_range(hal_ms)}")
        print(f"numpy.copyto x2   {label:>8}        ms {median_range(np_ms)}")
        del out_view
        buf.close()


if __name__ == "__main__":
    main()
