"""The process group a c10d operator runs on, as the operator recorder keeps it.

A c10d operator (``c10d::allreduce_``) takes its process group as a TorchScript object; PyTorch's
``ProcessGroup.unbox`` gives the Python group back, whose name (``"0"`` for the default group),
description (``default_pg``, or the ``group_desc`` given to ``new_group``) and members' global ranks
are the group's identity across ranks. They are worked out once per group object and recorded in
the operator's ``scalars`` as ``process_group``: ``[name, description, [ranks]]``. NCCL's own
communicator ids are not visible from Python. Nothing here imports torch: the recorder hands in the
objects it sees.
"""

from __future__ import annotations

import sys
from typing import Any

_known: dict[int, tuple[Any, tuple[str, str | None, tuple[int, ...]] | None]] = {}


def group_info(obj: Any) -> tuple[str, str | None, tuple[int, ...]] | None:
    """Return (name, description, global ranks) of a c10d operator's process-group argument, or
    None when it cannot be read (another kind of object, a torch without these attributes)."""
    found = _known.get(id(obj))
    if found is not None and found[0] is obj:
        return found[1]
    dist = sys.modules.get("torch.distributed")
    info = None
    if dist is not None:
        group_class = getattr(dist, "ProcessGroup", None)
        try:
            group = group_class.unbox(obj) if hasattr(group_class, "unbox") else obj
            name = str(group.group_name)
            desc = getattr(group, "group_desc", None)
            ranks = tuple(int(r) for r in dist.get_process_group_ranks(group))
            info = (name, None if desc is None else str(desc), ranks)
        except Exception:  # noqa: BLE001  (an opaque object: the operator is recorded without its group)
            info = None
    _known[id(obj)] = (obj, info)  # the object is kept, so that its id stays its own
    return info
