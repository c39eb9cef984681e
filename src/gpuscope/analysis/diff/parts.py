"""Per-step quantities that explain a step's time, for ``gpuscope diff`` and the Python API: the
parts of the step, the program's lines and, without GPU work, the modules' own CPU time.

Each function takes the steps to cover (``pid``, ``step``, ``start_ns``, ``end_ns``, ``warmup``)
and returns long rows ``(pid, step, key, ns)``; a step without a row has 0 for that key.

- :func:`part_times`: the step breakdown of ``gpuscope analyze``, from the same functions: with
  GPU operations the GPU-side parts (:mod:`..diagnosis.breakdown`: GPU busy by bound class, GPU
  idle by cause), without them the CPU parts (:mod:`..diagnosis.cpu_breakdown`: data loading,
  forward, backward, optimizer, other Python) of each step. Keys are the parts' labels.
- :func:`line_times`: the sampled wall time of each program line on the main thread, library
  frames folded into the program's line that called them (as ``cpu_hotspots_lines`` shows self
  time). A sample counts to the step its time falls in.
- :func:`module_times`: the CPU time of each module's forward with its submodules' left out
  (from the PyTorch ranges of ``--trace torch``); a range counts to the step it starts in.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...trace.report import Report
from ...trace.stacks import short_path, stack_paths
from ..cpu.profile import user_path

LONG = ["pid", "step", "key", "ns"]


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object if c == "key" else "int64") for c in LONG})


def has_gpu_work(report: Report) -> bool:
    """Whether the report holds GPU operations (then the GPU-side breakdown applies)."""
    return any(report.count(t) for t in ("kernel", "memcpy", "memset", "graph_launch"))


def _torch_ranges(report: Report) -> int:
    if not report.count("nvtx_range"):
        return 0
    return int(report.sql("SELECT count(*) FROM nvtx_range WHERE source = 'torch' AND kind = 'range'")[0][0])


def part_labels(report: Report) -> dict[str, str]:
    """The parts of this report's breakdown (GPU or CPU side), by name, with their labels."""
    if has_gpu_work(report):
        from ..diagnosis.breakdown import LABELS, PARTS
    else:
        from ..diagnosis.cpu_breakdown import CPU_LABELS as LABELS, CPU_PARTS as PARTS
    return {p: LABELS[p] for p in PARTS}


def part_times(report: Report, steps: pd.DataFrame) -> pd.DataFrame:
    """Rows ``(pid, step, key, ns)``: each step's time per part of the breakdown, keyed by the
    part's name (:func:`part_labels`). Empty where the report has nothing to split a step by
    (no GPU operations and no PyTorch ranges)."""
    if not len(steps):
        return _empty()
    if has_gpu_work(report):
        from ..diagnosis.context import Context

        frames = [p.breakdown.steps.assign(pid=p.pid) for p in Context(report).processes if p.breakdown.has_steps]
        names = list(part_labels(report))
    else:
        if not _torch_ranges(report):
            return _empty()
        from ..diagnosis.cpu_breakdown import CPU_PARTS, split_steps
        from ..diagnosis.cpu_context import part_ranges

        ranges = part_ranges(report)
        frames = []
        for pid, own in steps.groupby("pid", sort=True):
            windows = own.sort_values("start_ns").assign(setup=own["warmup"].astype(bool))
            split = split_steps(windows.reset_index(drop=True),
                                ranges[ranges["pid"] == pid].reset_index(drop=True), True)
            frames.append(split.assign(pid=int(pid)))
        names = list(CPU_PARTS)
    if not frames:
        return _empty()
    wide = pd.concat(frames, ignore_index=True)
    long = wide.melt(id_vars=["pid", "step"], value_vars=names, var_name="key", value_name="ns")
    long["step"] = long["step"].astype(np.int64)
    return long[long["ns"] != 0].reset_index(drop=True)[LONG]


def _in_steps(steps: pd.DataFrame, pid: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """The row of ``steps`` each time of process ``pid`` falls in (-1 outside every step)."""
    out = np.full(len(ts), -1)
    for p, own in steps.groupby("pid", sort=True):
        own = own.sort_values("start_ns")
        starts, ends = own["start_ns"].to_numpy(np.int64), own["end_ns"].to_numpy(np.int64)
        mine = pid == p
        i = np.searchsorted(starts, ts[mine], "right") - 1
        inside = (i >= 0) & (ts[mine] < ends[np.maximum(i, 0)])
        out[np.flatnonzero(mine)] = np.where(inside, own.index.to_numpy()[np.maximum(i, 0)], -1)
    return out


def line_label(frame: tuple[str, str, int]) -> str:
    """``file:line function`` of a frame of :func:`..cpu.profile.user_path` (its name alone for
    the rows that stand for imports or stacks without Python code)."""
    func, file, line = frame
    return f"{short_path(file)}:{line} {func}" if line else func


def line_times(report: Report, steps: pd.DataFrame) -> pd.DataFrame:
    """Rows ``(pid, step, key, ns)``: per step, the sampled wall time of the main thread at each
    program line (``file:line function``). Empty without Python samples."""
    if not len(steps) or not report.count("cpu_sample"):
        return _empty()
    samples = report.df("SELECT pid, ts_ns, stack_id, weight_ns FROM cpu_sample WHERE tid = pid")
    steps = steps.reset_index(drop=True)
    row = _in_steps(steps, samples["pid"].to_numpy(np.int64), samples["ts_ns"].to_numpy(np.int64))
    samples = samples[row >= 0].assign(row=row[row >= 0])
    if not len(samples):
        return _empty()
    grouped = samples.groupby(["row", "pid", "stack_id"], sort=False)["weight_ns"].sum().reset_index()
    paths = stack_paths(report, {(int(p), int(s)) for p, s in zip(grouped["pid"], grouped["stack_id"])})
    grouped["key"] = [line_label(user_path(paths.get((int(p), int(s)), []), False)[0])
                      for p, s in zip(grouped["pid"], grouped["stack_id"])]
    grouped["step"] = steps["step"].to_numpy(np.int64)[grouped["row"].to_numpy()]
    out = grouped.groupby(["pid", "step", "key"], sort=True)["weight_ns"].sum().reset_index()
    return out.rename(columns={"weight_ns": "ns"})[LONG]


def module_times(report: Report, steps: pd.DataFrame) -> pd.DataFrame:
    """Rows ``(pid, step, key, ns)``: per step, the wall time of each module's forward on its
    thread, less the forwards of the modules it called (its own time). Empty without PyTorch
    ranges."""
    if not len(steps) or not _torch_ranges(report):
        return _empty()
    ranges = report.df(
        """SELECT r.pid, r.tid, r.start_ns, coalesce(r.end_ns, r.start_ns) AS end_ns, n.value AS key
           FROM nvtx_range r JOIN string n ON n.id = r.name_id
           WHERE r.source = 'torch' AND r.kind = 'range' AND r.category = 'forward'
           ORDER BY r.pid, r.tid, r.start_ns, r.end_ns DESC""")
    if not len(ranges):
        return _empty()
    own = (ranges["end_ns"] - ranges["start_ns"]).to_numpy(np.int64).copy()
    starts, ends = ranges["start_ns"].to_numpy(np.int64), ranges["end_ns"].to_numpy(np.int64)
    threads = list(zip(ranges["pid"].to_numpy(), ranges["tid"].to_numpy()))
    open_: list[int] = []  # the ranges enclosing the current one, innermost last (same thread)
    for i in range(len(ranges)):
        while open_ and (threads[open_[-1]] != threads[i] or ends[open_[-1]] <= starts[i]):
            open_.pop()
        if open_:
            own[open_[-1]] -= min(ends[i], ends[open_[-1]]) - starts[i]
        open_.append(i)
    steps = steps.reset_index(drop=True)
    row = _in_steps(steps, ranges["pid"].to_numpy(np.int64), starts)
    keep = row >= 0
    frame = pd.DataFrame({"pid": ranges["pid"].to_numpy(np.int64)[keep],
                          "step": steps["step"].to_numpy(np.int64)[row[keep]],
                          "key": ranges["key"].to_numpy(object)[keep], "ns": np.maximum(own[keep], 0)})
    if not len(frame):
        return _empty()
    return frame.groupby(["pid", "step", "key"], sort=True)["ns"].sum().reset_index()[LONG]
