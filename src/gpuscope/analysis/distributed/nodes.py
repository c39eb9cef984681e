"""The reports of a multi-node run (one per node, ``gpuscope profile -o job-%h`` on each) read as one.

Reports are *nodes of one run* when every one of them holds ranks, of the same world size, and no
rank is in two of them. Their processes' clocks differ by host (``CLOCK_MONOTONIC`` counts from each
machine's boot), so each report's offset to the reference report (the one holding rank 0) is found,
in this order:

1. ``same host``: a report of the reference's host shares its clock (offset 0);
2. ``collectives``: a collective ends on every rank at about the same moment (no rank leaves before
   the last has arrived, and the NCCL kernels of one collective finish together), so the offset is
   the median, over the collectives both reports recorded on the GPU (matched by process group,
   kind and number, at least :data:`MIN_MATCHED`), of the difference of their end times; the spread
   given is the median distance of those differences from it. CPU collectives (gloo) are not used:
   their calls return before the transfer ends;
3. ``wall clock``: the hosts' real-time clocks as each launcher read them beside its monotonic
   clock (``meta.clock_anchor``): as good as the hosts' time synchronization (NTP: about a
   millisecond; PTP: microseconds);
4. ``none``: times are left as recorded, and the note says so.

The offsets are applied when the reports are merged (:mod:`...trace.merge`), so every analysis sees
one timeline.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ...trace.merge import MergeSource, merge, pid_shifts
from ...trace.report import Report
from .collectives import collectives, group_key
from .ranks import rank_table

MIN_MATCHED = 3


@dataclass(frozen=True)
class ClockFix:
    """The offset added to one report's times: ``offset_ns``, ``method`` (``reference``, ``same host``,
    ``collectives``, ``wall clock``, ``none``), ``spread_ns`` (its uncertainty where measured) and
    ``matched`` (the collectives it came from)."""

    offset_ns: int
    method: str
    spread_ns: int | None = None
    matched: int = 0

    def describe(self) -> str:
        """``+1.234 ms (from 40 collective ends, spread 2 µs)`` and the like."""
        value = f"{self.offset_ns / 1e6:+,.3f} ms"
        if self.method == "collectives":
            return f"{value} (from {self.matched} collective ends, spread {(self.spread_ns or 0) / 1e3:,.1f} µs)"
        if self.method == "wall clock":
            return f"{value} (from the hosts' wall clocks: as exact as their time synchronization)"
        if self.method == "none":
            return "not aligned (no GPU collectives in common and no wall-clock anchor): times as recorded"
        return f"{value} ({self.method})"


def one_run(reports: list[Report]) -> bool:
    """Whether the reports are the nodes of one run: each holds ranks, all of one world size, none twice."""
    if len(reports) < 2:
        return False
    seen: set[int] = set()
    worlds: set[int] = set()
    for report in reports:
        ranks = rank_table(report)
        own = {int(r) for r in ranks["rank"].dropna()}
        if not own or own & seen:
            return False
        seen |= own
        worlds |= {int(w) for w in ranks["world_size"].dropna()}
    return len(worlds) == 1 and len(seen) <= next(iter(worlds))


def reference_of(reports: list[Report]) -> int:
    """The index of the report that holds rank 0 (else the first)."""
    for i, report in enumerate(reports):
        if 0 in set(rank_table(report)["rank"].dropna().astype(int)):
            return i
    return 0


def _gpu_ends(report: Report) -> pd.Series:
    """Per collective (group, kind, number) recorded on the GPU: the median end over the report's ranks."""
    coll = collectives(report)
    coll = coll[coll["source"] == "kernel"]
    if not len(coll):
        return pd.Series(dtype="float64")
    coll = coll.assign(group_key=group_key(coll))
    return coll.groupby(["group_key", "kind", "call"])["end_ns"].median()


def _session_realtime(report: Report) -> int | None:
    """Real time minus session time on the report's host (from ``meta.clock_anchor`` and the
    processes' clock offsets), or None without an anchor."""
    anchor = report.meta.get("clock_anchor")
    if not isinstance(anchor, dict) or not all(isinstance(anchor.get(k), int) for k in ("realtime_ns", "monotonic_ns")):
        return None
    rows = report.sql("SELECT median(clock_offset_ns) FROM process WHERE clock_offset_ns IS NOT NULL")
    session_offset = int(rows[0][0]) if rows and rows[0][0] is not None else 0
    return int(anchor["realtime_ns"]) - int(anchor["monotonic_ns"]) - session_offset


def _host(report: Report) -> str | None:
    hosts = rank_table(report)["host"].dropna()
    return str(hosts.iloc[0]) if len(hosts) else report.meta.get("host")


def clock_offsets(reports: list[Report]) -> list[ClockFix]:
    """The offset to add to each report's times to put them on the reference report's clock."""
    ref = reference_of(reports)
    ref_ends = _gpu_ends(reports[ref])
    ref_real = _session_realtime(reports[ref])
    ref_host = _host(reports[ref])
    out = []
    for i, report in enumerate(reports):
        if i == ref:
            out.append(ClockFix(0, "reference"))
            continue
        if ref_host is not None and _host(report) == ref_host:
            out.append(ClockFix(0, "same host"))
            continue
        ends = _gpu_ends(report)
        common = ref_ends.index.intersection(ends.index)
        if len(common) >= MIN_MATCHED:
            d = ref_ends[common].to_numpy(np.float64) - ends[common].to_numpy(np.float64)
            offset = float(np.median(d))
            spread = float(np.median(np.abs(d - offset)))
            out.append(ClockFix(round(offset), "collectives", round(spread), len(common)))
            continue
        real = _session_realtime(report)
        if real is not None and ref_real is not None:
            out.append(ClockFix(real - ref_real, "wall clock"))
            continue
        out.append(ClockFix(0, "none"))
    return out


def merge_nodes(paths: list[Path], output: Path) -> list[tuple[str, str | None, ClockFix, int]]:
    """Merge the reports of ``paths`` (nodes of one run) into ``output`` with their clocks aligned;
    return per report its name, host, clock fix and pid shift."""
    reports = [Report.open(p) for p in paths]
    try:
        fixes = clock_offsets(reports)
        pids = [{int(p) for (p,) in r.sql("SELECT DISTINCT pid FROM process")} for r in reports]
        shifts = pid_shifts(pids)
        sources = [MergeSource(p, f.offset_ns, s, _host(r), f.method, f.spread_ns, dict(r.meta))
                   for p, r, f, s in zip(paths, reports, fixes, shifts)]
        hosts = [_host(r) for r in reports]
    finally:
        for r in reports:
            r.close()
    merge(sources, output)
    return [(p.name, h, f, s) for p, h, f, s in zip(paths, hosts, fixes, shifts)]
