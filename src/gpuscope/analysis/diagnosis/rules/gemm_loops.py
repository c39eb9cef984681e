"""Many small same-shape matrix multiplies in a loop, which one batched multiply would replace.

A *GEMM loop* is a run, within one steady step, of at least ``MIN_LOOP`` launches of the same
matmul kernel with the same launch configuration, each with at most half as many thread blocks as
the GPU has SMs (so each leaves most of the GPU idle) or run so far apart that the GPU is idle for
most of the loop (a loop the host's launches pace), with at most ``MAX_BETWEEN`` other
operations and ``MAX_GAP_NS`` between the starts of one and the next (a tight loop body; the
same GEMM once per layer of a deep model, with a layer's work between, is not one: layers depend
on each other and cannot be batched). One batched multiply would take what the loop's FLOPs take at
the roofline's attainable rate for that kernel (when the report has the work of its kernels: operator
shapes), else about as long as the loop's multiplies need SMs: ``max(one kernel, sum of kernels x
blocks / SMs)``; the saving is the
loop's span (kernels, other operations of the body, and the launch gaps between them) minus that.
The launch and CPU-work gaps inside a loop are counted here, not by ``launch_bound`` or
``hot_line``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..context import Context, Process, data_dict, fmt_ns
from ..finding import Finding
from ..kernel_flags import codes_of, per_code
from ..kernel_names import is_matmul
from ..rule import Rule

MIN_LOOP = 8
MAX_BETWEEN = 2
MAX_GAP_NS = 200_000


@dataclass
class GemmLoop:
    """One loop of small same-shape matmuls in one step."""

    name: str
    blocks: int
    sm_count: int
    op_ids: list[int]
    start_ns: int
    end_ns: int
    kernel_ns: float
    median_ns: float
    roof_ns: float | None = None  # the loop's FLOPs at the attainable rate, when known

    @property
    def batched_ns(self) -> float:
        """The estimated time of one batched multiply doing the loop's work."""
        if self.roof_ns is not None:
            return max(self.median_ns, self.roof_ns)
        return max(self.median_ns, self.kernel_ns * min(1.0, self.blocks / max(self.sm_count, 1)))

    @property
    def saving_ns(self) -> float:
        return max(0.0, (self.end_ns - self.start_ns) - self.batched_ns)


def gemm_loops(ctx: Context, p: Process) -> list[GemmLoop]:
    """Return the GEMM loops of the process's steady steps (computed once per process)."""
    key = ("gemm_loops", p.pid)
    if key not in ctx.cache:
        ctx.cache[key] = _find(ctx, p)
    loops: list[GemmLoop] = ctx.cache[key]
    return loops


def _find(ctx: Context, p: Process) -> list[GemmLoop]:
    ops = ctx.ops(p)
    # one selection of the steady matmul kernels, each name matched once: a copy of every steady
    # kernel first took seconds on a long run
    names = ops["name"]
    if isinstance(names.dtype, pd.CategoricalDtype) and not names.isna().any():  # its own codes, not widened
        matmul = per_code(names.cat.codes.to_numpy(), [str(c) for c in names.cat.categories], is_matmul)
    else:
        matmul = per_code(*codes_of(names), is_matmul)
    rows = np.flatnonzero(((ops["kind"] == "kernel") & (ops["steady_ns"] > 0)).to_numpy(bool) & matmul)
    if not len(rows):
        return []
    start_all = ops["start_ns"].to_numpy(np.int64)
    end_all = ops["end_ns"].to_numpy(np.int64)
    op_all = ops["op_id"].to_numpy()
    configs = dict(ctx.report.sql(
        "SELECT id, coalesce(grid_x, 1) * coalesce(grid_y, 1) * coalesce(grid_z, 1) FROM kernel_config"))
    sms = dict(ctx.report.sql("SELECT id, max(sm_count) FROM device GROUP BY id"))
    out = []
    rates = _flops_and_rate(ctx)
    for name, config, device, idx in _groups(ops, rows):
        blocks = int(configs.get(config) or 0)
        sm_count = int(sms.get(device) or 0)
        if len(idx) < MIN_LOOP or not blocks or not sm_count:
            continue
        starts = start_all[idx]
        splits = np.flatnonzero((np.diff(idx) > MAX_BETWEEN + 1) | (np.diff(starts) > MAX_GAP_NS)) + 1
        # the runs between the splits, those long enough only (a group of millions splits into many)
        bounds = np.concatenate([[0], splits, [len(idx)]])
        long_enough = np.diff(bounds) >= MIN_LOOP
        for a, b in zip(bounds[:-1][long_enough].tolist(), bounds[1:][long_enough].tolist()):
            run = idx[a:b]
            run_start, run_end = start_all[run], end_all[run]
            d = run_end - run_start
            span = float(run_end.max() - run_start.min())
            if 2 * blocks > sm_count and d.sum() >= 0.5 * span:
                continue  # each fills the GPU and they run back to back: nothing to batch
            rate = rates.get(str(name))
            roof = len(run) * rate[0] / rate[1] * 1e9 if rate else None
            out.append(GemmLoop(str(name), blocks, sm_count, op_all[run].astype(int).tolist(),
                                int(run_start.min()), int(run_end.max()), float(d.sum()),
                                float(np.median(d)), roof))
    return out


def _groups(ops: pd.DataFrame, rows: np.ndarray) -> Iterator[tuple[Any, Any, Any, np.ndarray]]:
    """The operations ``rows`` by (name, launch configuration, device), in the order of those keys
    (missing ones last), each group's rows (positions among the operations) in their order.

    Sorted in numpy where no key is missing (the name's categorical codes, the ids as they are): a
    pandas groupby of millions of rows held several copies of its keys; else by pandas."""
    keys = ["name", "config_id", "device_id"]
    names = ops["name"]
    numeric = all(isinstance(ops[c].dtype, np.dtype) and ops[c].dtype.kind in "iu" for c in keys[1:])  # never missing
    if isinstance(names.dtype, pd.CategoricalDtype) and numeric and not names.isna().any():
        code = names.cat.codes.to_numpy()[rows]
        config, device = (ops[c].to_numpy()[rows] for c in keys[1:])
        order = np.lexsort((device, config, code))  # stable: each group's rows in their order
        code, config, device = code[order], config[order], device[order]
        new = np.flatnonzero((code[1:] != code[:-1]) | (config[1:] != config[:-1]) | (device[1:] != device[:-1])) + 1
        bounds = np.concatenate([[0], new, [len(order)]]).tolist()
        categories = names.cat.categories
        for a, b in zip(bounds[:-1], bounds[1:]):
            yield categories[code[a]], config[a], device[a], rows[order[a:b]]
        return
    # the group keys of those rows alone, not a copy of every column
    kern = pd.DataFrame({c: ops[c].take(rows).reset_index(drop=True) for c in keys})
    kern["at"] = np.arange(len(rows), dtype=np.int64)
    for (name, config_id, device_id), group in kern.groupby(keys, dropna=False, observed=True):
        yield name, config_id, device_id, rows[group["at"].to_numpy(np.int64)]


def _flops_and_rate(ctx: Context) -> dict[str, tuple[float, float]]:
    """Per kernel name: FLOPs per launch and the attainable FLOP/s, from the roofline's points."""
    points = ctx.roofline
    if points is None:
        return {}
    out = {}
    for r in points.itertuples(index=False):
        if r.kernels and r.flops and r.attainable_flops_per_s and r.attainable_flops_per_s > 0:
            per = float(r.flops) / float(r.kernels)
            name = str(r.name)
            if name not in out:
                out[name] = (per, float(r.attainable_flops_per_s))
    return out


def idle_inside(p: Process, loops: list[GemmLoop], starts: np.ndarray, ends: np.ndarray) -> float:
    """The total length of the pieces [starts, ends) that lie inside GEMM loops (sorted pieces)."""
    total = 0.0
    for loop in loops:
        lo = np.clip(starts, loop.start_ns, loop.end_ns)
        hi = np.clip(ends, loop.start_ns, loop.end_ns)
        total += float((hi - lo).sum())
    return total


def loop_op_ids(ctx: Context, p: Process) -> set[int]:
    """The operations that belong to GEMM loops."""
    return {op for loop in gemm_loops(ctx, p) for op in loop.op_ids}


class SmallGemms(Rule):
    name = "small_gemms"
    description = ("Loops of many small same-shape matrix multiplies that each leave most SMs idle, or that "
                   "the host's launches pace; one batched multiply would do them at once.")

    def evaluate(self, ctx: Context) -> list[Finding]:
        out = []
        for p in ctx.processes:
            loops = gemm_loops(ctx, p)
            by_kernel: dict[str, list[GemmLoop]] = {}
            for loop in loops:
                by_kernel.setdefault(loop.name, []).append(loop)
            for name, mine in by_kernel.items():
                ns = p.per_step(sum(loop.saving_ns for loop in mine))
                if p.share(ns) < ctx.min_share:
                    continue
                launches = sum(len(loop.op_ids) for loop in mine)
                span = p.per_step(sum(loop.end_ns - loop.start_ns for loop in mine))
                first = mine[0]
                ops = [op for loop in mine for op in loop.op_ids]
                where = ctx.top_launch_range(ops)
                evidence = [
                    f"{launches / p.n_steps:.0f} launches per step of {name[:90]}, in {len(mine) / p.n_steps:.1f} "
                    f"loop(s); each {fmt_ns(first.median_ns)} on {first.blocks} thread blocks for "
                    f"{first.sm_count} SMs",
                    f"the loops span {fmt_ns(span)} per step; one batched multiply would take about "
                    f"{fmt_ns(p.per_step(sum(loop.batched_ns for loop in mine)))}"
                    + (" (their FLOPs at the roofline's attainable rate)" if first.roof_ns is not None
                       else " (the loop's kernel time over the SMs they leave idle)"),
                ]
                shapes = _op_shapes(ctx, p.pid, first.start_ns, first.end_ns)
                if shapes:
                    evidence.append(f"most frequent operator in the loop: {shapes}")
                out.append(Finding(
                    rule=self.name, pid=p.pid, saving_ns=ns, share=p.share(ns),
                    title=f"{launches / p.n_steps:.0f} same-shape matmuls in a loop per step: batch them",
                    evidence=evidence, location=f"launched in {where}" if where else "a loop of matmuls",
                    fix=("Stack the operands and multiply once: torch.bmm / torch.matmul on [N, m, k] tensors, "
                         "torch.baddbmm, or torch.einsum over the loop dimension (pad to a common shape when "
                         "they differ); torch.compile can also fuse such loops."),
                    data=data_dict(saving_ns=ns, launches_per_step=launches / p.n_steps, blocks=first.blocks,
                                   sm_count=first.sm_count, median_kernel_ns=first.median_ns),
                ))
        return out


def _op_shapes(ctx: Context, pid: int, lo: int, hi: int) -> str | None:
    """The most frequent PyTorch operator with its input shapes in [lo, hi), when operators were recorded."""
    if not ctx.report.count("torch_op"):
        return None
    rows = ctx.report.sql(
        """SELECT s.value, t.shapes, count(*) AS n FROM torch_op t JOIN string s ON s.id = t.name_id
           WHERE t.pid = ? AND t.start_ns >= ? AND t.start_ns < ?
             AND (s.value LIKE '%mm%' OR s.value LIKE '%matmul%' OR s.value LIKE '%linear%')
           GROUP BY ALL ORDER BY n DESC LIMIT 1""", [pid, lo - 1_000_000, hi])
    return f"{rows[0][0]} {rows[0][1]} x{rows[0][2]}" if rows else None
