"""gpuscope: a profiler for deep-learning workloads on NVIDIA GPUs.

This module is imported inside every profiled process, so it imports nothing heavy at load time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .annotation import annotate, end_range, mark, pop_range, push_range, start_range, step

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .trace.report import Report


def load(path: str) -> Report:
    """Open a report file written by ``gpuscope profile`` and return it as a :class:`Report`."""
    from .trace.report import Report

    return Report.open(path)


__all__ = [
    "__version__", "annotate", "end_range", "load", "mark", "pop_range", "push_range",
    "start_range", "step",
]
