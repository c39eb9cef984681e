"""Buckets of a lane: what ran in each span of time between given edges.

For each bucket the fraction of its time that something ran (exact: slices of a lane never
overlap, so busy time up to any instant is a prefix sum and a binary search), the number of
slices that start in it, and the name that dominates it: the most frequent at :data:`SAMPLES`
instants spread over it, else the longest slice starting in it. The cost is a few binary searches
per bucket, whatever the lane's size. Used per pixel by :mod:`.window` and per grid by
:mod:`.lod`.
"""

from __future__ import annotations

import numpy as np

from .tracks import Lane

SAMPLES = 5  # instants per bucket that vote for its dominant name


def buckets(lane: Lane, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return, for each bucket [edges[p], edges[p + 1]) (sorted ns), the fraction of its time
    that something ran (0..1, exact), the number of slices that start in it, and the name that
    dominates it: the most frequent at :data:`SAMPLES` instants spread over it, else the longest
    slice starting in it, else -1."""
    edges = np.asarray(edges, dtype=np.int64)
    n = len(edges) - 1
    if n <= 0 or not len(lane):
        return np.zeros(max(n, 0)), np.zeros(max(n, 0), dtype=np.int64), np.full(max(n, 0), -1, dtype=np.int32)
    width = np.diff(edges)
    busy = np.clip(np.diff(busy_before(lane, edges)) / np.maximum(width, 1), 0.0, 1.0)
    starts = np.searchsorted(lane.start, edges, "left")
    count = np.diff(starts)
    at = edges[:-1, None] + (((np.arange(SAMPLES) + 0.5) / SAMPLES)[None, :] * width[:, None]).astype(np.int64)
    j = np.searchsorted(lane.start, at, "right") - 1
    jc = np.clip(j, 0, len(lane) - 1)
    names = np.where((j >= 0) & (lane.end[jc] > at), lane.name[jc], -1)
    votes = (names[:, :, None] == names[:, None, :]).sum(axis=2) * (names >= 0)
    name = names[np.arange(n), votes.argmax(axis=1)]
    name = np.where(votes.max(axis=1) > 0, name, -1).astype(np.int32)
    empty = np.flatnonzero((name < 0) & (count > 0))
    if len(empty):  # nothing ran at the sampled instants: the longest slice starting in the bucket
        name[empty] = lane.name[longest(lane, starts[empty], starts[empty + 1])]
    return busy, count, name


def longest(lane: Lane, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Return, for each non-empty run of slices [lo[i], hi[i]), the index of its longest slice
    (the first of equals)."""
    lens = hi - lo
    if int(lens.sum()) > 64 * len(lo):  # long runs: one argmax each, on the arrays in place
        return np.array([a + int(np.argmax(lane.end[a:b] - lane.start[a:b])) for a, b in zip(lo.tolist(), hi.tolist())],
                        dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lens)[:-1]])
    seg = np.repeat(np.arange(len(lo)), lens)
    pos = np.arange(int(lens.sum())) - offsets[seg] + lo[seg]
    dur = lane.end[pos] - lane.start[pos]
    is_max = dur == np.maximum.reduceat(dur, offsets)[seg]
    return np.minimum.reduceat(np.where(is_max, pos, np.iinfo(np.int64).max), offsets)


def busy_before(lane: Lane, t: np.ndarray) -> np.ndarray:
    """Return, for each instant of ``t``, the time (ns) the lane's slices ran before it."""
    j = np.searchsorted(lane.start, t, "right") - 1
    jc = np.clip(j, 0, max(len(lane) - 1, 0))
    if not len(lane):
        return np.zeros(len(t), dtype=np.int64)
    inside = np.clip(t - lane.start[jc], 0, lane.end[jc] - lane.start[jc])
    return np.where(j >= 0, lane.cum[jc] + inside, 0)
