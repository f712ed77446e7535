"""HAL for Python: devices, buffers, streams, events, kernels and collectives over HAL's
stable C ABI (hal.h). SPEC.md, "Python bindings", states the rules; in short:

- a failing call raises a subclass of hal.Error named after its result code (with .code,
  .message, .function, .plugin, .native_code); wrong Python types raise TypeError and wrong
  values (shape, size, range) ValueError;
- objects keep what they use alive (a Buffer its device's session, a Kernel its Module);
  hal.shutdown() releases every live object, newest first, and an object used afterwards
  raises hal.DestroyedHandleError; hal.shutdown runs at interpreter exit;
- buffers speak DLPack both ways (``np.from_dlpack(buf)``, ``hal.from_dlpack(array)``)
  without copies for host-visible memory;
- blocking calls release the GIL; host functions take it on the plugin's thread;
- hal.ops runs HAL's operators on buffers and strided views of them (hal.Tensor), planning
  once per layout.
"""
from __future__ import annotations

import atexit
import contextlib
from typing import Iterator

from . import _errors
from ._errors import *  # noqa: F401,F403 - the error classes are part of the API
from ._errors import ERRORS, Error
from . import _kernel
from ._hal import _shutdown_at_exit
from ._hal import (
    Buffer,
    Communicator,
    Device,
    DeviceProperties,
    Event,
    Kernel,
    Module,
    OpPlan,
    Stream,
    Tensor,
    comm_unique_id,
    device,
    device_count,
    devices,
    from_dlpack,
    group_end,
    group_start,
    init,
    is_initialized,
    result_names,
    shutdown,
    version,
)

# @hal.kernel and what its functions use (types, ids, barrier, atomics, math).
from ._kernel import *  # noqa: E402,F401,F403
from ._kernel import KernelSourceError, kernel  # noqa: E402

# The operators (api/hal/ops.h): hal.ops.matmul, hal.ops.attention, ... and hal.ops.plan.
from . import ops  # noqa: E402

__all__ = _kernel.__all__ + [
    "Buffer", "Communicator", "Device", "DeviceProperties", "Error", "ERRORS", "Event", "Kernel",
    "Module", "OpPlan", "Stream", "Tensor", "comm_unique_id", "device", "device_count", "devices", "empty",
    "from_dlpack", "group", "init", "is_initialized", "ops", "result_names", "shutdown",
    "to_device", "version",
] + [cls.__name__ for cls in ERRORS.values()]


def empty(shape: int | tuple[int, ...], dtype: object = "float32", device: Device | None = None,
          kind: str = "device") -> Buffer:
    """An uninitialised Buffer (device 0 unless given). dtype: a numpy dtype or its name
    ("float32"), "bfloat16", or the kernel language's name or type ("f32", hal.bf16)."""
    return Buffer(device if device is not None else globals()["device"](0), shape, dtype, kind)


def to_device(array: object, device: Device | None = None, kind: str = "device") -> Buffer:
    """A new Buffer holding a copy of a host array (always a copy; see from_dlpack for views)."""
    import numpy as np

    # np.ascontiguousarray would make a 0-d array 1-d: asarray(order="C") keeps shape ().
    host = np.asarray(array, order="C")
    buffer = empty(host.shape, host.dtype, device, kind)
    buffer.copy_from(host)
    return buffer


@contextlib.contextmanager
def group() -> Iterator[None]:
    """hal_group_start / hal_group_end around several collectives or sends and receives."""
    group_start()
    try:
        yield
    finally:
        group_end()


# Objects first, then HAL: the extension releases every live object, newest first, before
# hal_shutdown. Registered after import, so it runs before the interpreter tears modules down.
atexit.register(_shutdown_at_exit)
del _errors
