"""What a faster GPU saves where the host sets the pace: the steps replayed with some kernels shorter.

A rule that makes kernels faster (TF32, bf16) saves their time only while the GPU is the step's
bottleneck. Where the host launches work barely ahead of the GPU, shorter kernels leave the GPU
waiting for the next launch, and the step stays as long as the host's own time. The breakdown's
*critical* kernels (:mod:`.breakdown`) cannot tell the two apart: a kernel with the next launch
queued 100 µs before its end is as critical as one with a second of work behind it.

So a step is replayed. Each GPU operation keeps its order on its stream and starts at the later of
the end of the one before it and its launch; the chosen kernels take ``factor`` of their time. The
launch is the earliest the host can have made it: the time of the last host call recorded before
it by correlation id (launch anchors, synchronization sites and API calls, :mod:`...trace.launch`),
never later than it was. Where the host blocked in a synchronizing call, the wait ends when the
replayed GPU reaches the work it waited for, and the host's later launches move earlier by what
the wait lost. The step ends at the later of the host's end (moved the same way) and the GPU's.
The host's times are first drawn towards the step's start by the host's pace with collection off,
as the overhead probe timed it (the host as fast as without the profiler, as far as the probe can
tell; where the off steps ran ahead of the GPU they still time the host). What the faster kernels
save is the replay without them less the replay with them, so what the replay leaves out (the
GPU's launch latency) falls out of the difference.

Only steps whose operations all have a launch known to lie within the step's length of their start
are replayed: elsewhere the GPU runs a step or more behind the host (a full launch queue throttles
the host there, so its launch times are the GPU's pace, not its own), or anchors are too sparse to
tell. :func:`replayed_saving` answers only where at least half the steady steps could be replayed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ...trace.launch import ANCHORS
from .context import fmt_ns

MIN_REPLAYED = 0.5  # the share of steady steps that must be replayable for an answer
MAX_STEPS = 64  # steps replayed at most (spread over the steady steps)
MAX_OPS = 200_000  # a step with more GPU operations is not replayed (a whole run as one step)
MAX_CALLS = 2_000  # nor one with more blocking calls
NONE = np.iinfo(np.int64).min // 4  # no launch known: no constraint


def anchors(report: Any, pid: int, spans: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """The host calls of ``pid`` with a correlation id made within ``spans`` (from, to before), sorted
    by time: the anchors that place launches (:data:`...trace.launch.ANCHORS`: launch anchors, graph
    launches, synchronization sites), and API calls where they were recorded."""
    where = " OR ".join(["(start_ns >= ? AND start_ns < ?)"] * len(spans)) or "FALSE"
    sources = [ANCHORS] + (["api_call"] if report.count("api_call") else [])
    parts = [f"SELECT correlation_id, start_ns FROM {source} WHERE pid = ? AND correlation_id IS NOT NULL AND ({where})"
             for source in sources]
    params = [pid, *(int(v) for span in spans for v in span)]
    rows = report.df(" UNION ALL ".join(parts) + " ORDER BY start_ns", params * len(parts))
    return rows["correlation_id"].to_numpy(np.int64), rows["start_ns"].to_numpy(np.int64)


def _spans(lo: np.ndarray, hi: np.ndarray) -> list[tuple[int, int]]:
    """The union of the intervals ``[lo, hi)``, as few intervals, in order."""
    out: list[tuple[int, int]] = []
    order = np.argsort(lo, kind="stable")
    for a, b in zip(lo[order].tolist(), hi[order].tolist()):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def earliest_launch(anchor_corr: np.ndarray, anchor_ns: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """For each correlation id, the time of the last anchor at or before it (:data:`NONE` where none)."""
    if not len(anchor_corr):
        return np.full(len(corr), NONE, np.int64)
    i = np.searchsorted(anchor_corr, corr, "right") - 1
    return np.where(i >= 0, anchor_ns[np.maximum(i, 0)], NONE)


def _replay_stream(launch: np.ndarray, dur: np.ndarray, ready: int) -> np.ndarray:
    """The replayed ends of one stream's operations in order: each starts at the later of its launch
    and the previous end (the first no earlier than ``ready``); a max-plus recurrence, solved with
    a running maximum: ``end_k - D_k = max(launch_k - D_{k-1}, end_{k-1} - D_{k-1})``."""
    d = np.cumsum(dur)
    before = np.concatenate([[0], d[:-1]])
    x = np.maximum.accumulate(np.maximum(launch - before, np.concatenate([[ready], np.full(len(d) - 1, NONE)])))
    return x + d


def replay_step(ops: pd.DataFrame, launch: np.ndarray, factor: np.ndarray, calls: pd.DataFrame,
                start_ns: int, end_ns: int) -> int:
    """The replayed length of one step. ``ops``: its operations (``correlation_id``, ``stream_id``,
    ``start_ns``, ``end_ns``) with their earliest ``launch`` and the ``factor`` of their time kept;
    ``calls``: its blocking calls (``start_ns``, ``end_ns``, ``correlation_id``) in host order; the
    host's step ends at ``end_ns``."""
    order = np.argsort(ops["correlation_id"].to_numpy(np.int64), kind="stable")
    corr = ops["correlation_id"].to_numpy(np.int64)[order]
    stream = pd.factorize(ops["stream_id"].to_numpy()[order])[0]
    start = ops["start_ns"].to_numpy(np.int64)[order]
    end = ops["end_ns"].to_numpy(np.int64)[order]
    dur = np.rint((end - start) * factor[order]).astype(np.int64)
    launch = launch[order]
    ended = np.maximum.accumulate(end)  # the recorded GPU's progress, in launch order
    new_end = np.zeros(len(corr), np.int64)
    last = np.full(stream.max() + 1 if len(stream) else 0, NONE, np.int64)  # each stream's replayed end
    reached = NONE  # the replayed GPU's progress over the segments done
    shift = 0  # how much earlier the host runs than it did
    cuts = np.maximum.accumulate(np.searchsorted(corr, calls["correlation_id"].to_numpy(np.int64), "left")) \
        if len(calls) else np.zeros(0, np.int64)
    waits = zip(calls["start_ns"].to_numpy(np.int64), calls["end_ns"].to_numpy(np.int64))
    lo = 0
    for c, wait in zip([*cuts.tolist(), len(corr)], [*waits, None]):
        part = stream[lo:c]
        for s in np.unique(part):
            mine = np.flatnonzero(part == s) + lo
            new_end[mine] = _replay_stream(launch[mine] - shift, dur[mine], int(last[s]))
            last[s] = new_end[mine[-1]]
        if c > lo:
            reached = max(reached, int(new_end[lo:c].max()))
        lo = c
        if wait is not None and c:  # the host waited in this call for the work launched before it
            cs, ce = int(wait[0]), int(wait[1])
            waited = int(ended[c - 1])
            if waited >= cs:  # it blocked: the wait now ends when the replay reaches that work
                shift = ce - (max(cs - shift, reached) + max(0, ce - waited))
    gpu_end = int(new_end.max()) if len(new_end) else NONE
    return max(end_ns - shift, gpu_end) - start_ns


def replayed_saving(ctx: Any, p: Any, after: pd.Series, before: pd.Series | None = None) -> float | None:
    """The saving per steady step of running operations at ``after`` (op id -> the share of their
    recorded time they take; the others as recorded) instead of at ``before`` (the same; None: as
    recorded), by replaying the steps (see the module docstring); None where too few steps can be
    replayed (no launch anchors, or a GPU running behind the host)."""
    w = p.steady_windows
    if not len(w) or not p.breakdown.has_steps:
        return None
    ops = ctx.ops(p)
    starts_all = ops["start_ns"].to_numpy(np.int64)
    ws, we = w["start_ns"].to_numpy(np.int64), w["end_ns"].to_numpy(np.int64)
    picks = np.unique(np.linspace(0, len(w) - 1, min(len(w), MAX_STEPS)).round().astype(int))
    # a launch more than a step before its start is not replayed (below): anchors from then on, read
    # once for the steps replayed and shared by the rules that replay them
    lo, hi = 2 * ws[picks] - we[picks], we[picks]
    key = ("pace_anchors", p.pid, tuple(picks.tolist()))
    if key not in ctx.cache:
        ctx.cache[key] = anchors(ctx.report, p.pid, _spans(lo, hi))
    corr_all, ns_all = ctx.cache[key]
    calls = p.timeline.calls  # in start order
    calls = calls[calls["correlation_id"].notna()]
    call_starts = calls["start_ns"].to_numpy(np.int64)
    # the host's pace without the profiler: its own steps with collection off where the probe timed
    # them (a host ahead of the GPU included), else the step less the probe's measured cost
    host = p.probe.host_pace if p.probe is not None and p.probe.host_pace < 1.0 else (
        p.base_ns / p.step_ns if p.step_ns else 1.0)
    saved, replayed = [], 0
    for i in picks:
        a, b = np.searchsorted(starts_all, [ws[i], we[i]], "left")
        step = ops.iloc[a:b]
        mine = calls.iloc[slice(*np.searchsorted(call_starts, [ws[i], we[i]], "left"))]
        if not len(step) or len(step) > MAX_OPS or len(mine) > MAX_CALLS:
            continue
        a, b = np.searchsorted(ns_all, [2 * ws[i] - we[i], we[i]], "left")
        by_corr = np.argsort(corr_all[a:b], kind="stable")
        launch = earliest_launch(corr_all[a:b][by_corr], ns_all[a:b][by_corr], step["correlation_id"].to_numpy(np.int64))
        lead = step["start_ns"].to_numpy(np.int64) - launch
        if (launch == NONE).any() or lead.max() > we[i] - ws[i]:
            continue  # not anchored, or the GPU is a step or more behind the host
        ids = step["op_id"]
        f_after = ids.map(after).fillna(1.0).to_numpy(np.float64)
        f_before = ids.map(before).fillna(1.0).to_numpy(np.float64) if before is not None else np.ones(len(step))
        # the host as fast as without the profiler: its times drawn towards the step's start
        launch = ws[i] + np.rint((launch - ws[i]) * host).astype(np.int64)
        mine = mine.assign(start_ns=ws[i] + np.rint((mine["start_ns"] - ws[i]) * host).astype(np.int64),
                           end_ns=ws[i] + np.rint((mine["end_ns"] - ws[i]) * host).astype(np.int64))
        end = int(ws[i] + round((we[i] - ws[i]) * host))
        was = replay_step(step, launch, f_before, mine, int(ws[i]), end)
        now = replay_step(step, launch, f_after, mine, int(ws[i]), end)
        saved.append(max(0, was - now))
        replayed += 1
    if replayed < MIN_REPLAYED * len(picks):
        return None
    return float(np.mean(saved))


def paced_text(ctx: Any, p: Any, after: pd.Series, ns: float, what: str,
               before: pd.Series | None = None) -> tuple[float | None, str]:
    """What the replayed steps save with operations at ``after`` instead of ``before``
    (:func:`replayed_saving`), and the evidence line for a finding estimated at ``ns`` per step ("" where
    the replay could not be made or saves at least half of ``ns``); ``what``: the change, as the line
    names it ("these kernels at 25% of their time"). The estimate is not cut to it: the recorded host
    can run slower than the program's own without the profiler, even in steps timed with collection off."""
    replayed = replayed_saving(ctx, p, after, before)
    if replayed is None or replayed >= ns / 2:
        return replayed, ""
    return replayed, (f"in the recorded steps the host set the pace: replayed with {what}, they end "
                      f"{fmt_ns(replayed)} sooner, not {fmt_ns(ns)}; the estimate holds where the program's host runs "
                      "ahead of its GPU (a faster CPU, fewer launches, CUDA graphs)")
