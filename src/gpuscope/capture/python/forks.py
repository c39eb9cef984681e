"""Processes the profiled one forks: a warning that they are not recorded.

A child made by ``fork`` (a DataLoader worker with the default start method on Linux, a
``multiprocessing`` pool with ``fork``) is a copy of this process: CUDA and CUPTI do not survive
fork, so the agent stops in it (agent.py, torch_ops.py) and nothing of it reaches the report. A
child made by ``spawn`` or ``forkserver`` is a new Python program, started by the bootstrap like
this one, and is recorded. ``os.register_at_fork`` runs our hook in the parent after each fork (not
for ``subprocess``, ``spawn`` or the ``forkserver``'s own start, which do not run at-fork hooks);
the Python stack there says whether the DataLoader made it. The warning is said once per kind, as a
diagnostic: the launcher prints it and keeps it in the report. Standard library only.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

DATALOADER = os.path.join("torch", "utils", "data", "dataloader.py")
WORKERS = ("DataLoader workers were started by fork (multiprocessing's default on Linux) and are not recorded: "
           "what runs in them (the Dataset's __getitem__, transforms, collate_fn) has no Python samples, "
           "PyTorch operators or ranges in the report; the main process's waits for their batches are "
           "recorded, and the machine's CPU and memory counters (--trace host) include them. To see inside "
           "them, pass multiprocessing_context='spawn' to the DataLoader.")
OTHER = ("the program forked child processes (os.fork, or multiprocessing with the fork start method): they "
         "are not recorded, only the process that forked them; children started with spawn or forkserver are.")


def _from_dataloader(frame: FrameType | None) -> bool:
    """Return whether a frame on the stack from ``frame`` outwards runs PyTorch's DataLoader."""
    while frame is not None:
        if frame.f_code.co_filename.endswith(DATALOADER):
            return True
        frame = frame.f_back
    return False


class ForkWatch:
    """Counts the forks of this process (DataLoader workers apart) and hands a warning diagnostic
    to the agent at the next flush after the first fork of each kind."""

    def __init__(self, now_ns: Callable[[], int]) -> None:
        self._now_ns = now_ns
        self.forks = {"dataloader": 0, "other": 0}
        self._said: set[str] = set()
        self._pending: list[tuple[Any, ...]] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._on = True

    def install(self) -> None:
        """Hook every later fork of this process."""
        os.register_at_fork(after_in_parent=self._after_fork)

    def _after_fork(self) -> None:
        if not self._on or os.getpid() != self._pid:  # stopped, or a child's own fork
            return
        try:
            kind = "dataloader" if _from_dataloader(sys._getframe(1)) else "other"
        except ValueError:  # no caller frame: forked from C
            kind = "other"
        with self._lock:
            self.forks[kind] += 1
            if kind not in self._said:
                self._said.add(kind)
                self._pending.append((self._now_ns(), "warning", WORKERS if kind == "dataloader" else OTHER))

    def stop(self) -> None:
        """Stop counting (the hook stays registered: os.register_at_fork has no removal)."""
        self._on = False

    # -- Collector --------------------------------------------------------------------------
    def set_collecting(self, on: bool) -> None:
        """Forks are watched whether or not a capture window is open: the children are missing either way."""

    def take_rows(self) -> dict[str, list[tuple[Any, ...]]]:
        """Return the warnings said since the last call, as ``diagnostic`` rows."""
        with self._lock:
            rows, self._pending = self._pending, []
        return {"diagnostic": rows} if rows else {}

    def shutdown(self, ctx: Any) -> None:
        """Stop counting at the end (collector protocol)."""
        self.stop()


def start(ctx: Any, module: Any = None) -> ForkWatch:
    """Watch the process's forks (every run: the children are missing whatever is traced)."""
    watch = ForkWatch(ctx.now_ns)
    watch.install()
    return watch
