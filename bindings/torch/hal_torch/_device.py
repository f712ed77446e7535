"""``torch.hal``: the device module of the hal device (as ``torch.cuda`` is CUDA's).

Devices, streams and events, memory statistics, random-number state. Streams and
events are torch's own ``torch.Stream``/``torch.Event`` on HAL streams and events.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional, Union

import torch

from . import _C

_DeviceLike = Union[torch.device, str, int, None]


def _index(device: _DeviceLike = None) -> int:
    """The HAL device index of ``device`` (None: the current device)."""
    if device is None:
        return _C.current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != "hal":
        raise ValueError(f"expected a hal device, got {device}")
    return _C.current_device() if device.index is None else device.index


# ---- devices ----------------------------------------------------------------------------

def is_available() -> bool:
    return _C.device_count() > 0


def device_count() -> int:
    return _C.device_count()


def current_device() -> int:
    return _C.current_device()


def set_device(device: _DeviceLike) -> None:
    _C.set_device(_index(device))


class device:
    """Context manager that makes ``device`` current, then restores the previous one."""

    def __init__(self, device: _DeviceLike) -> None:
        self.index = _index(device)
        self.previous = -1

    def __enter__(self) -> None:
        self.previous = _C.current_device()
        _C.set_device(self.index)

    def __exit__(self, *exc: Any) -> None:
        _C.set_device(self.previous)


def synchronize(device: _DeviceLike = None) -> None:
    """Waits until every stream of the device has finished its work."""
    _C.synchronize(_index(device))


def get_device_name(device: _DeviceLike = None) -> str:
    return _C.device_properties(_index(device))["name"]


def get_device_properties(device: _DeviceLike = None) -> dict:
    """name, vendor, plugin, total_memory, host_accessible, ... of the HAL device."""
    return _C.device_properties(_index(device))


def init() -> None:
    _C.device_count()


def _lazy_init() -> None:  # torch's device_lazy_init calls it
    _C.device_count()


def is_initialized() -> bool:
    return True


def _is_in_bad_fork() -> bool:
    return False


def get_amp_supported_dtype() -> list:
    return [torch.float16, torch.bfloat16]


def _is_compiled() -> bool:
    return True


# ---- streams and events -----------------------------------------------------------------

class Stream(torch.Stream):
    """A HAL stream of a hal device (``torch.Stream`` with the device defaulted)."""

    def __new__(cls, device: _DeviceLike = None, priority: int = 0, **kwargs: Any) -> "Stream":
        if "stream_id" in kwargs:
            return super().__new__(cls, **kwargs)
        return super().__new__(cls, device=torch.device("hal", _index(device)), priority=priority)


class Event:
    """A HAL event: makes a ``torch.Event`` of the hal device (torch's own type, which its
    elapsed_time and wait calls require exactly)."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False,
                interprocess: bool = False, device: _DeviceLike = None) -> torch.Event:
        return torch.Event(device=torch.device("hal", _index(device)),
                           enable_timing=enable_timing, blocking=blocking,
                           interprocess=interprocess)


# c10::DeviceType::PrivateUse1
_PRIVATEUSE1 = 20


def current_stream(device: _DeviceLike = None) -> Stream:
    stream_id, index = _C.current_stream(_index(device))
    return Stream(stream_id=stream_id, device_index=index, device_type=_PRIVATEUSE1)


def default_stream(device: _DeviceLike = None) -> Stream:
    stream_id, index = _C.default_stream(_index(device))
    return Stream(stream_id=stream_id, device_index=index, device_type=_PRIVATEUSE1)


def set_stream(stream: torch.Stream) -> None:
    if stream is None:
        return
    _C.set_stream(stream.stream_id, stream.device_index)


@contextlib.contextmanager
def stream(stream: Optional[torch.Stream]) -> Iterator[None]:
    """Makes ``stream`` current on its device, then restores that device's previous stream."""
    if stream is None:
        yield
        return
    previous = current_stream(stream.device_index)
    set_stream(stream)
    try:
        yield
    finally:
        set_stream(previous)


# ---- memory -----------------------------------------------------------------------------

def memory_allocated(device: _DeviceLike = None) -> int:
    """Bytes held by live hal tensors on the device (rounded up to the allocator's blocks)."""
    return _C.memory_allocated(_index(device))


def max_memory_allocated(device: _DeviceLike = None) -> int:
    return _C.max_memory_allocated(_index(device))


def memory_reserved(device: _DeviceLike = None) -> int:
    """Bytes the caching allocator holds from HAL: live tensors plus cached blocks."""
    return _C.memory_reserved(_index(device))


def max_memory_reserved(device: _DeviceLike = None) -> int:
    return _C.max_memory_reserved(_index(device))


def reset_peak_memory_stats(device: _DeviceLike = None) -> None:
    _C.reset_peak_memory_stats(_index(device))


def memory_stats(device: _DeviceLike = None) -> dict:
    return _C.memory_stats(_index(device))


def empty_cache() -> None:
    """Gives every cached block (device and pinned host memory) back to HAL."""
    _C.empty_cache()


# ---- random numbers ---------------------------------------------------------------------

def _generator(device: _DeviceLike = None) -> torch.Generator:
    return _default_generators()[_index(device)]


_GENERATORS: list = []


def _default_generators() -> list:
    if not _GENERATORS:
        _GENERATORS.extend(_C.default_generator(i) for i in range(device_count()))
    return _GENERATORS


def manual_seed(seed: int) -> None:
    """Seeds the current device's generator."""
    _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for generator in _default_generators():
        generator.manual_seed(int(seed))


def seed() -> None:
    _generator().seed()


def seed_all() -> None:
    for generator in _default_generators():
        generator.seed()


def initial_seed() -> int:
    return _generator().initial_seed()


def get_rng_state(device: _DeviceLike = "hal") -> torch.Tensor:
    """The generator's state: 16 bytes (Philox key, counter offset) as a uint8 CPU tensor."""
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: _DeviceLike = "hal") -> None:
    _generator(device).set_state(new_state)


def get_rng_state_all() -> list:
    return [g.get_state() for g in _default_generators()]


def set_rng_state_all(new_states: list) -> None:
    for generator, state in zip(_default_generators(), new_states):
        generator.set_state(state)
