"""Vector add with a HAL dialect kernel, from Python, with the result seen through DLPack.

    python3 samples/python/vector_add.py      (HAL_PLUGINS=cpu to pick the cpu plugin)

Runs on every device that compiles the kernel dialect and checks c = a + b against numpy.
"""
import numpy as np

import hal

SOURCE = """
kernel void vadd(global const float* a, global const float* b, global float* c, int n) {
  int i = global_id(0);
  if (i < n) c[i] = a[i] + b[i];
}
"""

# %% Inputs: seeded, so a failure reproduces.
n = 1_000_003
rng = np.random.default_rng(7)
a = rng.standard_normal(n).astype(np.float32)
b = rng.standard_normal(n).astype(np.float32)

ran = failed = 0
for device in hal.devices():
    props = device.properties
    if "hal_dialect" not in props.module_formats:
        print(f"device {device.index} ({props.name}): skipped, no kernel dialect")
        continue
    # %% Load the kernel: its signature (pointer, pointer, pointer, i32) comes from the source.
    kernel = hal.Module(device, source=SOURCE).kernel("vadd")
    # %% Copy in, launch on a stream, synchronise (the GIL is released while waiting).
    da, db = hal.to_device(a, device), hal.to_device(b, device)
    dc = hal.empty(n, np.float32, device)
    stream = hal.Stream(device)
    kernel.launch((n + 255) // 256, 256, da, db, dc, n, stream=stream)
    stream.synchronize()
    # %% The result as a numpy array: zero-copy through DLPack when the memory is host-visible.
    if device.has_capability("unified_addressing"):
        c = np.from_dlpack(dc)
        assert c.ctypes.data == dc.ptr  # the same memory, no copy
    else:
        c = dc.to_numpy()
    ok = np.array_equal(c, a + b)
    print(f"device {device.index} ({props.name}, plugin {props.plugin}): vector_add of {n} "
          f"floats {'correct' if ok else 'FAILED'}")
    ran += 1
    failed += not ok
    del c

print(f"vector_add: {ran} device(s) ran, {failed} failed, {hal.device_count()} device(s) found")
raise SystemExit(1 if failed else 0)
