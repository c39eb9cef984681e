"""The rank of a process in a distributed job: from the launcher's environment, then from
``torch.distributed`` once the program initializes its process group.

torchrun sets ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` and ``GROUP_RANK`` (the node); Open MPI's
``mpirun`` sets ``OMPI_COMM_WORLD_*``; MPICH and Intel MPI set ``PMI_RANK``/``PMI_SIZE``; Slurm's
``srun`` sets ``SLURM_PROCID``, ``SLURM_LOCALID``, ``SLURM_NTASKS`` and ``SLURM_NODEID``. A process
that none of them names (torchrun's own agent, a DataLoader worker started without them) has no
rank row. When ``torch.distributed.init_process_group`` returns, the rank and world size of the
default group and its backend replace what the environment said. Standard library only.
"""

from __future__ import annotations

import functools
import os
import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from ..collectors import Context

# rank, local rank, world size, node rank: the variables of each launcher, first found wins
LAUNCHERS: tuple[tuple[str, str, str, str, str], ...] = (
    ("torchrun", "RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK"),
    ("mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_NODE_RANK"),
    ("pmi", "PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE", ""),
    ("slurm", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_NODEID"),
)

# rank, local_rank, world_size, node_rank, host, backend, source: the ``rank`` columns (pid left out)
Row = tuple[Any, ...]


def _int(env: Mapping[str, str], name: str) -> int | None:
    try:
        return int(env[name]) if name else None
    except (KeyError, ValueError):
        return None


def from_environment(env: Mapping[str, str], host: str | None = None) -> Row | None:
    """Return the ``rank`` row the launcher's variables in ``env`` give, or None when none does."""
    for source, rank, local, world, node in LAUNCHERS:
        r = _int(env, rank)
        if r is None:
            continue
        return (r, _int(env, local), _int(env, world), _int(env, node), host or socket.gethostname(), None, source)
    return None


class RankRecorder:
    """Holds this process's rank row until the agent takes it (a collector of the ``rank`` table)."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.row = from_environment(os.environ if env is None else env)
        self._pending = self.row is not None

    def set_collecting(self, on: bool) -> None:
        """The rank is recorded whatever the capture window (it describes the process)."""

    def take_rows(self) -> dict[str, list[Row]]:
        """Return the rank row once after it is known or changes."""
        if not self._pending or self.row is None:
            return {}
        self._pending = False
        return {"rank": [self.row]}

    def from_torch(self, dist: Any) -> None:
        """Replace the row with what the initialized default process group says."""
        if not dist.is_initialized():
            return
        old = self.row or (None, None, None, None, socket.gethostname(), None, "")
        local = old[1]
        if local is None:
            local = _int(os.environ, "LOCAL_RANK")
        self.row = (int(dist.get_rank()), local, int(dist.get_world_size()), old[3], old[4],
                    str(dist.get_backend()), "torch.distributed")
        self._pending = True

    def install(self, torch: Any, on_error: Callable[[str, str], None]) -> None:
        """Wrap ``init_process_group`` of ``torch.distributed`` so that its result is recorded."""
        dist = getattr(torch, "distributed", None)
        if dist is None or not dist.is_available():
            return
        c10d = getattr(dist, "distributed_c10d", None)
        original = dist.init_process_group
        if getattr(original, "__gpuscope_wrapped__", False):
            return

        @functools.wraps(original)
        def init_process_group(*args: Any, **kwargs: Any) -> Any:
            out = original(*args, **kwargs)
            try:
                self.from_torch(dist)
            except Exception as exc:  # noqa: BLE001  (never break the program's start)
                on_error("warning", f"the rank from torch.distributed was not recorded: {type(exc).__name__}: {exc}")
            return out

        init_process_group.__gpuscope_wrapped__ = True  # type: ignore[attr-defined]
        dist.init_process_group = init_process_group
        if c10d is not None and getattr(c10d, "init_process_group", None) is original:
            c10d.init_process_group = init_process_group
        if dist.is_initialized():  # imported after the group was made
            self.from_torch(dist)


def start(ctx: Context, module: Any = None) -> RankRecorder:
    """Return the rank recorder, with the rank the environment names; once the program imports
    torch, ``init_process_group`` updates it."""
    recorder = RankRecorder()
    ctx.when_imported("torch", lambda torch: recorder.install(torch, ctx.diag))
    return recorder
