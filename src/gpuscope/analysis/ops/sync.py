"""Host synchronization: where the program made the CPU wait for the GPU, by Python source line.

Each ``sync_site`` row is one synchronizing CUDA call (stream, device, context or event
synchronization, or a copy that blocks the host) with the host time it took and the Python stack
that made it. A site is shown at its *program line*: the innermost frame of the stack outside
installed libraries and the standard library (``loss.item()`` in the training script, not the
line inside torch that made the call), with the innermost frame beside it.
"""

from __future__ import annotations

from collections import defaultdict

import pandas as pd

from ...trace.report import Report
from ...trace.stacks import is_library, stack_sites  # noqa: F401  (is_library: part of this module's API)
from ..table import Column, Table

def sync_site_frame(report: Report) -> pd.DataFrame:
    """Return every synchronization site: start_ns, end_ns, pid, tid, api, correlation_id, wait_ns,
    location (program line), function, innermost (frame that made the call)."""
    frame = report.df(
        """SELECT s.start_ns, s.end_ns, s.pid, s.tid, n.value AS api, s.correlation_id, s.stack_id,
                  s.end_ns - s.start_ns AS wait_ns
           FROM sync_site s JOIN string n ON n.id = s.api_name_id ORDER BY s.start_ns"""
    )
    sites = stack_sites(report, set(zip(frame["pid"].tolist(), frame["stack_id"].tolist())))
    keys = list(zip(frame["pid"].tolist(), frame["stack_id"].tolist()))
    frame["location"] = [sites[k].location for k in keys]
    frame["function"] = [sites[k].function for k in keys]
    frame["innermost"] = [sites[k].innermost for k in keys]
    return frame.drop(columns=["stack_id"])


def _missing(report: Report) -> list[str]:
    hint = report.not_recorded().get("cuda")
    if hint:
        return [f"No synchronization sites in this report: {hint}."]
    return ["No synchronizing CUDA calls were recorded (none made, or CUPTI's callbacks were not available)."]


def sync_sum(report: Report) -> Table:
    """Per program line: how often the host waited for the GPU there and for how long in total."""
    cols = [Column("Time", "percent"), Column("Total Wait", "ns"), Column("Calls", "count"),
            Column("Avg", "ns"), Column("Max", "ns"), Column("API"), Column("Function"), Column("Location"),
            Column("Called From")]
    if not report.count("sync_site"):
        return Table("sync_sum", "Host Synchronization by Source Line", cols, [], _missing(report))
    f = sync_site_frame(report)
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    apis: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    inner: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for loc, func, api, wait, innermost in zip(f["location"], f["function"], f["api"], f["wait_ns"], f["innermost"]):
        groups[(loc, func)].append(int(wait))
        apis[(loc, func)][api] += 1
        inner[(loc, func)][innermost] += 1
    total = int(f["wait_ns"].sum())
    rows = []
    for key, waits in groups.items():
        s = sum(waits)
        api = ", ".join(sorted(apis[key], key=lambda a: -apis[key][a]))
        called = max(inner[key], key=lambda k: inner[key][k])
        rows.append((100.0 * s / total if total else 0.0, s, len(waits), s // len(waits), max(waits),
                     api, key[1], key[0], called if called.split(" ")[0] != key[0] else ""))
    rows.sort(key=lambda r: (-r[1], r[7]))
    notes = ["Host time spent in synchronizing CUDA calls (stream/device/event synchronize, blocking copies), "
             "by the program line that made them; Called From is the innermost frame when it is in a library."]
    return Table("sync_sum", "Host Synchronization by Source Line", cols, rows, notes)


REPORTS = {"sync_sum": sync_sum}
