"""What the CPU-side rules share: per process its windows, breakdown, main-thread samples (with
their part, window and folded stack), PyTorch operators, and the host's cores and load; computed
once, on first use."""

from __future__ import annotations

import json

from dataclasses import dataclass
from functools import cached_property
from typing import ClassVar

import numpy as np
import pandas as pd

from ...trace.report import Report
from .finding import MIN_SHARE
from .side import SideContext
from .cpu_breakdown import CATEGORY_PART, CpuBreakdown, part_at, split_steps
from .cpu_frames import StackInfo, load_stacks
from .cpu_steps import CpuSteps, load_steps, run_window, whole_run
from .step_means import PerStep


@dataclass
class CpuProcess(PerStep):
    """One process: its windows and breakdown, and its main thread's samples, ranges and operators.

    ``samples``: ``ts_ns``, ``weight_ns``, ``stack_id``, ``part`` (index of ``CPU_PARTS``),
    ``window`` (row of ``windows``, -1 outside them), ``steady``, ``in_op`` (inside a PyTorch
    operator); ``ranges``: ``start_ns``, ``end_ns``, ``part``, ``category``; ``ops``: ``start_ns``,
    ``end_ns``, ``name``, ``shapes`` of the main thread's operators.
    """

    pid: int
    windows: pd.DataFrame
    breakdown: CpuBreakdown
    samples: pd.DataFrame
    ranges: pd.DataFrame
    ops: pd.DataFrame

    WHOLE: ClassVar[str] = "the run"  # a run without steps is one window after its start-up

    @cached_property
    def steady_wall_ns(self) -> int:
        """The wall time of all steady windows together."""
        return int((self.steady_windows["end_ns"] - self.steady_windows["start_ns"]).sum())


class CpuContext(SideContext):
    """The report and everything the rules reading its CPU side share."""

    side = "cpu"  # the side of the report the rules read here (rule.CPU)

    def __init__(self, report: Report, min_share: float = MIN_SHARE) -> None:
        super().__init__(report, min_share)
        self.startup: dict[int, dict[str, object]] = {}  # per process, its start-up (rule startup)

    @cached_property
    def counts(self) -> dict[str, int]:
        r = self.report
        return {
            "cpu_samples": r.count("cpu_sample"),
            "torch": int(r.sql("SELECT count(*) FROM nvtx_range WHERE source = 'torch' AND kind = 'range'")[0][0])
            if r.count("nvtx_range") else 0,
            "torch_ops": r.count("torch_op"),
            "host": int(r.sql("SELECT count(*) FROM host_counter WHERE name LIKE 'cpu%.util_percent'")[0][0]),
        }

    def missing(self, need: str) -> str | None:
        """Return, in one line, why data ``need`` is not in the report; None when it is."""
        hints = self.report.not_recorded()
        what = {"cpu_samples": ("cpu", "Python stack samples", "--trace cpu"),
                "torch": ("torch", "PyTorch ranges", "--trace torch, when the program uses PyTorch"),
                "torch_ops": ("torch_ops", "PyTorch operators", "--trace torch-ops"),
                "host": ("host", "host counters", "--trace host")}
        if need == "steps" and self.steps.source is None:
            return ("no steps in this report: mark them with gpuscope.step(), or record PyTorch's optimizer "
                    "steps with --trace torch")
        if need in what and not self.counts[need]:
            key, label, flag = what[need]
            hint = hints.get(key)
            return f"no {label} in this report: {hint}" if hint else f"no {label} were recorded ({flag})"
        return None

    @cached_property
    def steps(self) -> CpuSteps:
        return load_steps(self.report)

    @cached_property
    def cores(self) -> int:
        """Cores of the machine (from the host counters; 0 when not recorded)."""
        return self.counts["host"] and int(self.report.sql(
            "SELECT count(DISTINCT name) FROM host_counter WHERE name LIKE 'cpu%.util_percent'")[0][0])

    @cached_property
    def host(self) -> pd.DataFrame:
        """Per reading of the host counters: ``ts_ns``, ``machine`` (cores busy, all programs),
        ``program`` (cores busy in the profiled program's processes, per pid as ``cpu_<pid>``)."""
        frame = self.report.df(
            """SELECT ts_ns, sum(value) FILTER (WHERE name LIKE 'cpu%.util_percent') / 100 AS machine,
                      sum(value) FILTER (WHERE name = 'process.cpu_percent') / 100 AS program
               FROM host_counter GROUP BY ts_ns ORDER BY ts_ns""")
        own = self.report.df("SELECT ts_ns, pid, value / 100 AS cores FROM host_counter "
                             "WHERE name = 'process.cpu_percent'")
        if len(own):
            wide = own.pivot_table(index="ts_ns", columns="pid", values="cores", aggfunc="sum")
            wide.columns = [f"cpu_{int(c)}" for c in wide.columns]
            frame = frame.merge(wide.reset_index(), on="ts_ns", how="left")
        return frame.fillna(0.0)

    def profiler_cores(self, pid: int) -> float:
        """The cores gpuscope's own threads in the process kept busy on average (its sampler, its
        flush thread: they are not there without the profiler), from their CPU times."""
        row = self.report.sql(
            """SELECT sum(cpu) / nullif(max(wall), 0) FROM (
                   SELECT max(cpu_ns) - min(cpu_ns) AS cpu, max(ts_ns) - min(ts_ns) AS wall FROM thread_time
                   WHERE pid = ? AND name LIKE 'gpuscope-%' GROUP BY tid)""", [pid])
        return float(row[0][0] or 0.0) if row else 0.0

    def loader_cpu_share(self, pid: int) -> float | None:
        """The share of its DataLoader calls' wall time that process ``pid``'s loading thread ran on a
        core (the PyTorch hooks time each call both ways); None where no call was timed."""
        for (detail,) in self.report.sql("SELECT detail FROM collector WHERE name = 'ranges' AND pid = ?", [pid]):
            try:
                counts = json.loads(detail or "{}")
                wall = float(counts.get("dataloader_wall_ns") or 0)
                cpu = float(counts.get("dataloader_cpu_ns") or 0)
            except (ValueError, TypeError, AttributeError):
                continue
            if wall > 0:
                return min(max(cpu / wall, 0.0), 1.0)
        return None

    def host_load(self, p: CpuProcess) -> tuple[float, float] | None:
        """The mean cores busy in the process (gpuscope's own threads left out) and in other
        programs (the profiler's writer among them) over its steady windows; None without three
        host readings inside them."""
        host = self.host
        col = f"cpu_{p.pid}"
        if not len(host) or col not in host:
            return None
        t = host["ts_ns"].to_numpy(np.int64)
        w = p.steady_windows
        ws, we = w["start_ns"].to_numpy(np.int64), w["end_ns"].to_numpy(np.int64)
        i = np.searchsorted(ws, t, "right") - 1
        keep = (i >= 0) & (t < we[np.maximum(i, 0)])
        keep[0] = False  # the first reading only sets the baseline
        if keep.sum() < 3:
            return None
        other = np.maximum(host["machine"].to_numpy(float) - host["program"].to_numpy(float), 0.0)
        own = float(host[col].to_numpy(float)[keep].mean()) - self.profiler_cores(p.pid)
        return max(own, 0.0), float(other[keep].mean())

    def stack(self, pid: int, stack_id: int) -> StackInfo:
        """The folded stack of one sample."""
        return self._stacks[(pid, int(stack_id))]

    @cached_property
    def _all_samples(self) -> pd.DataFrame:
        if not self.counts["cpu_samples"]:
            return pd.DataFrame(columns=["ts_ns", "pid", "stack_id", "weight_ns"])
        return self.report.df("SELECT ts_ns, pid, stack_id, weight_ns FROM cpu_sample WHERE tid = pid ORDER BY ts_ns")

    @cached_property
    def _stacks(self) -> dict[tuple[int, int], StackInfo]:
        s = self._all_samples
        return load_stacks(self.report, {(int(p), int(i)) for p, i in zip(s["pid"], s["stack_id"])})

    @cached_property
    def _ranges(self) -> pd.DataFrame:
        return part_ranges(self.report) if self.counts["torch"] else part_ranges_empty()

    @cached_property
    def processes(self) -> list[CpuProcess]:
        """The processes to analyze: those with steps; else those with PyTorch ranges; else the first
        process with samples of its main thread."""
        stepped = sorted(set(self.steps.frame["pid"].astype(int)))
        pids = stepped or sorted(set(self._ranges["pid"].astype(int)))
        if not pids and len(self._all_samples):
            pids = [int(self._all_samples["pid"].iloc[0])]
        return [self._process(pid) for pid in pids]

    def _process(self, pid: int) -> CpuProcess:
        samples = self._all_samples[self._all_samples["pid"] == pid].reset_index(drop=True)
        infos = [self.stack(pid, s) for s in samples["stack_id"]]
        importing = np.array([i.importing for i in infos], bool)
        user = np.array([i.user is not None for i in infos], bool)
        ranges = self._ranges[self._ranges["pid"] == pid].reset_index(drop=True)
        row = self.report.sql("SELECT min(start_ns), max(end_ns) FROM process WHERE pid = ?", [pid])
        p_start, p_end = (int(row[0][0] or 0), int(row[0][1] or 0)) if row else (0, 0)
        windows = self.steps.frame[self.steps.frame["pid"] == pid].sort_values("start_ns").reset_index(drop=True)
        has_steps = bool(len(windows))
        if not has_steps:
            start, end, _ = run_window(samples, user, importing, ranges, p_start, p_end)
            windows = whole_run(pid, start, end)
        first = int(windows["start_ns"].iloc[0])
        ts = samples["ts_ns"].to_numpy(np.int64)
        import_ns = float(samples["weight_ns"].to_numpy(np.int64)[importing & (ts < first)].sum())
        steps = split_steps(windows, ranges, has_steps)
        breakdown = CpuBreakdown(pid, has_steps, steps, max(0, first - p_start) if p_start else 0, import_ns)
        ops = self._ops(pid)
        samples = carry_back(samples, ranges, ops)
        ts = samples["ts_ns"].to_numpy(np.int64)
        ws, we = windows["start_ns"].to_numpy(np.int64), windows["end_ns"].to_numpy(np.int64)
        w = np.searchsorted(ws, ts, "right") - 1
        w = np.where((w >= 0) & (ts < we[np.maximum(w, 0)]), w, -1)
        setup = windows["setup"].to_numpy(bool)
        steady_rows = ~setup if (~setup).any() else np.ones(len(setup), bool)
        in_op = _inside(ops, ts)
        sampled = self.op_windows(pid)
        if sampled is not None:  # operators of sample windows only: outside them, PyTorch's innermost frames
            unknown = ~_inside(sampled, ts)
            in_torch = np.array([self.stack(pid, int(i)).in_torch for i in samples["stack_id"]], bool)
            in_op |= unknown & in_torch
        samples = samples.assign(part=part_at(ts, ranges), window=w,
                                 steady=(w >= 0) & steady_rows[np.maximum(w, 0)], in_op=in_op)
        return CpuProcess(pid, windows, breakdown, samples, ranges, ops)

    def op_windows(self, pid: int) -> pd.DataFrame | None:
        """The sample windows of ``--trace torch-shapes`` (``start_ns``, ``end_ns``), sorted; None where
        operators were recorded throughout (or not at all)."""
        if not self.counts["torch_ops"] or not self.report.count("torch_op_window"):
            return None
        return self.report.df(
            """SELECT start_ns, coalesce(end_ns, start_ns) AS end_ns FROM torch_op_window WHERE pid = ?
               ORDER BY start_ns""", [pid])

    def _ops(self, pid: int) -> pd.DataFrame:
        if not self.counts["torch_ops"]:
            return pd.DataFrame(columns=["start_ns", "end_ns", "name", "shapes"])
        return self.report.df(
            """SELECT o.start_ns, o.end_ns, n.value AS name, o.shapes FROM torch_op o
               JOIN string n ON n.id = o.name_id WHERE o.pid = ? AND o.tid = o.pid ORDER BY o.start_ns""", [pid])


def _inside(ops: pd.DataFrame, ts: np.ndarray) -> np.ndarray:
    """Whether each time falls inside one of the (non-nesting, sorted) operator calls."""
    if not len(ops):
        return np.zeros(len(ts), bool)
    s, e = ops["start_ns"].to_numpy(np.int64), ops["end_ns"].to_numpy(np.int64)
    reach = np.maximum.accumulate(e)
    i = np.searchsorted(s, ts, "right") - 1
    return (i >= 0) & (ts < reach[np.maximum(i, 0)])


def carry_back(samples: pd.DataFrame, ranges: pd.DataFrame, ops: pd.DataFrame) -> pd.DataFrame:
    """Split each sample whose time (since its thread's previous sample) spans the start or end of a
    PyTorch range or operator: the time before the first such boundary goes to the previous
    sample's stack (the thread was still there until something changed), as a sample of its own
    just before the boundary.

    A sample stands for the time since the thread's previous one, at the stack where the sampler
    found it. The sampler needs the GIL, so it often finds a thread that ran Python for a while
    only at its next call that releases the GIL, an operator: without the split, the Python before
    it would count to the operator's line and part. The rows made so have ``carried`` True: their
    time is known, their stack is a guess (the previous sample's).
    """
    samples = samples.assign(carried=False)
    if len(samples) < 2 or not (len(ranges) or len(ops)):
        return samples
    bounds = np.sort(np.concatenate([ranges["start_ns"].to_numpy(np.int64), ranges["end_ns"].to_numpy(np.int64),
                                     ops["start_ns"].to_numpy(np.int64), ops["end_ns"].to_numpy(np.int64)]))
    ts = samples["ts_ns"].to_numpy(np.int64)
    w = samples["weight_ns"].to_numpy(np.int64)
    i = np.searchsorted(bounds, ts - w, "right")  # the first boundary after the previous sample
    b = bounds[np.minimum(i, len(bounds) - 1)]
    split = (i < len(bounds)) & (b > ts - w) & (b < ts)
    split[0] = False  # no previous sample to carry to
    idx = np.flatnonzero(split)
    if not len(idx):
        return samples
    carried = pd.DataFrame({"ts_ns": b[idx] - 1, "pid": samples["pid"].to_numpy()[idx],
                            "stack_id": samples["stack_id"].to_numpy()[idx - 1],
                            "weight_ns": b[idx] - (ts[idx] - w[idx]), "carried": True})
    out = samples.copy()
    out.loc[idx, "weight_ns"] = ts[idx] - b[idx]
    return pd.concat([out, carried], ignore_index=True).sort_values("ts_ns", kind="stable").reset_index(drop=True)


def part_ranges_empty() -> pd.DataFrame:
    """The frame of :func:`part_ranges` without rows."""
    return pd.DataFrame(columns=["pid", "start_ns", "end_ns", "category", "part"])


def part_ranges(report: Report) -> pd.DataFrame:
    """The PyTorch ranges that make the CPU parts of a step (``pid``, ``start_ns``, ``end_ns``,
    ``category``, ``part``: an index of ``CPU_PARTS``), of each process's main thread (of all its
    threads where the main thread made none), by start time."""
    frame = report.df(
        """SELECT r.pid, r.tid, r.start_ns, coalesce(r.end_ns, p.end_ns, r.start_ns) AS end_ns, r.category
                  FROM nvtx_range r LEFT JOIN process p USING (pid)
                  WHERE r.source = 'torch' AND r.kind = 'range' ORDER BY r.start_ns""")
    frame = frame[frame["category"].isin(list(CATEGORY_PART))].copy()
    main = frame[frame["tid"] == frame["pid"]]
    # a process whose main thread made no range (a program that trains on another thread): all threads
    frame = pd.concat([main, frame[~frame["pid"].isin(main["pid"].unique())]])
    frame["part"] = frame["category"].map(CATEGORY_PART).astype(np.int64)
    return frame.drop(columns="tid").sort_values("start_ns").reset_index(drop=True)

