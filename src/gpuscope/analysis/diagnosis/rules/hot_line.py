"""``hot_line``: a line of the program that takes a large part of the step, for what a change to
that line can save: Python of the program's own frames at it (its self time), or many calls per
step into a library from it (a module or an operator per item) whose fixed cost per call one call
over the batch pays once. A line that makes one batched library call per step is not blamed for the
library's time. On a report with GPU work the same fix is read on the GPU's side: the Python that
runs while the GPU waits (:func:`.idle.gpu_hot_line`)."""

from __future__ import annotations

import ast
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from ..context import data_dict, fmt_ns
from ..cpu_breakdown import FORWARD, MODEL_CALLS, OTHER
from ..cpu_context import CpuContext, CpuProcess
from ..cpu_frames import Frame, frame_text
from ..finding import Finding
from ..rule import CPU, GPU, Rule
from .cpu_side import by_line, per_step_text, source_text
from .idle import gpu_hot_line
from .idle_cores import largest_input

TOP = 3  # lines reported, at most


COMPREHENSIONS = ("<listcomp>", "<genexpr>", "<setcomp>", "<dictcomp>")
TINY = 4096  # elements: an operator on inputs this small costs its fixed cost per call, nothing per element
MIN_OPS = 8  # recorded top-level operators needed to tell fixed cost from work
ROUGH_WORK = 0.5  # without them: this share of per-item calls' time taken as per-element work
PER_ITEM = 4  # library calls per step from one line from which they count as per-item calls
SAME = 5  # calls of one operator on the same shapes from which the least of their times is its work
LEAST = 5  # percentile of those times taken as the least (a stray fast reading left out)


def top_level(ops: pd.DataFrame) -> pd.DataFrame:
    """The operators not inside another (``start_ns``, ``end_ns`` sorted by start)."""
    if not len(ops):
        return ops
    end = ops["end_ns"].to_numpy(np.int64)
    reach = np.concatenate([[np.iinfo(np.int64).min], np.maximum.accumulate(end)[:-1]])
    return ops[ops["start_ns"].to_numpy(np.int64) >= reach]


def least_time(top: pd.DataFrame, d: np.ndarray) -> np.ndarray:
    """Per operator, the least time a call of the same operator on the same shapes took (the
    :data:`LEAST` percentile of its group's times) where it was called at least :data:`SAME` times,
    else its own time."""
    name = top["name"].astype(str) if "name" in top.columns else pd.Series("", index=top.index)
    keys = (name + "\0" + top["shapes"].fillna("").astype(str)).to_numpy()
    times = pd.Series(d.astype(np.float64))
    by = times.groupby(keys)
    least = by.transform("quantile", LEAST / 100).to_numpy(np.float64)
    many = by.transform("size").to_numpy() >= SAME
    return np.where(many, np.minimum(least, times.to_numpy()), times.to_numpy())


def work_share(ops: pd.DataFrame) -> float | None:
    """The share of the time between the first and last recorded top-level operator that is their
    per-element work: each operator's time beyond the fixed cost of a call, that is the median time
    of the operators on tiny inputs (at most :data:`TINY` elements: views, indexing, dispatch), whose
    own time counts as fixed cost. The rest (the calls' fixed cost and the Python between them) is
    what one call over a whole batch pays once instead of per item. None with fewer than
    :data:`MIN_OPS` operators.

    An operator called many times on the same shapes does the same work each time: its work is the
    least time such a call took (:func:`least_time`), and what the others took beyond it is per-call
    cost too. A product split over PyTorch's threads wakes them and waits for the last at each call;
    where they wake late (other programs on the cores) most calls wait, and a batched call, which
    gives each thread whole products of the batch, waits once (64 products (512x512)@(512x64) on 2
    busy cores: 240 us at the least, 335 us the median, 21 ms the mean)."""
    top = top_level(ops)
    if len(top) < MIN_OPS:
        return None
    d = (top["end_ns"] - top["start_ns"]).to_numpy(np.int64)
    tiny = np.array([largest_input(x) <= TINY for x in top["shapes"]], bool)
    floor = float(np.median(d[tiny])) if tiny.sum() >= 5 else float(np.percentile(d, 10))
    work = np.where(tiny, 0.0, np.maximum(least_time(top, d) - floor, 0.0))
    # the recorded stretches: operators closer than 1 ms to the one before (a window's gaps left out)
    s, e = top["start_ns"].to_numpy(np.int64), top["end_ns"].to_numpy(np.int64)
    gaps = s[1:] - np.maximum.accumulate(e)[:-1]
    span = float((e - s).sum() + gaps[gaps < 1_000_000].clip(0).sum())
    return min(1.0, float(work.sum()) / span) if span > 0 else None


def op_repeats(p: CpuProcess) -> float:
    """How many times the loop's own code (outside module calls, in steady steps) calls one operator
    on the same shapes for each call of its least called one, from the recorded top-level operators
    (made at least 3 times): about 8 for
    ``[a[i] @ b[i] for i in range(8)]`` followed by one ``torch.stack``; 0 without operator records.

    Where the steady steps hold too few of them, all recorded ones count: the recorder's sample
    windows already leave the set-up out, and steps found from repeating sampled stacks (no step
    marks) can leave the window in a warm-up step."""
    ops = _outside_model_calls(p, top_level(p.ops))
    if not len(ops):
        return 0.0
    st = ops["start_ns"].to_numpy(np.int64)
    w = p.steady_windows
    ws, we = w["start_ns"].to_numpy(np.int64), w["end_ns"].to_numpy(np.int64)
    i = np.searchsorted(ws, st, "right") - 1
    steady = ops[(i >= 0) & (st < we[np.maximum(i, 0)])] if len(ws) else ops.iloc[:0]
    ops = steady if len(steady) >= MIN_OPS else ops
    if len(ops) < MIN_OPS:
        return 0.0
    counts = ops.groupby([ops["name"], ops["shapes"].fillna("")]).size()
    counts = counts[counts >= 3]  # calls made once or twice are set-up, not the loop's
    return float(counts.max()) / float(counts.min()) if len(counts) else 0.0


def _outside_model_calls(p: CpuProcess, ops: pd.DataFrame) -> pd.DataFrame:
    """The operators of ``ops`` that no module call (a model range) holds."""
    fwd = p.ranges[p.ranges["category"].isin(MODEL_CALLS)] if len(p.ranges) else p.ranges
    if not len(ops) or not len(fwd):
        return ops
    st = ops["start_ns"].to_numpy(np.int64)
    fs, fe = fwd["start_ns"].to_numpy(np.int64), fwd["end_ns"].to_numpy(np.int64)
    order = np.argsort(fs, kind="stable")
    fs, reach = fs[order], np.maximum.accumulate(fe[order])
    i = np.searchsorted(fs, st, "right") - 1
    return ops[~((i >= 0) & (st < reach[np.maximum(i, 0)]))]


@lru_cache(maxsize=4096)
def _statement(file: str, line: int, recorded_cwd: str | None = None) -> ast.AST | None:
    """The statement on one line of a readable Python source (None where it cannot be read or parsed
    on its own: a line of a longer statement)."""
    text = source_text(("", file, line), width=10_000, recorded_cwd=recorded_cwd)
    if text is None:
        return None
    if text.endswith(":"):  # the header of a block
        text += " pass"
    try:
        return ast.parse(text)
    except SyntaxError:
        return None


def only_calls(frame: Frame, recorded_cwd: str | None = None) -> bool:
    """Whether a line of the program makes calls and runs no Python loop of its own (no
    comprehension, lambda or loop): a sample whose innermost frame is such a line is in the function
    it called (PyTorch's C++ code has no Python frame), not in the line's own Python. False where
    the line cannot be read (``recorded_cwd``: where the program ran, to find its files here)."""
    tree = _statement(frame[1], int(frame[2]), recorded_cwd)
    if tree is None:
        return False
    nodes = list(ast.walk(tree))
    loops = (ast.comprehension, ast.Lambda, ast.For, ast.While, ast.AsyncFor)
    return any(isinstance(n, ast.Call) for n in nodes) and not any(isinstance(n, loops) for n in nodes)


def batched_saving(line_ns: float, calls: float, work: float) -> float:
    """What one call over the batch saves on a line making ``calls`` calls per step that take
    ``line_ns`` together, ``work`` of it per-element work (0-1): each call is a fixed cost ``o`` and
    work ``w``; the batched call pays ``o`` once and the same work: ``(calls - 1) x o``, that is
    ``line_ns x (1 - work) x (1 - 1/calls)``."""
    if calls <= 1:
        return 0.0
    return line_ns * (1.0 - work) * (1.0 - 1.0 / calls)


class HotLine(Rule):
    name = "hot_line"
    description = ("A line of the program that takes a large part of the step with Python of its own, or with "
                   "many library calls per step (one per item); with GPU work, the Python that runs while the "
                   "GPU waits (the CPU-work part of the breakdown).")
    sides: ClassVar[tuple[str, ...]] = (GPU, CPU)

    def needs_on(self, side: str) -> tuple[str, ...]:
        return ("gpu",) if side == GPU else ("cpu_samples",)

    def evaluate(self, ctx: Any) -> list[Finding]:
        return gpu_hot_line(ctx, self.name) if ctx.side == GPU else self._cpu(ctx)

    def _cpu(self, ctx: CpuContext) -> list[Finding]:
        """On a report without GPU work: the lines of the steady steps' Python, and per-item calls."""
        out = []
        have_ops = ctx.missing("torch_ops") is None
        for p in ctx.processes:
            s = p.samples
            if not len(s):
                continue
            infos = [ctx.stack(p.pid, int(i)) for i in s["stack_id"]]
            # the program's time: steady, outside data waits (data_loader's), backward and the
            # optimizer (PyTorch's own loops), not importing, not gpuscope's recording
            ok = np.array([not (i.overhead or i.importing) and i.user is not None for i in infos], bool)
            base = s["steady"].to_numpy(bool) & s["part"].isin([FORWARD, OTHER]).to_numpy() & ok
            outside_op = ~s["in_op"].to_numpy(bool) & ~np.array([i.operator for i in infos], bool)
            own_frame = np.array([i.innermost is not None and i.user is not None and i.innermost[1:] == i.user[1:]
                                  for i in infos], bool)
            mean = p.breakdown.mean_parts()
            room = mean["cpu_forward"] + mean["cpu_other"]  # the parts the lines were sampled in
            work = work_share(p.ops)
            calls = _module_calls(ctx, p)
            candidates: list[tuple[float, Frame, float, float, str, pd.DataFrame]] = []
            # per-item calls: a line calling a module or PyTorch many times per step (a comprehension
            # over the items, or a module call per item); all its time, operators included
            taken = np.zeros(len(s), bool)
            by_caller: dict[Frame, np.ndarray] = {}
            for j, i in enumerate(infos):
                key = i.module_caller if i.module_caller is not None else (
                    i.user if i.user is not None and i.user[0] in COMPREHENSIONS else None)
                if key is not None and base[j]:
                    by_caller.setdefault(key, np.zeros(len(s), bool))[j] = True
            repeats = op_repeats(p)
            for frame, m in by_caller.items():
                modules = calls.get(frame[1:], 0.0)
                comprehension = frame[0] in COMPREHENSIONS and modules < PER_ITEM
                k = repeats if comprehension else modules
                if k < PER_ITEM:
                    continue
                m = m | (base & np.array([_at(i.user, frame) for i in infos], bool))  # the loop's Python there
                total = float(s.loc[m, "weight_ns"].sum())
                ns = p.per_step(total)
                share_work = work if work is not None else ROUGH_WORK
                saving = batched_saving(ns, k, share_work)
                taken |= m
                how = (f"in a comprehension: about {k:.0f} calls of one operator on the same shapes for each "
                       "call of the loop's least called one" if comprehension else f"{k:.0f} module calls per step")
                candidates.append((saving, frame, ns, share_work, how, s[m]))
            # Python of the program's own frames (its self time), outside operators; a line that only
            # calls (``pred = logits.argmax(-1)``) spends its samples in the C code it called
            cwd = _recorded_cwd(ctx)
            calling = np.array([i.user is not None and only_calls(i.user, cwd) for i in infos], bool)
            own = base & outside_op & own_frame & ~taken & ~calling
            part = s["part"].to_numpy()
            # inside modules' forward, the line that ran; outside, the loop's own line (below)
            for frame, total, _ in by_line(ctx, p, s[own & (part == FORWARD)]):
                candidates.append((p.per_step(total), frame, p.per_step(total), -1.0, "", s[own & (part == FORWARD)]))
            for frame, total, rows in loop_lines(ctx, p, base & (part == OTHER), own, mean["cpu_other"]):
                candidates.append((total, frame, total, -1.0, "", rows))
            candidates.sort(key=lambda c: -c[0])
            n = 0
            for saving, frame, ns, share_work, how, rows in candidates:
                if n >= TOP:
                    break
                saving = min(saving, room)
                if saving <= 0 or p.share(saving) < ctx.min_share:
                    break
                room -= saving
                n += 1
                out.append(self._finding(ctx, p, frame, saving, ns, share_work, how, rows, have_ops))
        return out

    def _finding(self, ctx: CpuContext, p: CpuProcess, frame: Frame, saving: float, ns: float, work: float,
                 how: str, rows: pd.DataFrame, have_ops: bool) -> Finding:
        """The finding of one line: ``work`` < 0 for the line's own Python, else the per-element work
        share of its per-item calls (``how``: how they were counted)."""
        per_item = work >= 0
        lines = rows[[_at(ctx.stack(p.pid, int(i)).user, frame) or ctx.stack(p.pid, int(i)).module_caller == frame
                      for i in rows["stack_id"]]]
        in_forward = float(lines.loc[lines["part"] == FORWARD, "weight_ns"].sum()) > 0.5 * float(
            lines["weight_ns"].sum() or 1)
        if per_item:
            evidence = [f"{per_step_text(p, ns)} at this line, {how}: the library's fixed cost per call "
                        "(PyTorch's dispatch, module calls, the loop's Python) is paid per item",
                        f"estimate: one call over the whole batch pays the fixed cost once; per-element work is "
                        f"{work:.0%} of the calls' time" + (" (recorded operators' time beyond a call's fixed "
                                                           "cost)" if work_share(p.ops) is not None else
                                                           " (rough: too few operators recorded to tell)")]
            fix = ("Call the library once over the whole batch instead of once per item: stack the items (one "
                   "model(batch) call, torch.bmm / batched operators instead of a loop of small ones).")
        else:
            evidence = [f"{per_step_text(p, ns)} of Python in the program's own code at this line"
                        + (" inside a module's forward" if in_forward else "")
                        + (", outside PyTorch operators" if have_ops else ""),
                        "estimate: that time, for a version that moves it off the step or replaces it with one "
                        "operation over the batch"]
            fix = ("Replace the per-element Python with tensor operations over the whole batch (one call "
                   "instead of a loop), or move it off the step: into a DataLoader worker, a background "
                   "thread, or run it less often.")
            if in_forward:
                fix = "Vectorize this Python in the module's forward with tensor operations (no per-element loop)."
        text = source_text(frame, recorded_cwd=_recorded_cwd(ctx))
        if text:
            evidence.insert(1, f"the line: {text}")
        if saving < ns and not per_item:
            evidence.append(f"capped at {fmt_ns(saving)}: the rest of forward and other Python")
        return Finding(self.name, "A hot line of Python in the step" if not per_item
                       else "Per-item library calls on one line", saving, p.share(saving), evidence,
                       frame_text(frame), fix, pid=p.pid,
                       data=data_dict(line_ns=ns, per_item=per_item, work_share=round(work, 3) if per_item else None,
                                      file=frame[1], line=frame[2], function=frame[0]))


def _recorded_cwd(ctx: CpuContext) -> str | None:
    """The directory the program ran in, as its report says (None where it does not)."""
    cwd = ctx.report.meta.get("cwd")
    return cwd if isinstance(cwd, str) else None


def loop_depth(chains: list[tuple[Frame, ...]]) -> int:
    """The depth (0: outermost) of the deepest function of the program that every stack passes
    through: the function whose loop the step is (each stack's frame there is at a line of the loop's
    body). -1 when the stacks share no function."""
    d = 0
    while chains and all(len(c) > d for c in chains) and len({c[d][:2] for c in chains}) == 1:
        d += 1
    return d - 1


def loop_lines(ctx: CpuContext, p: CpuProcess, where: np.ndarray, own: np.ndarray,
               part_ns: float) -> list[tuple[Frame, float, pd.DataFrame]]:
    """Per line of the loop's body, the per-step time of its own Python outside modules: most first,
    (line, ns per step, its samples).

    Samples of ``where`` (the loop's part outside modules) are grouped at their frame in the loop's
    function (:func:`loop_depth`), so that Python in a helper counts at the loop's line that calls
    it. That part's time per step (``part_ns``, exact from the ranges) is shared out by the samples
    whose stack is known (``carried`` rows, whose stack is the previous sample's guess, left out):
    the sampler, which needs the GIL, finds Python that runs between two operators late, at the
    operator, and the time carried back before it would go to whatever ran before.
    """
    s = p.samples
    known = where & ~s["carried"].to_numpy(bool)
    known_ns = float(s.loc[known, "weight_ns"].sum())
    if not known_ns or part_ns <= 0:
        return []
    chains = [ctx.stack(p.pid, int(i)).chain for i in s.loc[where, "stack_id"]]
    depth = loop_depth([c for c in chains if c])
    groups: dict[Frame, list[int]] = {}
    for j in np.flatnonzero(known & own):
        chain = ctx.stack(p.pid, int(s["stack_id"].iat[j])).chain
        if not chain:
            continue
        groups.setdefault(chain[min(max(depth, 0), len(chain) - 1)], []).append(int(j))
    out = []
    for frame, rows in groups.items():
        ns = float(s["weight_ns"].iloc[rows].sum()) / known_ns * part_ns
        out.append((frame, ns, s.iloc[rows]))
    return sorted(out, key=lambda x: -x[1])


def _module_calls(ctx: CpuContext, p: CpuProcess) -> dict[tuple[str, int], float]:
    """Per program line (file, line), the top-level module calls it made per steady step: each
    top-level forward range goes to the line that called it in the samples taken inside it (the
    line most such ranges came from, for a range no sample fell in)."""
    r = p.ranges
    if not len(r):
        return {}
    fwd = top_level(r[r["category"].isin(MODEL_CALLS)].sort_values(["start_ns", "end_ns"], ascending=[True, False]))
    w = p.steady_windows
    ws, we = w["start_ns"].to_numpy(np.int64), w["end_ns"].to_numpy(np.int64)
    st = fwd["start_ns"].to_numpy(np.int64)
    i = np.searchsorted(ws, st, "right") - 1
    fwd = fwd[(i >= 0) & (st < we[np.maximum(i, 0)])]
    if not len(fwd):
        return {}
    s = p.samples
    ts = s["ts_ns"].to_numpy(np.int64)
    starts, ends = fwd["start_ns"].to_numpy(np.int64), fwd["end_ns"].to_numpy(np.int64)
    j = np.searchsorted(starts, ts, "right") - 1
    inside = (j >= 0) & (ts < ends[np.maximum(j, 0)])
    line_of: dict[int, tuple[str, int]] = {}
    for rng, sid in zip(j[inside], s["stack_id"].to_numpy()[inside]):
        caller = ctx.stack(p.pid, int(sid)).module_caller
        if caller is not None:
            line_of.setdefault(int(rng), caller[1:])
    if not line_of:
        return {}
    counts: dict[tuple[str, int], float] = {}
    for key in line_of.values():
        counts[key] = counts.get(key, 0.0) + 1.0
    main = max(counts, key=lambda k: counts[k])
    per_line: dict[tuple[str, int], float] = {}
    for rng in range(len(fwd)):
        key = line_of.get(rng, main)
        per_line[key] = per_line.get(key, 0.0) + 1.0
    return {k: v / p.n_steps for k, v in per_line.items()}


def _at(user: Frame | None, frame: Frame) -> bool:
    """Whether a sample's user frame is on ``frame``'s line (whichever function)."""
    return user is not None and user[1:] == frame[1:]
