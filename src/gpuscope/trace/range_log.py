"""Logged ranges (PyTorch module calls) paired into ranges, in the launcher.

Inside the profiled process a module call appends to its thread's log only: its start as two
integers, the time and the bitwise complement of the range's *kind* (a negative number), and its
end as one integer, the time (capture/python/ranges.py). The flush thread hands each thread's
entries over as they are, as 64-bit integers (one ``range_log`` row per thread and flush), with the
kinds first named since the last flush (``range_kind`` rows). Pairing the starts with their ends
happens here, in the launcher, so that the program's interpreter does none of it: in the program,
pairing is work under its GIL beside its own threads, about as much as the calls themselves took.

A thread's starts and ends nest: an end closes the last start still open on its thread. Starts
still open at the end of a row wait for the next row of the same thread; those still open when the
report is finished are stored without an end (the process crashed or was killed inside them).
A start of a kind that is already open on its thread is a *re-entrant call* (counted), and an end
with no start open is counted and dropped.

Pairing is numpy over the whole row: the nesting level of each start and end from a running sum,
then, level by level in order, each end follows its start.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd

from ..capture.python.ranges import SAID

ID_BASE = 1 << 48  # logged ranges get ids above those of the ranges paired in the process


@dataclass
class Paired:
    """Ranges paired from one row: start and end times (session clock), and each one's kind."""

    start_ns: np.ndarray
    end_ns: np.ndarray  # -1 where the range has no end (still open when the report was finished)
    kind: np.ndarray


@dataclass
class _Thread:
    open_t: list[int] = field(default_factory=list)  # starts not yet ended, outermost first
    open_k: list[int] = field(default_factory=list)


class LoggedRanges:
    """Pairs the ``range_log`` rows of every process and thread; keeps what is still open between rows,
    and turns what is paired into ``nvtx_range`` rows (names interned by ``intern``)."""

    def __init__(self, intern: Callable[[str], int] | None = None) -> None:
        self._threads: dict[tuple[int, int], _Thread] = {}
        self._offset: dict[tuple[int, int], int] = {}
        self.counts: dict[int, dict[str, int]] = {}  # pid -> ranges, reentrant_calls, unbalanced_pops
        self._intern = intern or (lambda text: 0)
        self._kinds: dict[int, dict[int, tuple[int, int, str, str]]] = {}  # pid -> kind -> domain, name ids, ...
        self._next_id = ID_BASE

    def name_kinds(self, pid: int, rows: list[tuple[Any, ...]]) -> None:
        """Take ``range_kind`` rows (kind, name, domain, source, category) of process ``pid``."""
        table = self._kinds.setdefault(pid, {})
        for kind, name, domain, source, category in rows:
            table[int(kind)] = (self._intern(str(domain)), self._intern(str(name)), str(source), str(category))

    def frames(self, pid: int, rows: list[tuple[Any, ...]]) -> list[pd.DataFrame]:
        """Pair ``range_log`` rows (tid, clock offset, entries) of process ``pid``; return the ended
        ranges as frames of ``nvtx_range`` columns."""
        out = []
        for tid, offset_ns, blob in rows:
            frame = self.frame(pid, int(tid), self.add(pid, int(tid), int(offset_ns), bytes(blob)))
            if frame is not None:
                out.append(frame)
        return out

    def unfinished_frames(self) -> list[pd.DataFrame]:
        """Return the ranges still open (no end) as frames, and forget them: for the report's end."""
        frames = [self.frame(pid, tid, p) for pid, tid, p in self.unfinished()]
        return [f for f in frames if f is not None]

    def said(self) -> list[tuple[int, str]]:
        """What the pairing counted that a reader should know, per process (an ``info`` line each)."""
        return [(pid, f"{counts[key]} {SAID[key]}") for pid, counts in self.counts.items()
                for key in ("reentrant_calls", "unbalanced_pops") if counts[key]]

    def frame(self, pid: int, tid: int, p: Paired) -> pd.DataFrame | None:
        """``nvtx_range`` rows of the ranges ``p`` of thread ``tid``, or None where there are none."""
        n = len(p.kind)
        if not n:
            return None
        table = self._kinds.get(pid, {})
        uniq, inverse = np.unique(p.kind, return_inverse=True)
        info = [table.get(int(k)) or (self._intern(""), self._intern(f"unnamed range kind {int(k)}"), "gpuscope", "")
                for k in uniq]
        inverse = inverse.reshape(-1)
        ids = np.arange(self._next_id, self._next_id + n, dtype=np.int64)
        self._next_id += n
        return pd.DataFrame({
            "start_ns": p.start_ns,
            "end_ns": pd.arrays.IntegerArray(p.end_ns.astype(np.int64), p.end_ns < 0),
            "tid": np.full(n, tid, dtype=np.int64),
            "id": ids,
            "domain_id": np.array([i[0] for i in info], dtype=np.int32)[inverse],
            "name_id": np.array([i[1] for i in info], dtype=np.int32)[inverse],
            "kind": "range",
            "source": np.array([i[2] for i in info], dtype=object)[inverse],
            "category": np.array([i[3] for i in info], dtype=object)[inverse],
            "color": None,
            "pid": np.full(n, pid, dtype=np.int64),
        })

    def add(self, pid: int, tid: int, offset_ns: int, blob: bytes) -> Paired:
        """Pair one row's entries (``blob``: native-endian int64) with what the thread left open."""
        key = (pid, tid)
        state = self._threads.setdefault(key, _Thread())
        self._offset[key] = offset_ns
        entries = np.frombuffer(blob, dtype=np.int64)
        starts, ends, kinds, reentrant, unbalanced = pair(entries, state.open_t, state.open_k)
        counts = self.counts.setdefault(pid, {"ranges": 0, "reentrant_calls": 0, "unbalanced_pops": 0})
        counts["ranges"] += len(starts)
        counts["reentrant_calls"] += reentrant
        counts["unbalanced_pops"] += unbalanced
        return Paired(starts + offset_ns, ends + offset_ns, kinds)

    def unfinished(self) -> list[tuple[int, int, Paired]]:
        """Return the starts still open, per (pid, tid), without an end, and forget them."""
        out = []
        for (pid, tid), state in self._threads.items():
            if state.open_t:
                off = self._offset.get((pid, tid), 0)
                out.append((pid, tid, Paired(np.asarray(state.open_t, dtype=np.int64) + off,
                                             np.full(len(state.open_t), -1, dtype=np.int64),
                                             np.asarray(state.open_k, dtype=np.int64))))
                state.open_t.clear()
                state.open_k.clear()
        return out


def pair(entries: np.ndarray, open_t: list[int], open_k: list[int]
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    """Pair a thread's log ``entries`` after the starts ``open_t``/``open_k`` (outermost first).

    Return the ended ranges' starts, ends and kinds (in the order they end), the re-entrant starts
    and the stray ends among ``entries``; ``open_t``/``open_k`` are updated in place to the starts
    still open. A malformed entry (a kind with no time before it) is dropped.
    """
    entries = np.asarray(entries, dtype=np.int64)
    is_kind = entries < 0
    is_start = np.zeros(len(entries), dtype=bool)
    kind_at = np.flatnonzero(is_kind)
    kind_at = kind_at[kind_at > 0]
    kind_at = kind_at[~is_kind[kind_at - 1]]  # a kind right after a time: that time starts a range
    is_start[kind_at - 1] = True
    times_at = np.flatnonzero(~is_kind)
    ev_t = entries[times_at]
    ev_start = is_start[times_at]
    ev_kind = np.full(len(times_at), -1, dtype=np.int64)
    ev_kind[ev_start] = ~entries[times_at[ev_start] + 1]
    carried = len(open_t)
    t = np.concatenate([np.asarray(open_t, dtype=np.int64), ev_t])
    s = np.concatenate([np.ones(carried, dtype=bool), ev_start])
    k = np.concatenate([np.asarray(open_k, dtype=np.int64), ev_kind])
    depth = np.cumsum(np.where(s, 1, -1))
    if len(depth) and depth.min() < 0:  # an end with nothing open: the loop drops it
        return _pair_loop(t, s, k, carried, open_t, open_k)
    level = np.where(s, depth - 1, depth)
    order = np.lexsort((np.arange(len(t)), level))  # by level, then in order: start, end, start, end, ...
    end_pos = np.flatnonzero(~s[order])
    start_idx, end_idx = order[end_pos - 1], order[end_pos]
    ended = np.zeros(len(t), dtype=bool)
    ended[start_idx] = True
    still_open = np.flatnonzero(s & ~ended)  # in order: outermost first
    reentrant = _reentrant(s, k, level, carried)
    by_end = np.argsort(end_idx, kind="stable")
    start_idx, end_idx = start_idx[by_end], end_idx[by_end]
    open_t[:] = t[still_open].tolist()
    open_k[:] = k[still_open].tolist()
    return t[start_idx], t[end_idx], k[start_idx], reentrant, 0


def _reentrant(s: np.ndarray, k: np.ndarray, level: np.ndarray, carried: int) -> int:
    """Count the starts (after the first ``carried``) whose kind is already open around them."""
    starts = np.flatnonzero(s)
    if len(starts) < 2:
        return 0
    lv = level[starts]
    n = len(s) + 1
    keys = lv * n + starts  # starts sorted by level, then position
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    # the parent of a start at level L: the last start at level L - 1 before it
    probe = (lv - 1) * n + starts
    at = np.searchsorted(sorted_keys, probe) - 1
    parent = np.full(len(starts), -1, dtype=np.int64)
    ok = (lv > 0) & (at >= 0)
    cand = order[np.clip(at, 0, None)]
    ok &= lv[cand] == lv - 1
    parent[ok] = cand[ok]
    kinds = k[starts]
    hit = np.zeros(len(starts), dtype=bool)
    anc = parent.copy()
    while True:
        live = anc >= 0
        if not live.any():
            break
        hit[live] |= kinds[anc[live]] == kinds[live]
        anc[live] = parent[anc[live]]
    return int(hit[starts >= carried].sum())


def _pair_loop(t: np.ndarray, s: np.ndarray, k: np.ndarray, carried: int, open_t: list[int], open_k: list[int]
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    """:func:`pair` one event at a time (where an end comes with nothing open)."""
    stack_t: list[int] = []
    stack_k: list[int] = []
    out_s: list[int] = []
    out_e: list[int] = []
    out_k: list[int] = []
    reentrant = unbalanced = 0
    for i, (ti, si, ki) in enumerate(zip(t.tolist(), s.tolist(), k.tolist())):
        if si:
            if i >= carried and ki in stack_k:
                reentrant += 1
            stack_t.append(ti)
            stack_k.append(ki)
        elif stack_t:
            out_s.append(stack_t.pop())
            out_k.append(stack_k.pop())
            out_e.append(ti)
        else:
            unbalanced += 1
    open_t[:] = stack_t
    open_k[:] = stack_k
    as_array = lambda v: np.asarray(v, dtype=np.int64)  # noqa: E731
    return as_array(out_s), as_array(out_e), as_array(out_k), reentrant, unbalanced
