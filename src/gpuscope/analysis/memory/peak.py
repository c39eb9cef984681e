"""Memory: the program's own peak per device and when, per step and per layer, what was live at the peak.

Reads ``memory_event`` (``--trace memory``): every kept allocation and free with the process's running
total after it (``allocated_bytes``, exact even where small events were dropped) and, for CUDA, the
caching allocator's reserved total. A layer's *peak added* is the highest total while its range was
open minus the total when it opened; what it *kept* is the total when it closed minus the same. The
live allocations at the peak are the kept allocations made before it and not freed by then.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...trace.report import Report
from ...trace.trim import capture_limited, probes_only
from ...trace.stacks import stack_sites

LIVE_AT_PEAK = 10  # largest live allocations listed at each peak


def device_label(device: int) -> str:
    """Return ``cpu`` for host memory (device -1), ``gpuN`` otherwise."""
    return "cpu" if int(device) < 0 else f"gpu{int(device)}"


@dataclass
class Series:
    """One process's totals on one device from one source (``torch-cuda``, ``torch-cpu``, ``cuda``), in event order.

    ``ts``, ``allocated`` and ``reserved`` are the rows with totals; ``events`` every row, with the
    allocations live at a capture window's start and the frees after it (kept without totals)."""

    pid: int
    device: int
    ts: np.ndarray
    allocated: np.ndarray
    reserved: np.ndarray  # -1 where not known (host memory)
    events: pd.DataFrame
    source: str = "torch-cuda"

    def peak(self) -> tuple[int, int]:
        """Return (peak allocated, its time)."""
        i = int(np.argmax(self.allocated))
        return int(self.allocated[i]), int(self.ts[i])

    def before(self, t: int) -> int:
        """Return the total just before ``t``."""
        i = int(np.searchsorted(self.ts, t, "left"))
        if i > 0:
            return int(self.allocated[i - 1])
        totals = self.events[self.events["allocated_bytes"].notna()]
        if not len(totals):
            return 0
        first = totals.iloc[0]
        delta = {"alloc": 1, "free": -1}.get(str(first["kind"]), 0) * int(first["bytes"] or 0)
        return max(0, int(self.allocated[0]) - delta)

    def window(self, start: int, end: int) -> tuple[int, int]:
        """Return (peak added, kept) over ``[start, end]`` against the total before ``start``."""
        base = self.before(start)
        i0, i1 = int(np.searchsorted(self.ts, start, "left")), int(np.searchsorted(self.ts, end, "right"))
        if i1 <= i0:
            return 0, 0
        return max(0, int(self.allocated[i0:i1].max()) - base), int(self.allocated[i1 - 1]) - base


@dataclass
class Live:
    """An allocation live at a peak."""

    pid: int
    device: int
    nbytes: int
    ts_ns: int
    layer: str
    location: str


@dataclass
class WindowMemory:
    """One series over one capture window: what was held at its start, its peak, what was allocated in it."""

    pid: int
    device: int
    source: str
    start_ns: int
    end_ns: int | None
    baseline: int  # allocated just before the window (what was live at its start)
    live_at_start: int  # kept allocations live at the start (made before it)
    peak: int
    peak_ns: int
    allocations: int  # kept allocations made inside it
    allocated: int  # their bytes


@dataclass
class MemorySummary:
    """What memory_sum shows: per device, step and layer, and the live allocations at each peak."""

    series: list[Series]
    layers: pd.DataFrame  # pid, device, source, name, calls, peak_added, kept
    steps: pd.DataFrame  # pid, device, source, step, peak, peak_added
    live: dict[tuple[int, int, str], list[Live]] = field(default_factory=dict)
    dropped: int = 0
    rss: list[tuple[int, int, int]] = field(default_factory=list)  # pid, peak bytes, time
    windows: list[WindowMemory] = field(default_factory=list)


def load_series(report: Report) -> list[Series]:
    """Return the totals of every (process, device, source) with memory events."""
    frame = report.df("""SELECT pid, device_id, coalesce(source, '') AS source, ts_ns, kind, address, bytes,
                                allocated_bytes, coalesce(reserved_bytes, -1) AS reserved_bytes, tid, stack_id
                         FROM memory_event ORDER BY pid, device_id, source, ts_ns, rowid""")
    out = []
    for (pid, device, source), rows in frame.groupby(["pid", "device_id", "source"], sort=True):
        rows = rows.reset_index(drop=True)
        totals = rows[rows["allocated_bytes"].notna()]
        if not len(totals):
            continue
        out.append(Series(int(pid), int(device), totals["ts_ns"].to_numpy(np.int64),
                          totals["allocated_bytes"].to_numpy(np.int64), totals["reserved_bytes"].to_numpy(np.int64),
                          rows, str(source)))
    return out


def peak_bytes(report: Report) -> dict[tuple[int, int], int]:
    """Return the program's own peak allocated bytes by (pid, device); empty without memory events."""
    return {(int(p), int(d)): int(v) for p, d, v in report.sql(
        "SELECT pid, device_id, max(allocated_bytes) FROM memory_event GROUP BY ALL")}


def layer_ranges(report: Report) -> pd.DataFrame:
    """Return the ended ranges (no step ranges) of every process: pid, tid, start_ns, end_ns, name."""
    return report.df("""SELECT r.pid, r.tid, r.start_ns, r.end_ns, n.value AS name FROM nvtx_range r
                        JOIN string n ON n.id = r.name_id
                        WHERE r.kind = 'range' AND r.end_ns IS NOT NULL AND coalesce(r.category, '') <> 'step'
                        ORDER BY r.pid, r.start_ns""")


def _layers(series: list[Series], ranges: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for s in series:
        mine = ranges[ranges["pid"] == s.pid]
        for name, starts, ends in zip(mine["name"], mine["start_ns"], mine["end_ns"]):
            added, kept = s.window(int(starts), int(ends))
            rows.append((s.pid, s.device, s.source, name, added, kept))
    frame = pd.DataFrame(rows, columns=["pid", "device", "source", "name", "peak_added", "kept"])
    frame = frame[(frame["peak_added"] > 0) | (frame["kept"] != 0)]
    if frame.empty:
        return frame.assign(calls=pd.Series(dtype="int64"))
    return (frame.groupby(["pid", "device", "source", "name"], as_index=False)
            .agg(calls=("kept", "size"), peak_added=("peak_added", "max"), kept=("kept", "mean"))
            .sort_values(["peak_added", "name"], ascending=[False, True]))


def _steps(report: Report, series: list[Series]) -> pd.DataFrame:
    from ..steps.source import step_windows  # noqa: PLC0415

    windows = step_windows(report)
    rows = []
    for s in series:
        for step, start, end in windows.loc[windows["pid"] == s.pid, ["step", "start_ns", "end_ns"]].itertuples(
                index=False):
            added, _ = s.window(int(start), int(end))
            rows.append((s.pid, s.device, s.source, int(step), s.before(int(start)) + added, added))
    return pd.DataFrame(rows, columns=["pid", "device", "source", "step", "peak", "peak_added"])


def live_at(s: Series, t: int) -> pd.DataFrame:
    """Return the kept allocations of ``s`` made at or before ``t`` and not freed by then (with those live at a
    capture window's start)."""
    ev = s.events[s.events["ts_ns"] <= t]
    live: dict[int, int] = {}
    for i, kind, address in zip(ev.index, ev["kind"], ev["address"]):
        if kind in ("alloc", "live"):
            live[int(address)] = i
        elif kind == "free":
            live.pop(int(address), None)
    return ev.loc[sorted(live.values())]


def _innermost(ranges: pd.DataFrame, pid: int, tid: object, t: int) -> str:
    mine = ranges[(ranges["pid"] == pid) & (ranges["start_ns"] <= t) & (ranges["end_ns"] >= t)]
    if tid is not None and not pd.isna(tid) and (mine["tid"] == tid).any():
        mine = mine[mine["tid"] == tid]
    return str(mine.iloc[-1]["name"]) if len(mine) else "(no range)"


def live_allocations(report: Report, s: Series, t: int, ranges: pd.DataFrame, n: int = LIVE_AT_PEAK) -> list[Live]:
    """Return the ``n`` largest allocations of ``s`` live at ``t``, with their layer and program line."""
    live = live_at(s, t).sort_values(["bytes", "ts_ns"], ascending=[False, True]).head(n)
    stacks = {(s.pid, int(v)) for v in live["stack_id"].dropna()}
    sites = stack_sites(report, stacks) if stacks else {}
    out = []
    for row in live.itertuples(index=False):
        site = sites.get((s.pid, int(row.stack_id))) if not pd.isna(row.stack_id) else None
        out.append(Live(s.pid, s.device, int(row.bytes), int(row.ts_ns),
                        _innermost(ranges, s.pid, row.tid, int(row.ts_ns)), site.location if site else ""))
    return out


def window_memory(report: Report, series: list[Series]) -> list[WindowMemory]:
    """Return, for each capture window and each series of its process, the baseline, peak and allocations."""
    out: list[WindowMemory] = []
    if not capture_limited(report.meta) and probes_only(report.con):
        return out  # a run recorded whole but for the overhead probe's steps: no windows to show
    windows = report.sql("SELECT pid, start_ns, end_ns FROM capture_window ORDER BY pid, start_ns")
    for pid, start, end in windows:
        for s in (x for x in series if x.pid == int(pid)):
            start, stop = int(start), int(end) if end is not None else int(np.iinfo(np.int64).max)
            base = s.before(start)
            i0, i1 = int(np.searchsorted(s.ts, start, "left")), int(np.searchsorted(s.ts, stop, "right"))
            peak, peak_ns = base, start
            if i1 > i0:
                j = i0 + int(np.argmax(s.allocated[i0:i1]))
                if int(s.allocated[j]) > base:
                    peak, peak_ns = int(s.allocated[j]), int(s.ts[j])
            ev = s.events
            inside = ev[(ev["kind"] == "alloc") & (ev["ts_ns"] >= start) & (ev["ts_ns"] <= stop)]
            out.append(WindowMemory(s.pid, s.device, s.source, start, None if end is None else int(end), base,
                                    len(live_at(s, start - 1)), peak, peak_ns, len(inside),
                                    int(inside["bytes"].fillna(0).sum())))
    return out


def memory_summary(report: Report) -> MemorySummary | None:
    """Return the memory summary, or None when the report has no memory events."""
    series = load_series(report)
    if not series:
        return None
    ranges = layer_ranges(report)
    live = {(s.pid, s.device, s.source): live_allocations(report, s, s.peak()[1], ranges) for s in series}
    dropped = int(report.sql("SELECT coalesce(sum(count), 0) FROM dropped WHERE source = 'memory'")[0][0])
    rss = [(int(p), int(v), int(t)) for p, v, t in report.sql(
        """SELECT pid, max(value), arg_max(ts_ns, value) FROM host_counter
           WHERE name = 'process.rss_bytes' AND pid IS NOT NULL GROUP BY pid ORDER BY pid""")]
    return MemorySummary(series, _layers(series, ranges), _steps(report, series), live, dropped, rss,
                         window_memory(report, series))
