"""Where the step time goes: each step's wall time split into GPU busy time by the bound class of
its kernels and GPU idle time by cause. The parts of a step add up to its duration exactly.

Time is cut into pieces at every start and end of a GPU operation, step, DataLoader wait and
blocking call of the process (see :mod:`.timeline`); each piece gets one part:

**GPU busy**: a kernel, CUDA graph, device-to-device copy or memset of the process runs (on any of
its devices). Split by the bound class of the kernel (``compute``, ``memory``, ``latency`` from
``gpuscope.analysis.roofline.kernel_points``; ``unknown`` without it, and for graphs, copies and
memsets); time when several run at once is shared equally among them.

**GPU idle**, when none of those runs, by cause, the first that applies:

1. *compilation/warm-up*: the step is a warm-up step (:mod:`..steps`: the leading steps each longer
   than 1.5x the median step): torch.compile, cuDNN autotuning, lazy initialization.
2. *host-device transfers*: a copy that involves host memory (HtoD, DtoH, PtoP, ...) runs while no
   kernel does; or the host is blocked in a copy call; or the GPU ran dry while the host waited for
   a copy it had just issued (a *drained queue*, see 5).
3. *data loading*: the host is inside a DataLoader wait (``DataLoader.__next__``).
4. *host synchronization*: the host is inside a blocking call (stream, device or event
   synchronization, a synchronous copy or memset).
5. *host synchronization*, drained queue: the GPU went idle while the host was blocked in such a
   call (the call was in progress when the last operation ended, within ``SLACK_NS`` for the two
   clocks), so the host could not have queued work ahead: the whole rest of the idle stretch is the
   cost of that call. When the call waited for a copy of at least ``SCALAR_BYTES`` (a ``.to()``, a
   ``.cpu()``) the stretch counts as a transfer instead, charged to the copy.
6. *kernel launch overhead*: the operation that ends the idle stretch was launched before the
   stretch began (the GPU's own launch latency), or the host launched it at most
   ``LAUNCH_INTERVAL_NS`` (100 µs) after the launch before it: the host was issuing operations one
   after another (eager PyTorch spends 10-100 µs per operator in dispatch, autograd and the launch
   itself) and the GPU ran them faster than they came. CUDA graphs and torch.compile remove this.
7. *CPU work*: otherwise: for longer than that the host launched nothing; it ran Python or
   framework code (preprocessing, logging, a slow loop) or waited for something else.

Kernel-side rules also need to know which kernels hold up the step: a kernel is *critical* when
the next GPU operation was launched before it ended or started within 4 µs of its end (the GPU
had queued work: it was the bottleneck), or the host was blocked waiting when it ended. Making a kernel that is not critical
faster only lengthens the idle time after it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .timeline import COPY_APIS, ProcessTimeline

SLACK_NS = 20_000
SCALAR_BYTES = 64 * 1024
LAUNCH_INTERVAL_NS = 100_000
BACK_TO_BACK_NS = 4_000  # an operation starting this soon after the previous one ended was queued behind it

BOUNDS = ("compute", "memory", "latency", "unknown")
PARTS = (
    "busy_compute", "busy_memory", "busy_latency", "busy_unknown",
    "idle_cpu", "idle_launch", "idle_sync", "idle_data", "idle_transfer", "idle_warmup",
)  # fmt: skip
LABELS = {
    "busy_compute": "GPU busy: compute-bound kernels",
    "busy_memory": "GPU busy: memory-bound kernels",
    "busy_latency": "GPU busy: latency-bound kernels",
    "busy_unknown": "GPU busy: bound not known",
    "idle_cpu": "GPU idle: CPU work (Python, framework)",
    "idle_launch": "GPU idle: kernel launch overhead",
    "idle_sync": "GPU idle: host synchronization",
    "idle_data": "GPU idle: data loading",
    "idle_transfer": "GPU idle: host-device transfers",
    "idle_warmup": "GPU idle: compilation/warm-up",
}
_CPU, _LAUNCH, _SYNC, _DATA, _TRANSFER, _WARMUP = range(4, 10)


@dataclass
class ProcessBreakdown:
    """The breakdown of one process.

    ``steps``: one row per step (``step``, ``start_ns``, ``duration_ns``, ``warmup`` and one column
    per part of :data:`PARTS`, integer ns that add up to the duration). ``idle``: every idle piece
    (``window``, ``start_ns``, ``end_ns``, ``cause`` (a part), ``culprit`` ('copy', 'call', 'loader'
    or ''), ``ref`` (the op_id of the copy or memset, the row of the call in the timeline's
    ``calls``, or of the DataLoader wait), ``call`` (the blocking call the host was in or that drained
    the queue, also when the piece is charged to the copy it waited for; else -1)). ``ops``: per GPU operation ``op_id``, ``steady_ns`` (its
    exclusive busy or transfer time inside steady-state steps) and ``critical``.
    """

    pid: int
    has_steps: bool
    steps: pd.DataFrame
    idle: pd.DataFrame
    ops: pd.DataFrame

    @property
    def steady(self) -> pd.DataFrame:
        """The steps that are not warm-up (all of them when every step is)."""
        steady = self.steps[~self.steps["warmup"]]
        return steady if len(steady) else self.steps

    def mean_parts(self) -> dict[str, float]:
        """The mean of each part over the steady steps, with ``duration_ns`` (without steps: the sum
        over the capture's windows)."""
        s = self.steady
        return {k: float(s[k].mean() if self.has_steps else s[k].sum()) for k in ("duration_ns", *PARTS)}


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    """The distinct values, sorted (a sort is faster than np.unique's hashing on large time arrays)."""
    v = np.sort(values)
    return v[np.concatenate([[True], v[1:] != v[:-1]])] if len(v) else v


def _covering(starts: np.ndarray, ends: np.ndarray, points: np.ndarray) -> np.ndarray:
    """How many half-open intervals [start, end) contain each point."""
    return (np.searchsorted(np.sort(starts), points, "right")
            - np.searchsorted(np.sort(ends), points, "right"))


def latest_covering(starts: np.ndarray, ends: np.ndarray, points: np.ndarray, slack: int = 0) -> np.ndarray:
    """Per point, the index (in start order; ``starts`` sorted) of the interval that started at or
    before it and reaches furthest, if that one ends after ``point - slack``; else -1."""
    if not len(starts):
        return np.full(len(points), -1)
    reach = np.maximum.accumulate(ends)
    best = np.maximum.accumulate(np.where(ends >= reach, np.arange(len(ends)), 0))
    i = np.searchsorted(starts, points, "right") - 1
    ok = i >= 0
    j = np.where(ok, best[np.maximum(i, 0)], -1)
    ok &= ends[np.maximum(j, 0)] > points - slack
    return np.where(ok, j, -1)


def _in_windows(ws: np.ndarray, we: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per time, the index of the window [ws, we) holding it, or -1."""
    w = np.searchsorted(ws, t, "right") - 1
    ok = (w >= 0) & (t < we[np.maximum(w, 0)])
    return np.where(ok, w, -1)


def _covered_before(ws: np.ndarray, we: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per time, the total length of the windows before it (windows sorted and disjoint)."""
    prefix = np.concatenate([[0], np.cumsum(we - ws)])
    w = np.searchsorted(ws, t, "right") - 1
    inside = np.where(w >= 0, np.minimum(t, we[np.maximum(w, 0)]) - ws[np.maximum(w, 0)], 0)
    return np.where(w >= 0, prefix[np.maximum(w, 0)] + inside, 0)


def breakdown_process(tl: ProcessTimeline, bound: np.ndarray) -> ProcessBreakdown:
    """Split the steps of one process into parts; ``bound`` holds the class (one of :data:`BOUNDS`)
    of each of its operations, in the order of ``tl.ops``."""
    ops, calls, loaders, win = tl.ops, tl.calls, tl.loaders, tl.windows
    s, e = ops["start_ns"].to_numpy(np.int64), ops["end_ns"].to_numpy(np.int64)
    launch = ops["launch_ns"].to_numpy(np.int64)
    transfer = ops["transfer"].to_numpy(bool)
    ws, we = win["start_ns"].to_numpy(np.int64), win["end_ns"].to_numpy(np.int64)
    warm = win["warmup"].to_numpy(bool)
    cs, ce = calls["start_ns"].to_numpy(np.int64), calls["end_ns"].to_numpy(np.int64)
    ls, le = loaders["start_ns"].to_numpy(np.int64), loaders["end_ns"].to_numpy(np.int64)

    lo, hi = int(ws.min()), int(we.max())
    cuts = _sorted_unique(np.clip(np.concatenate([ws, we, s, e, cs, ce, ls, le]), lo, hi))
    seg_s, seg_e = cuts[:-1], cuts[1:]
    length = seg_e - seg_s
    window = _in_windows(ws, we, seg_s)

    busy_count = np.zeros(len(seg_s), np.int64)
    by_bound = []
    for b in BOUNDS:
        m = (~transfer) & (bound == b)
        c = _covering(s[m], e[m], seg_s)
        by_bound.append(c)
        busy_count += c
    busy = busy_count > 0
    moving = ~busy & (_covering(s[transfer], e[transfer], seg_s) > 0)
    idle = ~busy & ~moving

    cause = np.full(len(seg_s), -1)
    culprit = np.full(len(seg_s), "", dtype=object)
    ref = np.full(len(seg_s), -1, dtype=np.int64)
    call_ref = np.full(len(seg_s), -1, dtype=np.int64)

    # transfers running
    t_idx = np.flatnonzero(transfer)
    if len(t_idx):
        order = t_idx[np.argsort(s[t_idx], kind="stable")]
        j = latest_covering(s[order], e[order], seg_s)
        pick = moving & (j >= 0)
        cause[moving] = _TRANSFER
        culprit[pick] = "copy"
        ref[pick] = ops["op_id"].to_numpy()[order[j[pick]]]

    # idle: the stretch it belongs to began when the last operation before it ended
    end_order = np.argsort(e, kind="stable")
    k = np.searchsorted(e[end_order], seg_s, "right") - 1
    prev_op = np.where(k >= 0, end_order[np.maximum(k, 0)], -1)
    gap_start = np.where(prev_op >= 0, e[np.maximum(prev_op, 0)], seg_s)
    nxt = np.searchsorted(s, seg_s, "left")
    has_next = nxt < len(s)
    next_launch = np.where(has_next, launch[np.minimum(nxt, len(s) - 1)], np.iinfo(np.int64).max)
    launch_sorted = np.sort(launch)
    p = np.searchsorted(launch_sorted, next_launch, "left") - 1
    prev_launch = np.where(p >= 0, launch_sorted[np.maximum(p, 0)], np.iinfo(np.int64).min // 2)
    queued = has_next & (next_launch <= gap_start)
    back_to_back = has_next & (next_launch - prev_launch <= LAUNCH_INTERVAL_NS)
    cause[idle] = np.where((queued | back_to_back)[idle], _LAUNCH, _CPU)

    in_call = latest_covering(cs, ce, seg_s)
    drained_by = latest_covering(cs, ce, gap_start + SLACK_NS, slack=2 * SLACK_NS)
    drained = idle & (in_call < 0) & (drained_by >= 0)
    blocked = idle & (in_call >= 0)
    for mask, call in ((drained, drained_by), (blocked, in_call)):
        cause[mask] = _SYNC
        culprit[mask] = "call"
        ref[mask] = call[mask]
        call_ref[mask] = call[mask]
    in_loader = latest_covering(ls, le, seg_s)
    data = idle & (in_loader >= 0)
    cause[data], culprit[data], ref[data] = _DATA, "loader", in_loader[data]
    _charge_copies(tl, prev_op, cause, culprit, ref, (drained | blocked) & ~data)
    cause[~busy & (window >= 0) & warm[np.maximum(window, 0)]] = _WARMUP

    keep = window >= 0
    parts = np.zeros((len(ws), len(PARTS)))
    w = window[keep]
    busy_k, len_k = busy[keep], length[keep]
    total = np.maximum(busy_count[keep], 1)
    for i, c in enumerate(by_bound):
        parts[:, i] = np.bincount(w, weights=np.where(busy_k, len_k * c[keep] / total, 0.0), minlength=len(ws))
    busy_ns = np.bincount(w, weights=np.where(busy_k, len_k, 0), minlength=len(ws)).astype(np.int64)
    _round_rows(parts[:, :4], busy_ns)
    for code in range(_CPU, _WARMUP + 1):
        m = ~busy_k & (cause[keep] == code)
        parts[:, code] = np.bincount(w[m], weights=len_k[m], minlength=len(ws))

    steps = pd.DataFrame({"step": win["step"].to_numpy(), "start_ns": ws, "duration_ns": we - ws, "warmup": warm})
    for i, name in enumerate(PARTS):
        steps[name] = parts[:, i].round().astype(np.int64)
    nonbusy = keep & ~busy
    idle_frame = pd.DataFrame({
        "window": window[nonbusy], "start_ns": seg_s[nonbusy], "end_ns": seg_e[nonbusy],
        "cause": np.array(PARTS, dtype=object)[cause[nonbusy]], "culprit": culprit[nonbusy], "ref": ref[nonbusy],
        "call": call_ref[nonbusy]})
    return ProcessBreakdown(tl.pid, tl.has_steps, steps, idle_frame, _op_times(tl, ws, we, warm))


def _charge_copies(tl: ProcessTimeline, prev_op: np.ndarray, cause: np.ndarray, culprit: np.ndarray,
                   ref: np.ndarray, mask: np.ndarray) -> None:
    """Pieces charged to a blocking call that waited for a copy go to the copy, as transfers."""
    ops, calls = tl.ops, tl.calls
    if not mask.any():
        return
    # lookups for the few pieces charged to a call, without one Python object per operation
    copies = ops.loc[(ops["kind"] == "memcpy").to_numpy(bool), ["correlation_id", "op_id"]]
    copies = copies[copies["correlation_id"].fillna(-1) >= 0]
    by_corr = dict(zip(copies["correlation_id"].astype(np.int64).tolist(), copies["op_id"].astype(np.int64).tolist()))
    op_ids = ops["op_id"].to_numpy(np.int64)
    by_id = np.argsort(op_ids, kind="stable")
    for i in np.flatnonzero(mask):
        call = calls.iloc[int(ref[i])]
        copy = -1
        if call["source"] == "op":
            op = ops.iloc[int(by_id[np.searchsorted(op_ids, int(call["ref"]), sorter=by_id)])]
            copy = int(op["op_id"]) if op["kind"] == "memcpy" else -1
        elif str(call["api"]).startswith(COPY_APIS):
            copy = by_corr.get(int(call["correlation_id"]), -1)
        if copy < 0 and prev_op[i] >= 0:
            # the last operation to end before the GPU went idle ended during the call: it waited for it
            op = ops.iloc[int(prev_op[i])]
            if op["kind"] == "memcpy" and (op["bytes"] or 0) >= SCALAR_BYTES:
                copy = int(op["op_id"])
        if copy >= 0:
            cause[i], culprit[i], ref[i] = _TRANSFER, "copy", copy


def _round_rows(parts: np.ndarray, totals: np.ndarray) -> None:
    """Round each row of fractional parts to integers that add up to its total (largest remainder)."""
    floor = np.floor(parts)
    rest = totals - floor.sum(axis=1)
    for r in np.flatnonzero(rest > 0):
        order = np.argsort(-(parts[r] - floor[r]), kind="stable")
        floor[r, order[: int(rest[r])]] += 1
    parts[:] = floor


def _op_times(tl: ProcessTimeline, ws: np.ndarray, we: np.ndarray, warm: np.ndarray) -> pd.DataFrame:
    """Per operation: exclusive time inside steady steps, and whether it was critical."""
    ops, calls = tl.ops, tl.calls
    s, e = ops["start_ns"].to_numpy(np.int64), ops["end_ns"].to_numpy(np.int64)
    launch = ops["launch_ns"].to_numpy(np.int64)
    steady_ws, steady_we = (ws[~warm], we[~warm]) if (~warm).any() else (ws, we)
    exclusive = np.zeros(len(s), np.int64)
    for group in (~ops["transfer"].to_numpy(bool), ops["transfer"].to_numpy(bool)):
        idx = np.flatnonzero(group)
        if not len(idx):
            continue
        prev_end = np.concatenate([[np.iinfo(np.int64).min], np.maximum.accumulate(e[idx])[:-1]])
        x0 = np.minimum(np.maximum(s[idx], prev_end), e[idx])
        exclusive[idx] = (_covered_before(steady_ws, steady_we, e[idx])
                          - _covered_before(steady_ws, steady_we, x0))
    next_launch = np.concatenate([launch[1:], [np.iinfo(np.int64).max]])
    # the next operation started right after this one ended: it was queued (a kernel queued deep has no
    # launch time of its own in CUPTI's record, only an estimate at its GPU start)
    next_start = np.concatenate([s[1:], [np.iinfo(np.int64).max]])
    queued = next_start - e <= BACK_TO_BACK_NS
    waited = latest_covering(calls["start_ns"].to_numpy(np.int64), calls["end_ns"].to_numpy(np.int64),
                              e, slack=SLACK_NS) >= 0
    return pd.DataFrame({"op_id": ops["op_id"].to_numpy(), "steady_ns": exclusive,
                         "critical": (next_launch < e) | queued | waited})
