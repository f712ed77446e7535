"""PyTorch on any HAL device.

``import hal_torch`` makes the PrivateUse1 device of PyTorch the ``hal`` device:
``torch.device("hal:N")`` is HAL device N, whichever plugin serves it. Its aten
kernels are HAL operator plans (hal_ops); every other op runs on the CPU through a
counted fallback (``HAL_TORCH_FALLBACK=warn|silent|error``, :func:`metrics`);
``torch.distributed`` gains the ``hal`` backend over HAL collectives. See
bindings/torch/README.md.
"""
from __future__ import annotations

import torch

from . import _C

__all__ = ["metrics", "metrics_report", "reset_metrics", "set_fallback_mode", "fallback_mode",
           "from_dlpack", "to_dlpack", "clear_plan_cache"]

_BACKEND = "hal"


def _register() -> None:
    if torch._C._get_privateuse1_backend_name() != _BACKEND:
        torch.utils.rename_privateuse1_backend(_BACKEND)
    if not hasattr(torch, _BACKEND):
        from . import _device
        torch._register_device_module(_BACKEND, _device)
    if not hasattr(torch.Tensor, _BACKEND):
        torch.utils.generate_methods_for_privateuse1_backend(
            for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True)
    from . import _distributed
    _distributed.register()


_register()


def metrics() -> dict:
    """What ran where since the last :func:`reset_metrics`.

    ``ops`` maps each aten op that ran on a hal tensor to ``native`` (calls served by
    a HAL plan), ``fallback`` (calls run on the CPU), ``bytes_to_host`` and
    ``bytes_to_device`` (what the fallback copied), ``bytes_aliased`` (device memory
    the CPU read in place, without a copy) and ``fallback_seconds``. Also the number
    of plans made and cache hits.
    """
    return _C.metrics()


def reset_metrics() -> None:
    _C.reset_metrics()


def metrics_report() -> str:
    """:func:`metrics` as a table, fallbacks first (torch_xla's metrics_report)."""
    m = metrics()
    rows = sorted(m["ops"].items(), key=lambda kv: (-kv[1]["fallback"], -kv[1]["native"], kv[0]))
    lines = [f"{'op':48s} {'native':>8s} {'fallback':>8s} {'MB copied':>10s} {'fallback s':>10s}"]
    for name, c in rows:
        copied = (c["bytes_to_host"] + c["bytes_to_device"]) / 1e6
        lines.append(f"{name:48s} {c['native']:8d} {c['fallback']:8d} {copied:10.2f} "
                     f"{c['fallback_seconds']:10.4f}")
    native = sum(c["native"] for c in m["ops"].values())
    fell = sum(c["fallback"] for c in m["ops"].values())
    lines.append(f"calls: {native} native, {fell} fallback; plans made {m['plans_created']}, "
                 f"cache hits {m['plan_cache_hits']}")
    return "\n".join(lines)


def set_fallback_mode(mode: str) -> None:
    """``"warn"`` (one warning per op), ``"silent"`` or ``"error"`` (NotImplementedError)."""
    _C.set_fallback_mode(mode)


def fallback_mode() -> str:
    return _C.fallback_mode()


def clear_plan_cache() -> None:
    """Destroys every cached HAL operator plan (they are made again on use)."""
    _C.clear_plan_cache()


def from_dlpack(obj) -> torch.Tensor:
    """A hal tensor over HAL memory exported by ``obj`` (a ``hal.Buffer``, a capsule, any
    ``__dlpack__`` producer whose data lies in a live HAL allocation), without a copy."""
    capsule = obj.__dlpack__() if hasattr(obj, "__dlpack__") else obj
    return _C.from_dlpack(capsule)


def to_dlpack(tensor: torch.Tensor):
    """A DLPack capsule of a hal tensor, without a copy: ``kDLCPU`` when the device's
    memory is host-accessible (``hal.from_dlpack`` then wraps the HAL allocation),
    else torch's ``kDLExtDev``. Waits for the tensor's stream first."""
    return _C.to_dlpack(tensor)

