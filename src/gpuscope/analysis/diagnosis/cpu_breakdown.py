"""Where a step's time goes on the CPU: each step's wall time split into data loading, forward,
backward, optimizer and the rest of the program's Python, from the PyTorch ranges of its main
thread (``--trace torch``). The parts of a step add up to its duration exactly.

Time is cut at every start and end of a range and a step; each piece gets one part, the first that
applies:

1. *data loading*: the main thread waits in ``DataLoader.__next__`` (range category ``dataloader``);
2. *optimizer*: ``optimizer.step()`` or ``zero_grad()`` runs (``optimizer``, ``zero_grad``);
3. *backward*: ``loss.backward()`` or ``torch.autograd.grad`` runs (``autograd``; the modules'
   own backward ranges of ``--trace torch-backward`` too);
4. *forward*: a module's forward runs (``forward``; nested modules count once);
5. *other Python*: the rest of the step (the loop's own code, logging, metrics, Python between
   the calls above).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...units import duration
from .breakdown import covering_sorted
from .step_means import StepsBreakdown

CPU_PARTS = ("cpu_data", "cpu_forward", "cpu_backward", "cpu_optimizer", "cpu_other")
CPU_LABELS = {
    "cpu_data": "Data loading (waiting for batches)",
    "cpu_forward": "Forward (modules)",
    "cpu_backward": "Backward (loss.backward)",
    "cpu_optimizer": "Optimizer (step, zero_grad)",
    "cpu_other": "Other Python (the rest of the step)",
}
CPU_SHORT = {"cpu_data": "Data", "cpu_forward": "Forward", "cpu_backward": "Backward",
             "cpu_optimizer": "Optimizer", "cpu_other": "Other"}
DATA, FORWARD, BACKWARD, OPTIMIZER, OTHER = range(5)
CATEGORY_PART = {"dataloader": DATA, "forward": FORWARD, "model": FORWARD, "autograd": BACKWARD, "backward": BACKWARD,
                 "optimizer": OPTIMIZER, "zero_grad": OPTIMIZER}
# a module call's range: every call's (``forward``), or, in a step whose layers were not recorded, the
# outermost call's alone (``model``: capture/python/module_steps.py)
MODEL_CALLS = ("forward", "model")
PRIORITY = (DATA, OPTIMIZER, BACKWARD, FORWARD)  # the first that covers a piece takes it


@dataclass
class CpuBreakdown(StepsBreakdown):
    """The CPU breakdown of one process.

    ``steps``: one row per step (``step``, ``start_ns``, ``duration_ns``, ``warmup`` (set-up or
    warm-up: left out of the means) and one column per part of :data:`CPU_PARTS`, integer ns that
    add up to the duration); without steps one row, step ``all``, for the run after start-up.
    ``startup_ns``: from the process's start to its first window; ``import_ns``: the sampled time
    of the main thread in the import machinery before then.
    """

    pid: int
    has_steps: bool
    steps: pd.DataFrame
    startup_ns: int = 0
    import_ns: float = 0.0
    parts: tuple[str, ...] = field(default=CPU_PARTS)

    def mean_parts(self) -> dict[str, float]:
        """The mean of each part over the steady steps, with ``duration_ns``."""
        s = self.steady
        return {k: float(s[k].mean()) if len(s) else 0.0 for k in ("duration_ns", *CPU_PARTS)}


def part_at(points: np.ndarray, ranges: pd.DataFrame) -> np.ndarray:
    """The part (an index of :data:`CPU_PARTS`) of each time, from ``ranges`` (``start_ns``,
    ``end_ns``, ``part``): the first of :data:`PRIORITY` open then, else *other*."""
    out = np.full(len(points), OTHER)
    if not len(ranges) or not len(points):
        return out
    s, e = ranges["start_ns"].to_numpy(np.int64), ranges["end_ns"].to_numpy(np.int64)
    part = ranges["part"].to_numpy(np.int64)
    for p in reversed(PRIORITY):  # the first in priority is written last
        m = part == p
        if m.any():
            out[covering_sorted(np.sort(s[m]), np.sort(e[m]), points) > 0] = p
    return out


def split_steps(windows: pd.DataFrame, ranges: pd.DataFrame, has_steps: bool) -> pd.DataFrame:
    """Split each window (``step``, ``start_ns``, ``end_ns``, ``setup``; sorted, disjoint) into parts.

    Returns the ``steps`` frame of :class:`CpuBreakdown`.
    """
    ws, we = windows["start_ns"].to_numpy(np.int64), windows["end_ns"].to_numpy(np.int64)
    bounds = [ws, we]
    if len(ranges):
        bounds += [ranges["start_ns"].to_numpy(np.int64), ranges["end_ns"].to_numpy(np.int64)]
    lo, hi = (int(ws.min()), int(we.max())) if len(ws) else (0, 0)
    cuts = np.unique(np.clip(np.concatenate(bounds), lo, hi)) if len(ws) else np.array([], np.int64)
    seg_s, seg_e = cuts[:-1], cuts[1:]
    w = np.searchsorted(ws, seg_s, "right") - 1
    keep = (w >= 0) & (seg_s < we[np.maximum(w, 0)])
    part = part_at(seg_s[keep], ranges)
    length = (seg_e - seg_s)[keep]
    steps = pd.DataFrame({
        "step": [int(s) for s in windows["step"]] if has_steps else ["all"] * len(windows),
        "start_ns": ws, "duration_ns": we - ws, "warmup": windows["setup"].to_numpy(bool)})
    for i, name in enumerate(CPU_PARTS[:OTHER]):
        m = part == i
        steps[name] = np.bincount(w[keep][m], weights=length[m], minlength=len(ws)).round().astype(np.int64)
    steps["cpu_other"] = steps["duration_ns"] - steps[list(CPU_PARTS[:OTHER])].sum(axis=1)
    return steps


def scope_text(p: CpuBreakdown, source: str, counts: str | None = None) -> str:
    """What one process's means cover, start-up included, in one line."""
    startup = f"; start-up before it: {duration(p.startup_ns)}" if p.startup_ns else ""
    if not p.has_steps:
        # why no pattern gave steps (steps/from_pattern.py), without its own ending (said here already)
        why = source.removesuffix(": the whole capture counts as one step")
        why = f" Why no steps: {why}." if why.startswith("no step marks") else ""
        return (f"Process {p.pid}: no steps, so the run after start-up counts as one window "
                f"({duration(float(p.steps['duration_ns'].sum()))}){startup}.{why}")
    warm = int(p.steps["warmup"].sum())
    steady = len(p.steady)
    text = f"Process {p.pid}: mean of {steady} steady step{'s' if steady != 1 else ''}; "
    if counts:  # the words of analysis/steps/counts.py: found, recorded, warm-up, in the overhead probe
        return text + counts + startup + "."
    text += f"steps: {source}"
    if warm and warm < len(p.steps):
        text += f"; {warm} set-up/warm-up step{'s' if warm > 1 else ''} left out"
    return text + startup + "."
