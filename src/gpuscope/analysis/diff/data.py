"""What ``gpuscope diff`` compares, taken from one report: its steps and, per step, the time of each
part of the step's breakdown (:mod:`.parts`), the GPU time of each kernel (by name and launch
configuration), layer and operator (without GPU work: each module's own CPU time), the sampled time
of each program line, and its host synchronizations.

Steps are those of :func:`..steps.source.step_windows` without the warm-up steps, in order (by process,
then step number). A GPU operation counts to the step in which it was launched.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ...trace.report import Report
from ..ops.attribution import ops_table
from .parts import has_gpu_work, line_times, module_times, part_labels, part_times
from ..ranges.layers import op_owners_sql
from ..steps.source import op_steps_table, step_source, step_windows
from ..ranges.operators import op_kernels_table, torch_ops_table

FAMILIES = ("part", "layer", "line", "kernel", "operator")


@dataclass
class RunData:
    """One report's steps and per-step quantities (``families``: a frame per family, one row per
    step in the order of ``steps``, one column per key, GPU nanoseconds in that step)."""

    path: str
    program: str | None
    device: str | None
    steps: np.ndarray
    warmup: int
    step_source: str
    families: dict[str, pd.DataFrame] = field(default_factory=dict)
    syncs: np.ndarray = field(default_factory=lambda: np.zeros(0))
    sync_wait: np.ndarray = field(default_factory=lambda: np.zeros(0))
    sync_sites: dict[str, np.ndarray] = field(default_factory=dict)
    memory_peak: dict[str, float] = field(default_factory=dict)


def _program(report: Report) -> str | None:
    command = report.meta.get("command")
    if isinstance(command, list) and command:
        args = [a for a in command[1:] if not a.startswith("-")] or command
        return Path(str(args[0])).name if command[0].endswith(("python", "python3")) or "python" in \
            Path(str(command[0])).name else " ".join(map(str, command[:2]))
    return None


def _device(report: Report) -> str | None:
    names = sorted({str(n) for (n,) in report.sql("SELECT DISTINCT name FROM device WHERE name IS NOT NULL")})
    return ", ".join(names) or None


def _per_step(report: Report, query: str | pd.DataFrame, index: pd.MultiIndex) -> pd.DataFrame:
    """Rows ``(pid, step, key, ns)`` of ``query`` (or of a frame of such rows) as a steps x keys
    frame on ``index``."""
    frame = report.df(query) if isinstance(query, str) else query
    if frame.empty:
        return pd.DataFrame(index=index)
    wide = frame.pivot_table(index=["pid", "step"], columns="key", values="ns", aggfunc="sum", fill_value=0)
    return wide.reindex(index, fill_value=0).astype(float)


def run_data(report: Report, path: str) -> RunData:
    """Return what :mod:`.compare` compares of ``report``."""
    source = step_source(report)
    windows = step_windows(report, source)
    steady = windows[~windows["warmup"].astype(bool)].reset_index(drop=True)
    data = RunData(path, _program(report), _device(report),
                   (steady["end_ns"] - steady["start_ns"]).to_numpy(float), int(windows["warmup"].sum()),
                   source.description)
    data.memory_peak = _memory_peaks(report)
    if source.kind is None or steady.empty:
        return data
    index = pd.MultiIndex.from_frame(steady[["pid", "step"]])
    parts = _per_step(report, part_times(report, steady), index)
    if len(parts.columns):
        labels = part_labels(report)
        data.families["part"] = parts.rename(columns=labels)
    lines = _per_step(report, line_times(report, steady), index)
    if len(lines.columns):
        data.families["line"] = lines
    if not has_gpu_work(report):  # no GPU time to give layers: their own CPU time
        modules = _per_step(report, module_times(report, steady), index)
        if len(modules.columns):
            data.families["layer"] = modules
        _syncs(report, steady, data)
        return data
    ops, op_steps = ops_table(report), op_steps_table(report, source)
    data.families["kernel"] = _per_step(report, f"""
        SELECT x.pid, x.step, n.value || ' grid(' || coalesce(c.grid_x, 0) || ',' || coalesce(c.grid_y, 0) || ','
               || coalesce(c.grid_z, 0) || ') block(' || coalesce(c.block_x, 0) || ',' || coalesce(c.block_y, 0)
               || ',' || coalesce(c.block_z, 0) || ')' AS key, sum(o.end_ns - o.start_ns) AS ns
        FROM {op_steps} x JOIN {ops} o USING (op_id) JOIN kernel_config c ON c.id = o.config_id
        JOIN string n ON n.id = c.name_id
        WHERE o.kind = 'kernel' GROUP BY ALL""", index)
    if report.sql("SELECT count(*) FROM nvtx_range WHERE source = 'torch' AND kind = 'range'")[0][0]:
        data.families["layer"] = _per_step(report, f"""
            SELECT x.pid, x.step, w.row_name || coalesce(' ' || w.category, '') AS key, sum(w.d) AS ns
            FROM ({op_owners_sql(report)}) w JOIN {op_steps} x USING (op_id) GROUP BY ALL""", index)
    if report.count("torch_op"):
        data.families["operator"] = _per_step(report, f"""
            SELECT x.pid, x.step, t.name AS key, sum(o.end_ns - o.start_ns) AS ns
            FROM {op_kernels_table(report)} k JOIN {torch_ops_table(report)} t ON t.torch_op_id = k.torch_op_id
            JOIN {ops} o ON o.op_id = k.op_id JOIN {op_steps} x ON x.op_id = k.op_id GROUP BY ALL""", index)
    _syncs(report, steady, data)
    return data


def _syncs(report: Report, steady: pd.DataFrame, data: RunData) -> None:
    """Host synchronizations per step: how many, how long the host waited, and per calling line.

    A synchronization counts to the step its start falls in; each process's calls are found with
    binary searches over their sorted start times and running sums of their waits, so a run of many
    steps and many calls costs a sort, not a scan of every call per step."""
    rows = report.df("""SELECT s.pid, s.start_ns, s.end_ns - s.start_ns AS d, s.stack_id, n.value AS api
                        FROM sync_site s JOIN string n ON n.id = s.api_name_id ORDER BY s.pid, s.start_ns""")
    counts = np.zeros(len(steady))
    wait = np.zeros(len(steady))
    sites: dict[str, np.ndarray] = {}
    if not len(rows) or steady.empty:
        data.syncs, data.sync_wait, data.sync_sites = counts, wait, sites
        return
    where = _sync_locations(report, rows)
    step_pid = steady["pid"].to_numpy()
    step_start = steady["start_ns"].to_numpy()
    step_end = steady["end_ns"].to_numpy()
    waits = pd.to_numeric(rows["d"]).fillna(0).to_numpy()

    def per_step(group: pd.DataFrame, pid: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The steps of ``pid``, and per step how many calls of ``group`` started in it and their wait."""
        mine = step_pid == pid
        order = np.argsort(group["start_ns"].to_numpy(), kind="stable")
        starts = group["start_ns"].to_numpy()[order]
        summed = np.concatenate([[0], np.cumsum(waits[group.index.to_numpy()][order])])
        lo = np.searchsorted(starts, step_start[mine], side="left")
        hi = np.maximum(np.searchsorted(starts, step_end[mine], side="left"), lo)
        return mine, (hi - lo).astype(float), (summed[hi] - summed[lo]).astype(float)

    for pid, group in rows.groupby("pid", sort=True):
        mine, n, waited = per_step(group, pid)
        counts[mine] += n
        wait[mine] += waited
    first: dict[str, tuple[int, tuple[int, int, str]]] = {}  # a line's first step and call: the order of `sites`
    for (pid, stack, api), group in rows.groupby(["pid", "stack_id", "api"], sort=True):
        mine, n, _ = per_step(group, pid)
        if not n.any():
            continue
        label = f"{api} at {where.get((int(pid), int(stack)), '(no Python stack)')}"
        sites.setdefault(label, np.zeros(len(steady)))[mine] += n
        key = (int(np.flatnonzero(mine)[np.flatnonzero(n)[0]]), (int(pid), int(stack), str(api)))
        first[label] = min(first.get(label, key), key)
    data.syncs, data.sync_wait = counts, wait
    data.sync_sites = {label: sites[label] for label in sorted(sites, key=first.__getitem__)}


def _sync_locations(report: Report, rows: pd.DataFrame) -> dict[tuple[int, int], str]:
    from ...trace.stacks import stack_sites

    wanted = {(int(p), int(s)) for p, s in zip(rows["pid"], rows["stack_id"]) if s}
    return {key: site.location for key, site in stack_sites(report, wanted).items()} if wanted else {}


def _memory_peaks(report: Report) -> dict[str, float]:
    """The largest value of each GPU memory counter (PyTorch's allocator, or NVML's memory used)."""
    rows = report.sql("""SELECT name, max(value) FROM host_counter
                         WHERE name LIKE 'gpu%memory_allocated_bytes' OR name LIKE 'gpu%memory_used_bytes'
                         GROUP BY name ORDER BY name""")
    return {str(n): float(v) for n, v in rows}


def describe(data: RunData) -> dict[str, object]:
    """A JSON-ready summary of one run (for the diff's JSON output)."""
    return {"report": data.path, "program": data.program, "device": data.device, "steps": len(data.steps),
            "warmup_steps": data.warmup, "step_source": data.step_source,
            "median_step_ns": float(np.median(data.steps)) if len(data.steps) else None,
            "memory_peak_bytes": data.memory_peak or None}


def dumps(data: RunData) -> str:
    """The summary of :func:`describe` as JSON text."""
    return json.dumps(describe(data))
