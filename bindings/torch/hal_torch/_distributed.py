"""The ``hal`` backend of ``torch.distributed``: HAL collectives on hal (and cpu) tensors.

``dist.init_process_group("hal", ...)`` (or ``device_id=torch.device("hal:N")``) makes a
:class:`hal_torch._C.ProcessGroupHal` per group: its communicator is bootstrapped through the
store torch gives the group, its deadline is the group's ``timeout``.
"""
from __future__ import annotations

import torch.distributed as dist

from . import _C

_NAME = "hal"


def _create_backend(options, backend_options=None):
    # extended_api: torch passes _DistributedBackendOptions (store, group_rank,
    # group_size, timeout, group_id, global_ranks_in_group).
    return _C.ProcessGroupHal(options.store, options.group_rank, options.group_size,
                              options.timeout)


def register() -> None:
    if not dist.is_available() or _NAME in dist.Backend.backend_list:
        return
    dist.Backend.register_backend(_NAME, _create_backend, extended_api=True,
                                  devices=["hal", "cpu"])
