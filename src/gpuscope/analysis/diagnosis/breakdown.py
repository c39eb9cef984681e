"""Where the step time goes: each step's wall time split into GPU busy time by the bound class of
its kernels and GPU idle time by cause. The parts of a step add up to its duration exactly.

Time is cut into pieces at every start and end of a GPU operation, step, DataLoader wait and
blocking call of the process (see :mod:`.timeline`); each piece gets one part:

**GPU busy**: a kernel, CUDA graph, device-to-device copy or memset of the process runs (on any of
its devices). Split by the bound class of the kernel (``compute``, ``memory``, ``latency`` from
``gpuscope.analysis.roofline.points.kernel_points``; ``unknown`` without it, and for graphs, copies and
memsets); time when several run at once is shared equally among them.

**GPU idle**, when none of those runs, by cause, the first that applies:

1. *compilation/warm-up*: the step is a warm-up step (:mod:`..steps.source`: the leading steps each longer
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

from ..heap import give_back
from .sorted_arrays import is_sorted, shared_if_equal, sorted_copy, sorted_of, sorted_unique
from .step_means import StepsBreakdown
from .timeline import COPY_APIS, ProcessTimeline, shared_if_constant

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
class ProcessBreakdown(StepsBreakdown):
    """The breakdown of one process.

    ``steps``: one row per step (``step``, ``start_ns``, ``duration_ns``, ``warmup`` and one column
    per part of :data:`PARTS`, integer ns that add up to the duration). ``idle``: every idle piece
    (``window``, ``start_ns``, ``end_ns``, ``cause`` (a part), ``culprit`` ('copy', 'call', 'loader'
    or ''; both categorical), ``ref`` (the op_id of the copy or memset, the row of the call in the timeline's
    ``calls``, or of the DataLoader wait), ``call`` (the blocking call the host was in or that drained
    the queue, also when the piece is charged to the copy it waited for; else -1); ``window``, ``ref``
    and ``call`` as 32-bit integers where every value fits). ``ops``: per GPU operation ``op_id``, ``steady_ns`` (its
    exclusive busy or transfer time inside steady-state steps; 32-bit where every operation is shorter
    than 2**31 ns) and ``critical``.
    """

    pid: int
    has_steps: bool
    steps: pd.DataFrame
    idle: pd.DataFrame
    ops: pd.DataFrame

    def mean_parts(self) -> dict[str, float]:
        """The mean of each part over the steady steps, with ``duration_ns`` (without steps: the sum
        over the capture's windows)."""
        s = self.steady
        return {k: float(s[k].mean() if self.has_steps else s[k].sum()) for k in ("duration_ns", *PARTS)}


def covering_sorted(starts: np.ndarray, ends: np.ndarray, points: np.ndarray) -> np.ndarray:
    """How many half-open intervals [start, end) contain each point (``starts`` and ``ends`` each sorted)."""
    return np.searchsorted(starts, points, "right") - np.searchsorted(ends, points, "right")


def latest_covering(starts: np.ndarray, ends: np.ndarray, points: np.ndarray, slack: int = 0) -> np.ndarray:
    """Per point, the index (in start order; ``starts`` sorted) of the interval that started at or
    before it and reaches furthest, if that one ends after ``point - slack``; else -1."""
    return _Latest(starts, ends).at(points, slack)


class _Latest:
    """:func:`latest_covering` of one set of intervals, prepared once for many batches of points."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray) -> None:
        self.starts, self.ends = starts, ends
        if len(starts):
            reach = np.maximum.accumulate(ends)
            self.best = np.maximum.accumulate(np.where(ends >= reach, np.arange(len(ends)), 0))

    def at(self, points: np.ndarray, slack: int = 0) -> np.ndarray:
        if not len(self.starts):
            return np.full(len(points), -1)
        i = np.searchsorted(self.starts, points, "right") - 1
        ok = i >= 0
        j = np.where(ok, self.best[np.maximum(i, 0)], -1)
        ok &= self.ends[np.maximum(j, 0)] > points - slack
        return np.where(ok, j, -1)


def _in_windows(ws: np.ndarray, we: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per time, the index of the window [ws, we) holding it, or -1."""
    w = np.searchsorted(ws, t, "right") - 1
    ok = (w >= 0) & (t < we[np.maximum(w, 0)])
    return np.where(ok, w, -1)


def _covered_before(ws: np.ndarray, we: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Per time, the total length of the windows before it (windows sorted and disjoint). Worked in
    place where it can: each array of ten million times made anew costs a tenth of a second in page
    faults alone."""
    prefix = np.concatenate([[0], np.cumsum(we - ws)])
    w = np.searchsorted(ws, t, "right")
    w -= 1
    before = w < 0
    np.maximum(w, 0, out=w)
    out = we[w]
    np.minimum(out, t, out=out)
    out -= ws[w]
    out += prefix[w]
    out[before] = 0
    return out


# pieces of time handled at once: the arrays per piece (a few dozen) stay within tens of megabytes
# however many operations the run has (a quarter million: a million held 0.08 GB more at the peak of
# ten million operations); the results do not depend on it
CHUNK = 1 << 18
CULPRITS = ("", "copy", "call", "loader")
_COPY, _CALL, _LOADER = 1, 2, 3


def _where_all(mask: np.ndarray) -> np.ndarray | slice:
    """``mask`` to select with, or the whole slice where it is true everywhere (pieces all inside the
    windows, as in a run without steps): views then, not copies of a million values each."""
    return slice(None) if mask.all() else mask


def _accumulate(acc: np.ndarray, index: np.ndarray, weights: np.ndarray) -> None:
    """Add ``weights`` into ``acc`` by ``index``, summing in the order one ``np.bincount`` of every
    batch at once would (each bin's running sum first, then the batch's weights in order)."""
    n = len(acc)
    acc[:] = np.bincount(np.concatenate([np.arange(n), index]), weights=np.concatenate([acc, weights]), minlength=n)


def breakdown_process(tl: ProcessTimeline, bound: np.ndarray | pd.Categorical) -> ProcessBreakdown:
    """Split the steps of one process into parts; ``bound`` holds the class (one of :data:`BOUNDS`)
    of each of its operations, in the order of ``tl.ops`` (texts, or their categorical). The pieces
    of time are classified :data:`CHUNK` at a time, against lookups of the operations made once."""
    ops, calls, loaders, win = tl.ops, tl.calls, tl.loaders, tl.windows
    s, e = ops["start_ns"].to_numpy(np.int64), ops["end_ns"].to_numpy(np.int64)
    launch = ops["launch_ns"].to_numpy(np.int64)
    transfer = ops["transfer"].to_numpy(bool)
    ws, we = win["start_ns"].to_numpy(np.int64), win["end_ns"].to_numpy(np.int64)
    warm = win["warmup"].to_numpy(bool)
    cs, ce = calls["start_ns"].to_numpy(np.int64), calls["end_ns"].to_numpy(np.int64)
    ls, le = loaders["start_ns"].to_numpy(np.int64), loaders["end_ns"].to_numpy(np.int64)

    op_times = _op_times(tl, ws, we, warm)  # first: its arrays are freed before the lookups below are made
    give_back()  # what malloc keeps of the freed arrays, not resident beside the next part's (40 MB at 10 M)
    lo, hi = int(ws.min()), int(we.max())
    cuts = np.concatenate([ws, we, s, e, cs, ce, ls, le])
    cuts = sorted_unique(np.clip(cuts, lo, hi, out=cuts))

    # lookups of the operations, made once: busy work by bound class, transfers, ends, launches
    # (the operations' own columns where they are in order already)
    # the operations in end order: None where that is their own order (positions as 32-bit integers
    # where they fit: ten million of them 40 MB less)
    end_order = None if is_sorted(e) else np.argsort(e, kind="stable")
    if end_order is not None and len(e) < 2**31:
        end_order = end_order.astype(np.int32)
    end_sorted = e if end_order is None else e[end_order]
    by_bound = []
    for b in BOUNDS:
        m = (~transfer) & np.asarray(bound == b, dtype=bool)
        # every operation of one class (a run without roofline points): its ends sorted are those
        # above, not a second sorted copy of them
        by_bound.append((sorted_of(s, m), end_sorted if m.all() else sorted_of(e, m)) if m.any() else None)
        del m
    moving_ops = (sorted_copy(s[transfer]), sorted_copy(e[transfer]))
    t_idx = np.flatnonzero(transfer)
    order = t_idx[np.argsort(s[t_idx], kind="stable")]
    copies = _Latest(s[order], e[order])
    launch_sorted = sorted_of(launch)
    in_calls, in_loaders = _Latest(cs, ce), _Latest(ls, le)
    op_ids = ops["op_id"].to_numpy()
    # the pieces' windows and references as 32-bit integers where every value fits (ten million
    # pieces: 0.16 GB less); the values are the same
    narrow = max(len(ws), len(calls), len(loaders), int(op_ids.max()) + 1 if len(op_ids) else 0,
                 -int(op_ids.min()) if len(op_ids) else 0) < 2**31
    ref_type = np.int32 if narrow else np.int64

    nw = len(ws)
    sums = np.zeros((len(PARTS), nw))
    busy_sum = np.zeros(nw)
    # sums of whole nanoseconds are exact in float64 below 2^53 ns in any order: the pieces are disjoint
    # within [lo, hi], so no sum of their lengths exceeds that span. Then one count of a batch's
    # lengths per part gives the sums that adding each length in turn gives.
    exact = hi - lo < 2**53
    pos_type = np.int32 if len(cuts) < 2**31 else np.int64
    pieces = []
    for a in range(0, len(cuts) - 1, CHUNK):
        seg_s = cuts[a:min(a + CHUNK, len(cuts) - 1)]
        seg_e = cuts[a + 1:a + 1 + len(seg_s)]
        length = seg_e - seg_s
        window = _in_windows(ws, we, seg_s)

        busy_count = np.zeros(len(seg_s), np.int64)
        counts = []
        for sorted_ops in by_bound:
            c = None if sorted_ops is None else covering_sorted(*sorted_ops, seg_s)
            counts.append(c)
            if c is not None:
                busy_count += c
        busy = busy_count > 0
        keep = _where_all(window >= 0)
        w = window[keep]
        busy_k, len_k = busy[keep], length[keep]
        total = np.maximum(busy_count[keep], 1)
        for i, c in enumerate(counts):
            if c is not None:
                _accumulate(sums[i], w, np.where(busy_k, len_k * c[keep] / total, 0.0))
        busy_len = np.where(busy_k, len_k, 0)
        if exact:
            busy_sum += np.bincount(w, weights=busy_len, minlength=nw)
        else:
            _accumulate(busy_sum, w, busy_len)
        del busy_len
        del w, busy_k, len_k, total, counts, busy_count

        # the rest is of the pieces the GPU was not busy in (their cause), often half of them or fewer
        nb = np.flatnonzero(~busy)
        seg_s, seg_e, window = seg_s[nb], seg_e[nb], window[nb]
        moving = covering_sorted(*moving_ops, seg_s) > 0
        idle = ~moving

        cause = np.full(len(seg_s), -1, dtype=np.int8)
        culprit = np.zeros(len(seg_s), dtype=np.int8)
        ref = np.full(len(seg_s), -1, dtype=np.int64)
        call_ref = np.full(len(seg_s), -1, dtype=np.int64)

        # transfers running
        if len(order):
            j = copies.at(seg_s)
            pick = moving & (j >= 0)
            cause[moving] = _TRANSFER
            culprit[pick] = _COPY
            ref[pick] = op_ids[order[j[pick]]]

        # idle: the stretch it belongs to began when the last operation before it ended
        k = np.searchsorted(end_sorted, seg_s, "right") - 1
        prev_op = k if end_order is None else np.where(k >= 0, end_order[np.maximum(k, 0)], -1)
        gap_start = np.where(prev_op >= 0, e[np.maximum(prev_op, 0)], seg_s)
        nxt = np.searchsorted(s, seg_s, "left")
        has_next = nxt < len(s)
        next_launch = np.where(has_next, launch[np.minimum(nxt, len(s) - 1)], np.iinfo(np.int64).max)
        p = np.searchsorted(launch_sorted, next_launch, "left") - 1
        prev_launch = np.where(p >= 0, launch_sorted[np.maximum(p, 0)], np.iinfo(np.int64).min // 2)
        queued = has_next & (next_launch <= gap_start)
        back_to_back = has_next & (next_launch - prev_launch <= LAUNCH_INTERVAL_NS)
        cause[idle] = np.where((queued | back_to_back)[idle], _LAUNCH, _CPU)

        in_call = in_calls.at(seg_s)
        drained_by = in_calls.at(gap_start + SLACK_NS, slack=2 * SLACK_NS)
        drained = idle & (in_call < 0) & (drained_by >= 0)
        blocked = idle & (in_call >= 0)
        for mask, call in ((drained, drained_by), (blocked, in_call)):
            cause[mask] = _SYNC
            culprit[mask] = _CALL
            ref[mask] = call[mask]
            call_ref[mask] = call[mask]
        in_loader = in_loaders.at(seg_s)
        data = idle & (in_loader >= 0)
        cause[data], culprit[data], ref[data] = _DATA, _LOADER, in_loader[data]
        _charge_copies(tl, prev_op, cause, culprit, ref, (drained | blocked) & ~data)
        inside = window >= 0
        cause[inside & warm[np.maximum(window, 0)]] = _WARMUP
        keep = _where_all(inside)

        w, len_k, cause_k = window[keep], (seg_e - seg_s)[keep], cause[keep]
        if exact:  # every idle piece has one of these causes
            at = (cause_k.astype(np.int64) - _CPU) * nw
            at += w
            sums[_CPU:_WARMUP + 1] += np.bincount(at, weights=len_k, minlength=(_WARMUP + 1 - _CPU) * nw).reshape(-1, nw)
            del at
        else:
            for code in range(_CPU, _WARMUP + 1):
                m = cause_k == code
                _accumulate(sums[code], w[m], len_k[m])
        # each piece by its position among the cuts (it runs from that cut to the next), not its two
        # times: 8 bytes a piece held while the rest are classified, not 16
        # (a batch's column of one value, as the windows of a run without steps and the references of
        # pieces that have none are, held as that value until the batches are joined)
        pieces.append((shared_if_constant(w.astype(ref_type)), (nb[keep] + a).astype(pos_type), cause_k,
                       shared_if_constant(culprit[keep]), shared_if_constant(ref[keep].astype(ref_type)),
                       shared_if_constant(call_ref[keep].astype(ref_type))))

    # the lookups (hundreds of megabytes for millions of operations) go before the pieces are joined
    del by_bound, moving_ops, copies, end_order, end_sorted, launch_sorted, in_calls, in_loaders
    give_back()
    parts = sums.T.copy()
    _round_rows(parts[:, :4], busy_sum.astype(np.int64))
    steps = pd.DataFrame({"step": win["step"].to_numpy(), "start_ns": ws, "duration_ns": we - ws, "warmup": warm})
    for i, name in enumerate(PARTS):
        steps[name] = parts[:, i].round().astype(np.int64)
    # one column at a time, each batch's part freed as it is joined
    empty = (ref_type, pos_type, np.int8, np.int8, ref_type, ref_type)
    cols: list = [list(c) for c in zip(*pieces)] if pieces else [[np.zeros(0, t)] for t in empty]
    del pieces
    for i in range(len(cols)):
        # a column of one value (the window of a run without steps, the references of pieces that
        # have none) held as that value: pieces are read, never written
        cols[i] = np.concatenate(cols[i])
        if i != 1:
            cols[i] = shared_if_constant(cols[i])
    # the pieces' times from their positions, then the cuts go
    starts, ends = _piece_times(cuts, cols[1], like=s)
    del cuts
    cols[1] = None
    # a gap before every operation (back-to-back launches, each kernel on its own): the pieces end
    # where the operations start, and their ends are the operations' own column, not a copy (ten
    # million pieces: 80 MB less held)
    ends = shared_if_equal(ends, s)
    idle_frame = pd.DataFrame({
        "window": cols[0], "start_ns": starts, "end_ns": ends,
        # codes of few texts: compared and selected on often, where ten million strings cost seconds
        "cause": pd.Categorical.from_codes(cols[2], categories=list(PARTS)),
        "culprit": pd.Categorical.from_codes(cols[3], categories=list(CULPRITS)),
        "ref": cols[4], "call": cols[5]}, copy=False)  # the joined arrays as they are: no copy of millions
    return ProcessBreakdown(tl.pid, tl.has_steps, steps, idle_frame, op_times)


def _piece_times(cuts: np.ndarray, at: np.ndarray, step: int = 1 << 20,
                 like: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The start and end of each piece that runs from cut ``at[i]`` to the next: ``cuts[at]`` and
    ``cuts[at + 1]``. Pieces come in time order (their positions rise), so each start is written
    over ``cuts`` (made for it, no view of it kept) in place, ``step`` at a time, at or before the
    places still to be read, and ``cuts`` is cut to them: no third array of ten million times
    beside the cuts and the ends (80 MB). Where the ends equal ``like`` (the operations' starts: a gap
    before every operation) they are ``like`` itself, read-only (another 80 MB saved). ``at`` is changed."""
    n = len(at)
    rising = all(bool((at[a + 1:min(a + step, n - 1) + 1] > at[a:min(a + step, n - 1)]).all())
                 for a in range(0, n - 1, step))
    if not rising or cuts.base is not None or not cuts.flags.writeable:  # never seen: the two gathers
        starts = cuts[at]
        at += 1
        return starts, cuts[at]
    # None while every end so far is that of ``like``
    same = like is not None and len(like) == n and like.dtype == cuts.dtype
    ends = None if same else np.empty(n, dtype=cuts.dtype)
    for a in range(0, n, step):
        p = at[a:a + step]
        p += 1
        got = cuts[p]  # read before this batch's starts are written
        if ends is None and not np.array_equal(got, like[a:a + len(p)]):  # type: ignore[index]
            ends = np.empty(n, dtype=cuts.dtype)
            ends[:a] = like[:a]  # type: ignore[index]
        if ends is not None:
            ends[a:a + len(p)] = got
        del got
        p -= 1
        cuts[a:a + len(p)] = cuts[p]
    cuts.resize(n, refcheck=False)  # shrunk in place: the caller holds no other view of it
    if ends is None:
        ends = like.view()  # type: ignore[union-attr]
        ends.flags.writeable = False
    return cuts, ends


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
            cause[i], culprit[i], ref[i] = _TRANSFER, _COPY, copy


def _round_rows(parts: np.ndarray, totals: np.ndarray) -> None:
    """Round each row of fractional parts to integers that add up to its total (largest remainder)."""
    floor = np.floor(parts)
    rest = totals - floor.sum(axis=1)
    for r in np.flatnonzero(rest > 0):
        order = np.argsort(-(parts[r] - floor[r]), kind="stable")
        floor[r, order[: int(rest[r])]] += 1
    parts[:] = floor


def _longest(s: np.ndarray, e: np.ndarray) -> int:
    """The longest of the lengths ``e - s`` (0 for none or where every one is negative), :data:`CHUNK`
    operations at a time."""
    out = 0
    for a in range(0, len(s), CHUNK):
        out = max(out, int((e[a:a + CHUNK] - s[a:a + CHUNK]).max()))
    return out


def _op_times(tl: ProcessTimeline, ws: np.ndarray, we: np.ndarray, warm: np.ndarray) -> pd.DataFrame:
    """Per operation: exclusive time inside steady steps, and whether it was critical. Worked
    :data:`CHUNK` operations at a time (the latest end before them carried over), so that its
    arrays of the length of every operation are the two it gives: the values are the same."""
    ops, calls = tl.ops, tl.calls
    s, e = ops["start_ns"].to_numpy(np.int64), ops["end_ns"].to_numpy(np.int64)
    launch = ops["launch_ns"].to_numpy(np.int64)
    steady_ws, steady_we = (ws[~warm], we[~warm]) if (~warm).any() else (ws, we)
    transfer = ops["transfer"].to_numpy(bool)
    # an operation's own time is at most its length: 32-bit where every length fits (the rules sum
    # them, in 64 bits), ten million operations 40 MB less held
    exclusive = np.zeros(len(s), np.int32 if _longest(s, e) < 2**31 else np.int64)
    for group in (~transfer, transfer):
        # every operation in one group (no transfers, most runs): the columns themselves, not copies
        idx: slice | np.ndarray = slice(None) if group.all() else np.flatnonzero(group)
        n = len(s) if isinstance(idx, slice) else len(idx)
        before = np.iinfo(np.int64).min  # the latest end of the group's operations before the batch
        for a in range(0, n, CHUNK):
            at: slice | np.ndarray = slice(a, min(a + CHUNK, n)) if isinstance(idx, slice) else idx[a:a + CHUNK]
            ends = e[at]
            x0 = np.empty_like(ends)  # the end of the operations before, then where this one's own time starts
            x0[0] = before
            np.maximum.accumulate(ends[:-1], out=x0[1:])
            np.maximum(x0[1:], before, out=x0[1:])
            before = max(int(x0[-1]), int(ends[-1]))
            np.maximum(s[at], x0, out=x0)
            np.minimum(x0, ends, out=x0)
            covered = _covered_before(steady_ws, steady_we, ends)
            covered -= _covered_before(steady_ws, steady_we, x0)
            exclusive[at] = covered
            del covered, x0, ends
    # the next operation was launched before this one ended, or started right after it ended: it was
    # queued (a kernel queued deep has no launch time of its own in CUPTI's record, only an estimate
    # at its GPU start)
    critical = np.empty(len(s), bool)
    if len(s):
        last = np.iinfo(np.int64).max
        for a in range(0, len(s) - 1, CHUNK):
            b = min(a + CHUNK, len(s) - 1)
            np.less(launch[a + 1:b + 1], e[a:b], out=critical[a:b])
            critical[a:b] |= s[a + 1:b + 1] - e[a:b] <= BACK_TO_BACK_NS
        critical[-1] = bool((np.int64(last) < e[-1]) | (np.int64(last) - e[-1] <= BACK_TO_BACK_NS))
    if len(calls):
        in_calls = _Latest(calls["start_ns"].to_numpy(np.int64), calls["end_ns"].to_numpy(np.int64))
        for a in range(0, len(s), CHUNK):
            critical[a:a + CHUNK] |= in_calls.at(e[a:a + CHUNK], slack=SLACK_NS) >= 0
    # the operations' own ids and the arrays made here, not copies of them
    return pd.DataFrame({"op_id": ops["op_id"].to_numpy(), "steady_ns": exclusive, "critical": critical}, copy=False)
