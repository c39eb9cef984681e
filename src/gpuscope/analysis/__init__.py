"""Analyses: a report in, tables or findings out; no printing."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..trace.report import Report
    from .table import Table

# The reports of ``gpuscope stats``, in order (functions of the REPORTS of cuda_summaries,
# range_summaries and cpu). Kept here so the command line can list them without importing the
# analyses.
STATS_REPORTS = (
    "cuda_gpu_kern_sum",
    "cuda_api_sum",
    "cuda_gpu_mem_time_sum",
    "cuda_gpu_mem_size_sum",
    "cuda_gpu_sum",
    "cuda_kern_exec_sum",
    "nvtx_sum",
    "nvtx_gpu_proj_sum",
    "layer_sum",
    "step_sum",
    "cpu_hotspots",
    "cpu_hotspots_lines",
    "cpu_thread_sum",
    "host_sum",
    "op_sum",
    "sync_sum",
    "launch_sum",
    "roofline_sum",
    "memory_sum",
    "rank_sum",
    "collective_sum",
    "rank_layer_sum",
)


def stats_reports() -> dict[str, Callable[[Report], Table]]:
    """Return the function of every report of ``gpuscope stats`` by name, in STATS_REPORTS order."""
    from .cpu.summaries import REPORTS as CPU
    from .memory.summaries import REPORTS as MEMORY
    from .ops.cuda_summaries import REPORTS as CUDA
    from .ranges.summaries import REPORTS as RANGES
    from .roofline.points import REPORTS as ROOFLINE
    from .ops.launch_sites import REPORTS as LAUNCHES
    from .ops.sync import REPORTS as SYNC
    from .ranges.operators import REPORTS as TORCH_OPS
    from .distributed.layers import REPORTS as RANK_LAYERS
    from .distributed.summaries import REPORTS as RANKS

    found = {**CUDA, **RANGES, **CPU, **SYNC, **LAUNCHES, **TORCH_OPS, **ROOFLINE, **MEMORY, **RANKS, **RANK_LAYERS}
    return {name: found[name] for name in STATS_REPORTS}
