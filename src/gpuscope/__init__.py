"""gpuscope: a profiler for deep-learning workloads on NVIDIA GPUs.

This module is imported inside every profiled process, so it imports nothing heavy at load time.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .annotation import annotate, end_range, mark, pop_range, push_range, start_range, step
from .version import __version__

if TYPE_CHECKING:
    from .notebook import LoadedReport
    from .run.block import Profile


def load(path: str | os.PathLike[str]) -> LoadedReport:
    """Open a report file written by ``gpuscope profile`` and return it: SQL on its tables
    (``sql``, ``df``), the tables as DataFrames (``kernels()``, ``ranges()``, ...), and the
    analyses as DataFrames with names resolved (``steps()``, ``layers()``, ``samples()``,
    ``stats(name)``, ``findings()``). A file that is not a readable report raises ReportError."""
    from .notebook import LoadedReport

    return LoadedReport.open(os.fspath(path))


def start() -> bool:
    """Turn collection on, in a process that gpuscope profiles: under ``gpuscope profile
    --capture-range=api``, or after :func:`stop`. Return whether collection is on; without a
    profiler this does nothing and returns False (use :func:`profile` to profile from Python)."""
    from .run import block as inprocess

    return inprocess.start()


def stop() -> bool:
    """Turn collection off until the next :func:`start` (what runs meanwhile is not in the report);
    return whether collection is still on (False without a profiler)."""
    from .run import block as inprocess

    return inprocess.stop()


def profile(output: str | os.PathLike[str] | None = None, trace: str | None = None,
            force_overwrite: bool = False, quiet: bool = False) -> Profile:
    """Profile a block of this process: ``with gpuscope.profile("x.gpuscope"): ...``.

    At the end of the block the report is written (``output``; default ``report1.gpuscope``,
    ``report2``, ...; an existing file is an error unless ``force_overwrite``) and its summary
    printed on stderr (unless ``quiet``). ``trace`` chooses the collectors as ``--trace`` does
    (default: cuda, nvtx, torch with a GPU; torch, cpu without). Under ``gpuscope profile`` the
    block is a capture range of that run instead. The returned object also has ``start()`` and
    ``stop()`` (which returns the report's path), and ``report``.
    """
    from .run.block import Profile

    return Profile(output, trace, force_overwrite, quiet)


__all__ = [
    "__version__", "annotate", "end_range", "load", "mark", "pop_range", "profile", "push_range",
    "start", "start_range", "step", "stop",
]
