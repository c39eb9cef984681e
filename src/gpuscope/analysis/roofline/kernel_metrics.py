"""The ``kernel_metrics`` report of ``gpuscope kernels``: Nsight Compute's metrics per kernel name
(:mod:`.work.measured` reads them per launch), beside the work model's FLOPs, and which launches to
profile with ncu.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ...errors import GpuscopeError
from ...trace.report import Report
from ..table import Column, Table
from .work.kernels import kernel_work
from .work.measured import LATENCY_PCT, dominant_precision, launch_metrics


def kernel_metrics(report: Report) -> pd.DataFrame:
    """Return the measured metrics per kernel name (means over its profiled launches), with
    ``profiled`` (launches) and ``model_flops`` (the work model's FLOPs per launch of the same
    launches, NaN without one). Empty without metrics."""
    per_launch = launch_metrics(report)
    if per_launch.empty:
        return per_launch
    work = kernel_work(report)
    if not work.empty:
        work = work.sort_values(["name", "start_ns"])
        work["launch"] = work.groupby("name").cumcount()
        work["model_flops"] = work["flops"].where(work["source"] == "model")
        per_launch = per_launch.merge(work[["name", "launch", "model_flops"]], on=["name", "launch"], how="left")
    else:
        per_launch["model_flops"] = np.nan
    numeric = [c for c in per_launch.columns if c not in ("name", "launch", "ncu_id", "bound", "occupancy_limiter",
                                                          "tensor_counted")]
    g = per_launch.groupby("name", sort=False)
    out = g[numeric].mean()
    out["profiled"] = g.size()
    out["bound"] = g["bound"].agg(lambda s: s.mode().iloc[0])
    out["occupancy_limiter"] = g["occupancy_limiter"].agg(lambda s: s.mode().iloc[0] if s.notna().any() else None)
    out["tensor_counted"] = g["tensor_counted"].any()
    return out.reset_index()


COLUMNS = [
    Column("Total Time", "ns"), Column("Instances", "count"), Column("Profiled", "count"), Column("Duration", "ns"),
    Column("SM", "percent"), Column("Memory", "percent"), Column("Occupancy", "percent"), Column("DRAM", "bytes"),
    Column("L1 Hit", "percent"), Column("L2 Hit", "percent"), Column("FLOPs", "flops"), Column("Model FLOPs", "flops"),
    Column("Precision"), Column("Tensor", "percent"), Column("Registers", "count"), Column("Bound"),
    Column("Occupancy Limit"), Column("Name"),
]  # fmt: skip


def _v(x: object) -> object:
    if x is None or (isinstance(x, float) and x != x):
        return None
    return x.item() if isinstance(x, np.generic) else x


def kernel_metrics_table(report: Report) -> Table:
    """Per kernel name with ncu metrics: the report's total time and instances, then the means of
    its profiled launches (duration, throughputs, occupancy, DRAM bytes, hit rates, FLOPs measured
    and modelled, precision mix, tensor-pipe use, registers, bound, occupancy limiter)."""
    name, title = "kernel_metrics", "Kernel Metrics (Nsight Compute)"
    df = kernel_metrics(report)
    if df.empty:
        return Table(name, title, COLUMNS, [], ["No kernel metrics in this report: gpuscope kernels REPORT --ncu "
                                                "measures them (or --import FILE.csv reads ncu's CSV)."])
    totals = dict(((n, (t, c)) for n, t, c in report.sql(
        "SELECT s.value, sum(k.end_ns - k.start_ns), count(*) FROM kernel k JOIN kernel_config c ON c.id = k.config_id "
        "JOIN string s ON s.id = c.name_id GROUP BY s.value")))
    rows = []
    for r in df.itertuples(index=False):
        total, count = totals.get(r.name, (None, None))
        rows.append(tuple(_v(v) for v in (
            total, count, r.profiled, r.duration_ns, r.sm_pct, r.memory_pct, r.occupancy_pct, r.dram_bytes,
            r.l1_hit_pct, r.l2_hit_pct, r.flops, r.model_flops, dominant_precision(pd.Series(r._asdict())),
            r.tensor_pct, r.registers, r.bound, r.occupancy_limiter, r.name)))
    rows.sort(key=lambda row: (-float(row[0] or 0), str(row[-1])))  # type: ignore[arg-type]
    notes = [f"Means over the profiled launches; Bound: latency when neither SM nor memory throughput reaches "
             f"{LATENCY_PCT:.0f}% of peak. Model FLOPs: the work model's, for the same launches."]
    return Table(name, title, COLUMNS, rows, notes)


def profile_selection(report: Report, top: int | None, regex: str | None, per_kernel: int) -> tuple[str, str, int]:
    """Return what ncu should profile to see ``per_kernel`` launches of each chosen kernel: the
    regex, the name base it applies to (``mangled`` or ``demangled``), and the launch count.

    Kernels are chosen by ``regex`` (on demangled names) or as the ``top`` kernels by total time.
    The count is the number of matching launches, in the report's order, until every chosen kernel
    has had ``per_kernel`` of them (a run that repeats the report's launches then covers them all).
    """
    launches = report.sql(
        "SELECT n.value, m.value FROM kernel k JOIN kernel_config c ON c.id = k.config_id "
        "JOIN string n ON n.id = c.name_id JOIN string m ON m.id = c.mangled_id ORDER BY k.start_ns"
    )
    if regex is not None:
        try:
            pattern = re.compile(regex)
        except re.error as exc:
            raise GpuscopeError(f"bad kernel regex {regex!r}: {exc}") from None
        chosen = {m for n, m in launches if pattern.search(n)}
        expr, base = regex, "demangled"
    else:
        totals = report.sql(
            "SELECT m.value FROM kernel k JOIN kernel_config c ON c.id = k.config_id "
            "JOIN string m ON m.id = c.mangled_id GROUP BY m.value "
            f"ORDER BY sum(k.end_ns - k.start_ns) DESC, m.value LIMIT {int(top or 10)}"
        )
        chosen = {m for (m,) in totals}
        expr, base = "^(" + "|".join(re.escape(m) for m in sorted(chosen)) + ")$", "mangled"
    if not chosen:
        raise GpuscopeError("no kernel of the report matches the selection" if regex is not None
                            else "the report has no kernels to profile")
    seen: dict[str, int] = {}
    count = 0
    for _, mangled in launches:
        if mangled in chosen:
            count += 1
            seen[mangled] = seen.get(mangled, 0) + 1
            if len(seen) == len(chosen) and min(seen.values()) >= per_kernel:
                break
    return expr, base, count
