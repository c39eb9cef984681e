"""Analyses: a report in, tables or findings out; no printing."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

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


# The reports computed once when a report is closed and stored in it (trace/stored_stats.py): those
# whose time grows with the kernels (at 10 million kernels step_sum, rank_sum, cuda_gpu_sum,
# cuda_gpu_kern_sum and collective_sum take 4.6 s of stats' 4.6 s; the others listed read every
# kernel, launch or operation and its ranges). Not stored: the reports of rows that do not grow with
# the kernels (API calls, copies, samples, memory events), those with options (cpu_hotspots) and
# roofline_sum, whose ceilings come from the machine that reads the report.
STORED_STATS = (
    "cuda_gpu_kern_sum",
    "cuda_gpu_sum",
    "cuda_kern_exec_sum",
    "nvtx_gpu_proj_sum",
    "layer_sum",
    "step_sum",
    "launch_sum",
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


def stored_stats(report: Report) -> dict[str, Table]:
    """Return the tables of STORED_STATS stored in ``report`` when it was closed and still valid
    for it (trace/stored_stats.py); empty when it has none to use (the caller computes them)."""
    from ..trace import stored_stats
    from .table import Column, Table

    out = {}
    for name, doc in stored_stats.read(report).items():
        if name in STORED_STATS:
            out[name] = Table(name, doc["title"], [Column(label, unit) for label, unit in doc["columns"]],
                              [tuple(r) for r in doc["rows"]], list(doc["notes"]))
    return out


def stats_to_store(report: Report) -> dict[str, dict[str, Any]]:
    """Compute the tables of STORED_STATS of ``report``, each as trace/stored_stats.py stores it;
    a table holding a value that would not read back as the same Python value is left out."""
    found = stats_reports()
    out = {}
    for name in STORED_STATS:
        table = found[name](report)
        rows = [list(r) for r in table.rows]
        if table.name == name and all(v is None or type(v) in (int, float, str, bool) for r in rows for v in r):
            out[name] = {"title": table.title, "columns": [[c.label, c.unit] for c in table.columns],
                         "rows": rows, "notes": list(table.notes)}
    return out
