"""A recorded report made into the one the default capture writes where module ranges are sampled
(capture/python/module_steps.py): in the steps that do not record them, the nested module ranges
are dropped and each outermost call's range becomes one of category ``model``; the ``ranges``
collector row says how many steps recorded them."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd

from gpuscope.analysis.steps.source import step_source, steps_table
from gpuscope.capture.python.module_steps import ModuleSteps
from gpuscope.trace.report import Report


def _step_of(ranges: pd.DataFrame, steps: pd.DataFrame) -> np.ndarray:
    """Per range, the number of the step it starts in (-1 before the first)."""
    out = np.full(len(ranges), -1, np.int64)
    for pid, own in steps.groupby("pid"):
        rows = np.flatnonzero(ranges["pid"].to_numpy() == pid)
        starts = own["start_ns"].to_numpy(np.int64)
        at = np.searchsorted(starts, ranges["start_ns"].to_numpy(np.int64)[rows], "right") - 1
        out[rows] = np.where(at >= 0, np.arange(len(starts))[np.maximum(at, 0)], -1)
    return out


def sample_module_ranges(path: Path, policy: ModuleSteps) -> tuple[int, int]:
    """Rewrite the report at ``path`` in place; return (steps, steps that kept their module ranges)."""
    with Report.open(path) as report:
        source = step_source(report)
        steps = report.df(f"SELECT pid, start_ns FROM {steps_table(report, source)} ORDER BY pid, start_ns")
    con = duckdb.connect(str(path))
    try:
        ranges = con.execute("SELECT rowid AS row, * FROM nvtx_range").df()
        forward = ranges[(ranges["source"] == "torch") & (ranges["category"] == "forward")
                         & (ranges["kind"] == "range")].sort_values(["pid", "tid", "start_ns", "end_ns"],
                                                                    ascending=[True, True, True, False])
        step = _step_of(forward, steps)
        dropped = forward[(step >= 0) & ~np.array([policy.records(int(s)) for s in step], bool)]
        outer = []
        for _, own in dropped.groupby(["pid", "tid"]):
            end = own["end_ns"].fillna(own["start_ns"]).to_numpy(np.int64)
            reach = np.concatenate([[np.iinfo(np.int64).min], np.maximum.accumulate(end)[:-1]])
            outer.append(own[own["start_ns"].to_numpy(np.int64) >= reach]["row"])
        keep = pd.concat(outer) if outer else pd.Series([], dtype="int64")
        inner = dropped[~dropped["row"].isin(keep)]["row"]
        con.register("gone", pd.DataFrame({"row": inner.to_numpy(np.int64)}))
        con.register("outermost", pd.DataFrame({"row": keep.to_numpy(np.int64)}))
        con.execute("DELETE FROM nvtx_range WHERE rowid IN (SELECT row FROM gone)")
        con.execute("UPDATE nvtx_range SET category = 'model' WHERE rowid IN (SELECT row FROM outermost)")
        n = int(len(steps))
        recorded = sum(policy.records(i) for i in range(n))
        counts = {"module_steps": n, "module_steps_recorded": recorded,
                  "module_steps_first": policy.first, "module_steps_every": policy.every}
        for pid, detail in con.execute("SELECT pid, detail FROM collector WHERE name = 'ranges'").fetchall():
            con.execute("UPDATE collector SET detail = ? WHERE name = 'ranges' AND pid = ?",
                        [json.dumps({**json.loads(detail or "{}"), **counts}), pid])
    finally:
        con.close()
    return n, recorded
