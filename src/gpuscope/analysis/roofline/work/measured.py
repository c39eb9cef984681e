"""Measured kernel metrics (Nsight Compute, stored as ``kernel_metric`` by ``gpuscope kernels``).

Per profiled launch, from ncu's metrics:

- FLOPs per precision: CUDA-core instructions counted per thread (an FMA is two operations:
  ``2·ffma + fadd + fmul`` for FP32, ``dfma``/``dadd``/``dmul`` for FP64, ``hfma``/``hadd``/``hmul``
  for 16-bit floats) plus the tensor-core operations of ``sm__ops_path_tensor_src_<precision>*`` (each
  counted as TENSOR_FLOPS_PER_OP FLOPs);
- ncu's ``hfma``/``hadd``/``hmul`` counters take BF16 and FP16 instructions alike: their FLOPs are
  BF16 where the kernel's name says so (``BFloat16``, ``bf16``, ``__nv_bfloat16``) and not FP16
  too (:func:`half_precision`), else FP16 (the roofline then asks the kernel's operator);
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

from ....trace.report import Report

TENSOR_FLOPS_PER_OP = 1.0  # ncu counts tensor-path "math ops": multiply and add separately
LATENCY_PCT = 60.0
_TENSOR = re.compile(r"^sm__ops_path_tensor_src_([a-z0-9]+?)(?:_dst_[a-z0-9]+)?\.sum$")
_SIMT = {
    "fp32": ("ffma", "fadd", "fmul"), "fp64": ("dfma", "dadd", "dmul"), "fp16": ("hfma", "hadd", "hmul"),
}  # fmt: skip
_LIMITS = {"registers": "registers", "shared_mem": "shared memory", "warps": "warps", "blocks": "blocks"}
PRECISIONS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")
_BF16_NAME = re.compile(r"bfloat16|bf16", re.IGNORECASE)
_FP16_NAME = re.compile(r"c10::Half\b|__half\b|\bhalf2?\b|fp16|(?<![bp])f16", re.IGNORECASE)


def half_precision(name: str) -> str | None:
    """Return which 16-bit float a kernel's name says it computes in: ``bf16`` (``c10::BFloat16``,
    ``__nv_bfloat16``, ``bf16``), ``fp16`` (``c10::Half``, ``__half``, ``fp16``, ``f16``), or None
    when it names neither or both (a conversion between them)."""
    bf16, fp16 = bool(_BF16_NAME.search(name)), bool(_FP16_NAME.search(name))
    if bf16 == fp16:
        return None
    return "bf16" if bf16 else "fp16"


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
    bf16 = wide["name"].astype(str).map(half_precision) == "bf16"
    for prec, (fma, add, mul) in _SIMT.items():
        inst = [_col(wide, f"sm__sass_thread_inst_executed_op_{op}_pred_on.sum").fillna(0) for op in (fma, add, mul)]
        flops = 2 * inst[0] + inst[1] + inst[2]
        if prec == "fp16":  # the half counters count BF16 instructions too
            out["flops_bf16"] += flops.where(bf16, 0.0)
            flops = flops.where(~bf16, 0.0)
        out[f"flops_{prec}"] += flops
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
