"""``cpu_idle_cores``: PyTorch's operators run on fewer cores than the machine has free (for example
``torch.set_num_threads(1)`` on a multi-core machine), read from the host counters."""

from __future__ import annotations

import json
from functools import lru_cache

import numpy as np
import pandas as pd

from ..context import data_dict, fmt_ns
from ..cpu_breakdown import BACKWARD, FORWARD
from ..cpu_context import CpuContext, CpuProcess
from ..cpu_frames import frame_text
from ..finding import Finding
from .cpu_side import CpuRule, by_line, per_step_text

GRAIN = 32_768  # elements: PyTorch splits an operator across threads only above this (at::internal::GRAIN_SIZE)
MIN_OP_NS = 50_000  # shorter operators gain little from more threads (waking them costs microseconds)
MIN_RUN_NS = 1_000_000_000  # shorter steady runs: the 10 Hz counters say too little
MIN_FREE = 0.5  # cores: less headroom than this and the rule stays quiet
EFFICIENCY = 0.8  # of the ideal speedup that more threads give (memory bandwidth, imbalance)
ROUGH = 0.5  # without operator records: this share of forward and backward taken as parallel work


@lru_cache(maxsize=4096)
def largest_input(shapes: str | None) -> int:
    """The element count of the largest tensor among an operator's recorded input shapes."""
    try:
        items = json.loads(shapes) if shapes else []
    except ValueError:
        return 0
    best = 0
    for item in items if isinstance(items, list) else []:
        tensors = item if item and isinstance(item[0], list) else [item]
        for t in tensors:
            if isinstance(t, list) and all(isinstance(d, int) for d in t):
                best = max(best, int(np.prod(t)) if t else 1)
    return best


def _in_windows(p: CpuProcess, t: np.ndarray) -> np.ndarray:
    w = p.steady_windows
    ws, we = w["start_ns"].to_numpy(np.int64), w["end_ns"].to_numpy(np.int64)
    i = np.searchsorted(ws, t, "right") - 1
    return (i >= 0) & (t < we[np.maximum(i, 0)])


def parallel_ops(p: CpuProcess) -> pd.DataFrame:
    """The main thread's operators in steady windows that PyTorch can split across threads."""
    ops = p.ops
    if not len(ops):
        return ops
    d = (ops["end_ns"] - ops["start_ns"]).to_numpy(np.int64)
    big = np.array([largest_input(s) >= GRAIN for s in ops["shapes"]], bool)
    return ops[big & (d >= MIN_OP_NS) & _in_windows(p, ops["start_ns"].to_numpy(np.int64))]


def recorded_steps(ctx: CpuContext, p: CpuProcess) -> float:
    """The steady steps whose operators were recorded: all of them with ``--trace torch-ops``; with
    ``torch-shapes``, those that lie in its sample windows (their share of the steady time, in
    steps), so that the operators' time per step is not that of a few steps spread over all."""
    windows = ctx.op_windows(p.pid)
    if windows is None or not len(windows):
        return float(p.n_steps)
    w = p.steady_windows
    ws, we = w["start_ns"].to_numpy(np.int64), w["end_ns"].to_numpy(np.int64)
    os_, oe = windows["start_ns"].to_numpy(np.int64), windows["end_ns"].to_numpy(np.int64)
    inside = sum(float(np.clip(np.minimum(we, b) - np.maximum(ws, a), 0, None).sum()) for a, b in zip(os_, oe))
    total = float((we - ws).sum())
    return max(p.n_steps * inside / total, 1e-9) if total and inside else float(p.n_steps)


def _covered(starts: np.ndarray, ends: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per time, the operator time (disjoint, sorted intervals) before it."""
    prefix = np.concatenate([[0], np.cumsum(ends - starts)])
    i = np.searchsorted(starts, t, "right") - 1
    inside = np.where(i >= 0, np.minimum(t, ends[np.maximum(i, 0)]) - starts[np.maximum(i, 0)], 0)
    return np.where(i >= 0, prefix[np.maximum(i, 0)] + inside, 0)


class CpuIdleCores(CpuRule):
    name = "cpu_idle_cores"
    description = "PyTorch's operators use fewer threads than the machine has free cores."
    needs = ("host", "torch")

    def evaluate(self, ctx: CpuContext) -> list[Finding]:  # type: ignore[override]
        out = []
        cores = ctx.cores
        if cores < 2:
            return out
        host = ctx.host
        for p in ctx.processes:
            if p.steady_wall_ns < MIN_RUN_NS or f"cpu_{p.pid}" not in host:
                continue
            t = host["ts_ns"].to_numpy(np.int64)
            keep = _in_windows(p, t)
            keep[0] = False  # the first reading only sets the baseline
            if keep.sum() < 3:
                continue
            prev = np.concatenate([[t[0]], t[:-1]])
            par = parallel_ops(p)
            rough = not len(p.ops)
            if not rough and not len(par):
                continue
            if rough:
                mean = p.breakdown.mean_parts()
                op_ns = ROUGH * (mean["cpu_forward"] + mean["cpu_backward"])
                weight = np.ones(len(t))
            else:
                s, e = par["start_ns"].to_numpy(np.int64), par["end_ns"].to_numpy(np.int64)
                steps = recorded_steps(ctx, p)
                op_ns = float((e - s).sum()) / steps
                weight = (_covered(s, e, t) - _covered(s, e, prev)) / np.maximum(t - prev, 1)
            wk = weight[keep]
            own = host[f"cpu_{p.pid}"].to_numpy(float)[keep] - ctx.profiler_cores(p.pid)
            used = float((wk * own).sum() / wk.sum()) if wk.sum() >= 0.5 else float(own.mean())
            other = max(0.0, float((host["machine"] - host["program"]).to_numpy(float)[keep].mean()))
            usable = cores - other
            used = max(used, 1.0)
            if usable - used < MIN_FREE or op_ns <= 0:
                continue
            speedup = 1.0 + EFFICIENCY * (usable / used - 1.0)
            saving = op_ns * (1.0 - 1.0 / speedup)
            if p.share(saving) < ctx.min_share:
                continue
            evidence = [f"{cores} cores; while its operators ran the program kept {used:.1f} busy (gpuscope's own "
                        f"threads left out), other programs {other:.1f}: {usable - used:.1f} cores were free"]
            if rough:
                evidence.append(f"no operator records (--trace torch-ops): half of forward and backward, "
                                f"{per_step_text(p, op_ns)}, taken as work PyTorch can split across threads")
            else:
                top = par.assign(d=par["end_ns"] - par["start_ns"]).groupby("name")["d"].sum().nlargest(3)
                names = ", ".join(f"{n} {fmt_ns(float(v) / steps)}" for n, v in top.items())
                evidence.append(f"operators PyTorch can split across threads (inputs of {GRAIN:,} elements or more): "
                                f"{per_step_text(p, op_ns)}: {names}")
            evidence.append(f"estimate: that time x (1 - 1/{speedup:.2f}), for {usable:.1f} usable cores at "
                            f"{EFFICIENCY:.0%} of a perfect speedup; measure it")
            heavy = p.samples[p.samples["steady"] & p.samples["in_op"] & p.samples["part"].isin([FORWARD, BACKWARD])]
            lines = by_line(ctx, p, heavy if len(heavy) else p.samples[p.samples["steady"]])
            location = frame_text(lines[0][0]) if lines else "the training loop"
            fix = (f"Let PyTorch use the free cores: torch.set_num_threads({int(usable)}) (its default is one thread "
                   "per core), and check OMP_NUM_THREADS and MKL_NUM_THREADS in the environment.")
            out.append(Finding(self.name, "Cores left idle while PyTorch's operators run", saving, p.share(saving),
                               evidence, location, fix, pid=p.pid,
                               data=data_dict(parallel_op_ns=op_ns, cores=cores, used_cores=round(used, 2),
                                              other_cores=round(other, 2), speedup=round(speedup, 3))))
        return out
