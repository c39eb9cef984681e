"""The work of each kernel of the steady steps, for the rules that model a fix from the roofs: its
FLOPs, matrix FLOPs, bytes, precision and kind (:func:`..roofline.work.kernels.kernel_work`: the operators'
shapes handed to their kernels, carried to kernels launched outside the operator sample windows),
its operator's call, and the time the same work takes at the device's roofs
(:mod:`..roofline.ceilings`).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from ..roofline.ceilings import Ceilings, for_report
from .context import Context, Process

WORK_COLUMNS = ("flops", "matrix_flops", "bytes", "precision", "work_kind", "op_name", "torch_op_id", "tensor_cores")


def ceilings(ctx: Context) -> Ceilings:
    """The roofs of the report's GPU (computed once per diagnosis)."""
    if "ceilings" not in ctx.cache:
        ctx.cache["ceilings"] = for_report(ctx.report)
    out: Ceilings = ctx.cache["ceilings"]
    return out


def _work(ctx: Context) -> pd.DataFrame:
    """``kernel_work`` of the report indexed by ``op_id`` (empty when no operator was recorded, or
    the work model failed: the rules then fall back to kernel names)."""
    if "kernel_work" not in ctx.cache:
        frame = pd.DataFrame(columns=["item", *WORK_COLUMNS])
        if ctx.report.count("torch_op"):
            try:
                from ..roofline.work.kernels import kernel_work

                frame = kernel_work(ctx.report)
            except Exception as exc:  # noqa: BLE001  (a failing analysis must not stop the others; said in notes)
                ctx.notes.append(f"The work model of the kernels failed ({type(exc).__name__}: {exc}); rules that "
                                 "model a fix from FLOPs and bytes used the kernel names alone.")
        ctx.cache["kernel_work"] = frame.drop_duplicates("item").set_index("item")[list(WORK_COLUMNS)]
    out: pd.DataFrame = ctx.cache["kernel_work"]
    return out


def _own(values: np.ndarray, index: pd.Index) -> pd.Series:
    """A Series of ``values`` (made for it) without a copy: columns set from it share them until written."""
    return pd.Series(values, index=index, copy=False)


def _names(names: pd.Series) -> pd.Series:
    """The kernel names as text values: a categorical whose categories are the names in sorted
    order (what a column of ten million strings, 0.3-0.5 GB, grouped and sorted by the rules, gives
    the same way), unused ones left out; other columns as text."""
    if not isinstance(names.dtype, pd.CategoricalDtype):
        return names.astype(str)
    texts = np.array([str(c) for c in names.cat.categories], dtype=object)
    codes = names.cat.codes.to_numpy()
    if (codes < 0).any():
        return names.astype(str)
    used = np.bincount(codes, minlength=len(texts)) > 0
    order = np.flatnonzero(used)[np.argsort(texts[used], kind="stable")]
    new = np.full(len(texts), -1, dtype=np.int64)
    new[order] = np.arange(len(order))
    return pd.Series(pd.Categorical.from_codes(new.astype(codes.dtype)[codes], categories=texts[order]),
                     index=names.index, copy=False)


def steady_work(ctx: Context, p: Process) -> pd.DataFrame:
    """The process's steady kernels in GPU start order (those of :meth:`Context.steady_kernels`)
    with ``name`` (texts, as a categorical of the names in sorted order), ``dur_ns``, ``critical``
    (bool), ``step`` (the steady step, from 1) and the columns of :data:`WORK_COLUMNS` (NaN/None
    where the report has no work for the kernel; read-only). Computed once per process, not to be
    changed."""
    key = ("steady_work", p.pid)
    if key not in ctx.cache:
        kern, step = ctx.steady_kernels(p)
        out = kern[["op_id", "name", "start_ns", "end_ns", "launch_ns"]]  # copied on write
        out["name"] = _names(kern["name"])
        # columns made here given as Series: an array set as a column is copied (ten million values each)
        out["dur_ns"] = _own((kern["end_ns"] - kern["start_ns"]).to_numpy(np.float64), out.index)
        out["critical"] = _own(kern["critical"].fillna(False).to_numpy(bool), out.index)
        out["step"] = _own(step, out.index)  # shared with steady_kernels: neither is changed
        work = _work(ctx)
        numeric = ("flops", "matrix_flops", "bytes")
        if not len(work) and all(work[c].dtype == object for c in WORK_COLUMNS):
            # no work known (no operators recorded): the columns a reindex would give, as one value
            # repeated without memory of its own (a read-only view of a single NaN): ten million NaN
            # and None cost 0.16 GB, and nothing writes into this frame
            nan = _own(np.broadcast_to(np.float64(np.nan), len(out)), out.index)
            missing = np.empty((), dtype=object)
            missing[()] = np.nan
            none = pd.Series(np.broadcast_to(missing, len(out)), index=out.index, dtype=object, copy=False)
            for col in WORK_COLUMNS:
                out[col] = nan if col in numeric else none
        else:
            joined = work.reindex(out["op_id"].to_numpy())
            for col in WORK_COLUMNS:
                out[col] = joined[col].to_numpy()
            for col in numeric:
                out[col] = pd.to_numeric(out[col], errors="coerce").astype(np.float64)
        ctx.cache[key] = out.reset_index(drop=True)
    frame: pd.DataFrame = ctx.cache[key]
    return frame


def roof_ns(c: Ceilings, flops: float, matrix_flops: float, nbytes: float, precision: str | None,
            tensor: bool) -> float | None:
    """The time (ns) work of one precision takes at the roofs: its matrix part at the tensor-core
    peak (``tensor``) or the CUDA-core peak, the rest at the CUDA-core peak, and its bytes at the
    DRAM bandwidth, whichever is longer (:mod:`..roofline.points`); None without those roofs."""
    peak = c.peak(precision, tensor=tensor)
    vector = c.peak(precision, tensor=False)
    if not peak or not vector or not c.dram_bytes_per_s or not np.isfinite(flops) or not np.isfinite(nbytes):
        return None
    matrix = matrix_flops if np.isfinite(matrix_flops) else 0.0
    compute = matrix / peak + max(0.0, flops - matrix) / vector
    return max(compute, nbytes / c.dram_bytes_per_s) * 1e9


def roofs_ns(c: Ceilings, flops: np.ndarray, matrix_flops: np.ndarray, nbytes: np.ndarray, precision: str | None,
             tensor: bool) -> np.ndarray:
    """:func:`roof_ns` of many kernels at once: NaN where it gives None."""
    peak = c.peak(precision, tensor=tensor)
    vector = c.peak(precision, tensor=False)
    if not peak or not vector or not c.dram_bytes_per_s:
        return np.full(len(flops), np.nan)
    ok = np.isfinite(flops) & np.isfinite(nbytes)
    matrix = np.where(np.isfinite(matrix_flops), matrix_flops, 0.0)
    compute = matrix / peak + np.maximum(0.0, flops - matrix) / vector
    return np.where(ok, np.maximum(compute, nbytes / c.dram_bytes_per_s) * 1e9, np.nan)


def op_calls(ctx: Context, ids: list[int]) -> dict[int, tuple[str, list[Any], list[Any], list[Any], dict[str, Any]]]:
    """The operator calls ``ids`` (``torch_op_id`` of :func:`..ranges.operators.torch_ops_table`): name,
    shapes, dtypes, output shapes and scalars, parsed."""
    if not ids:
        return {}
    from ..ranges.operators import torch_ops_table

    table = torch_ops_table(ctx.report)
    listed = ", ".join(str(int(i)) for i in sorted(set(ids)))
    rows = ctx.report.sql(f"SELECT torch_op_id, name, shapes, dtypes, out_shapes, scalars FROM {table} "
                          f"WHERE torch_op_id IN ({listed})")
    return {int(i): (str(n), json.loads(s or "[]"), json.loads(d or "[]"), json.loads(o or "[]"), json.loads(sc or "{}"))
            for i, n, s, d, o, sc in rows}


def calls_named(ctx: Context, pid: int, names: tuple[str, ...]) -> list[tuple[str, list[Any], list[Any], dict[str, Any]]]:
    """The recorded calls of the process to the operators ``names``: name, shapes, dtypes, scalars."""
    if not ctx.report.count("torch_op") or not names:
        return []
    marks = ", ".join("?" for _ in names)
    rows = ctx.report.sql(
        f"""SELECT s.value, t.shapes, t.dtypes, t.scalars FROM torch_op t JOIN string s ON s.id = t.name_id
            WHERE t.pid = ? AND s.value IN ({marks}) ORDER BY t.start_ns""", [int(pid), *names])
    return [(str(n), json.loads(sh or "[]"), json.loads(d or "[]"), json.loads(sc or "{}")) for n, sh, d, sc in rows]
