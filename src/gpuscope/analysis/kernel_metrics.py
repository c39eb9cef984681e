"""Measured kernel metrics (Nsight Compute, stored as ``kernel_metric`` by ``gpuscope kernels``).

Per profiled launch, from ncu's metrics:

- FLOPs per precision: CUDA-core instructions counted per thread (an FMA is two operations:
  ``2·ffma + fadd + fmul`` for FP32, ``dfma``/``dadd``/``dmul`` for FP64, ``hfma``/``hadd``/``hmul``
  for FP16) plus the tensor-core operations of ``sm__ops_path_tensor_src_<precision>*`` (each
  counted as TENSOR_FLOPS_PER_OP FLOPs);
- SM and memory throughput as % of peak, achieved occupancy, DRAM bytes (read + written), L1 and
  L2 hit rates, tensor-pipe utilization (the busiest tensor pipe), registers per thread;
- bound: ``latency`` when neither SM nor memory throughput reaches LATENCY_PCT of peak, else
  whichever is higher; occupancy limiter: the launch resource (registers, shared memory, warps,
  blocks) that allows the fewest blocks per SM.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..errors import GpuscopeError
from ..trace.report import Report
from .table import Column, Table

TENSOR_FLOPS_PER_OP = 1.0  # ncu counts tensor-path "math ops": multiply and add separately
LATENCY_PCT = 60.0
_TENSOR = re.compile(r"^sm__ops_path_tensor_src_([a-z0-9]+?)(?:_dst_[a-z0-9]+)?\.sum$")
_SIMT = {
    "fp32": ("ffma", "fadd", "fmul"), "fp64": ("dfma", "dadd", "dmul"), "fp16": ("hfma", "hadd", "hmul"),
}  # fmt: skip
_LIMITS = {"registers": "registers", "shared_mem": "shared memory", "warps": "warps", "blocks": "blocks"}
PRECISIONS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")


def has_metrics(report: Report) -> bool:
    """Return whether the report holds ncu metrics (a ``kernel_metric`` table with rows)."""
    found = report.sql("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'kernel_metric'")[0][0]
    return bool(found) and bool(report.count("kernel_metric"))


def _col(df: pd.DataFrame, name: str) -> pd.Series:
    return df[name] if name in df else pd.Series(np.nan, index=df.index)


def launch_metrics(report: Report) -> pd.DataFrame:
    """Return one row per profiled launch: ``name``, ``launch``, ``ncu_id``, ``duration_ns``,
    ``sm_pct``, ``memory_pct``, ``occupancy_pct``, ``dram_bytes``, ``l1_hit_pct``, ``l2_hit_pct``,
    ``tensor_pct``, ``registers``, ``flops_<precision>`` (fp64, fp32, tf32, bf16, fp16, fp8),
    ``flops``, ``tensor_flops``, ``tensor_counted`` (the tensor counters were read), ``bound``,
    ``occupancy_limiter``. Empty without metrics."""
    if not has_metrics(report):
        return pd.DataFrame()
    raw = report.df(
        "SELECT n.value AS name, m.launch, m.ncu_id, m.metric, m.value FROM kernel_metric m "
        "JOIN string n ON n.id = m.name_id"
    )
    wide = raw.pivot_table(index=["name", "launch", "ncu_id"], columns="metric", values="value",
                           aggfunc="first").reset_index()
    out = wide[["name", "launch", "ncu_id"]].copy()
    out["duration_ns"] = _col(wide, "gpu__time_duration.sum")
    out["sm_pct"] = _col(wide, "sm__throughput.avg.pct_of_peak_sustained_elapsed")
    out["memory_pct"] = _col(wide, "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed")
    out["occupancy_pct"] = _col(wide, "sm__warps_active.avg.pct_of_peak_sustained_active")
    out["dram_bytes"] = _col(wide, "dram__bytes.sum").fillna(
        _col(wide, "dram__bytes_read.sum") + _col(wide, "dram__bytes_write.sum"))
    out["l1_hit_pct"] = _col(wide, "l1tex__t_sector_hit_rate.pct")
    out["l2_hit_pct"] = _col(wide, "lts__t_sector_hit_rate.pct")
    out["registers"] = _col(wide, "launch__registers_per_thread")
    pipes = [c for c in wide.columns if str(c).startswith("sm__pipe_tensor") and "pct" in str(c)]
    out["tensor_pct"] = wide[pipes].max(axis=1) if pipes else np.nan
    for prec in PRECISIONS:
        out[f"flops_{prec}"] = 0.0
    for prec, (fma, add, mul) in _SIMT.items():
        inst = [_col(wide, f"sm__sass_thread_inst_executed_op_{op}_pred_on.sum").fillna(0) for op in (fma, add, mul)]
        out[f"flops_{prec}"] += 2 * inst[0] + inst[1] + inst[2]
    out["tensor_flops"] = 0.0
    tensor_cols = [(c, _TENSOR.match(str(c))) for c in wide.columns]
    for c, m in tensor_cols:
        if m and m.group(1) in PRECISIONS:
            flops = wide[c].fillna(0) * TENSOR_FLOPS_PER_OP
            out[f"flops_{m.group(1)}"] += flops
            out["tensor_flops"] += flops
    out["tensor_counted"] = any(m for _, m in tensor_cols)
    out["flops"] = out[[f"flops_{p}" for p in PRECISIONS]].sum(axis=1)
    top = out[["sm_pct", "memory_pct"]].max(axis=1)
    bound = np.where(out["sm_pct"] >= out["memory_pct"], "compute", "memory")
    out["bound"] = np.where(top.isna(), "unknown", np.where(top < LATENCY_PCT, "latency", bound))
    limits = {label: _col(wide, f"launch__occupancy_limit_{key}") for key, label in _LIMITS.items()}
    frame = pd.DataFrame(limits)
    out["occupancy_limiter"] = frame.idxmin(axis=1, skipna=True).where(frame.notna().any(axis=1), None)
    return out


def dominant_precision(row: pd.Series) -> str | None:
    """Return the precisions of a row's measured FLOPs, largest share first: ``bf16 98%, fp32 2%``."""
    total = sum(float(row.get(f"flops_{p}", 0) or 0) for p in PRECISIONS)
    if not total:
        return None
    parts = sorted(((float(row[f"flops_{p}"]) / total, p) for p in PRECISIONS if row.get(f"flops_{p}")), reverse=True)
    return ", ".join(f"{p} {100 * share:.0f}%" for share, p in parts if share >= 0.005)


def kernel_metrics(report: Report) -> pd.DataFrame:
    """Return the measured metrics per kernel name (means over its profiled launches), with
    ``profiled`` (launches) and ``model_flops`` (the work model's FLOPs per launch of the same
    launches, NaN without one). Empty without metrics."""
    per_launch = launch_metrics(report)
    if per_launch.empty:
        return per_launch
    from .work.kernels import kernel_work

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
