"""Window queries on a timeline index, with level of detail.

Times in and out are *timeline times*: ns from the index's ``start_ns`` (small enough for a
browser's doubles). A window is a time span drawn on ``px`` pixels. A lane with few slices in the window answers with
the slices themselves; a lane with more answers with one bucket per pixel: the fraction of the
pixel's time that something ran (exact: slices of a lane never overlap, so busy time up to any
instant is a prefix sum and a binary search), the number of slices that start in it, and the name
that dominates it (the most frequent of :data:`SAMPLES` instants spread over the pixel, else the
longest slice starting in it). Counters answer with their samples, or per pixel the last, the
lowest and the highest value. The cost is a few binary searches per pixel, whatever the report's size.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .timeline_tracks import Lane, TimelineIndex

# A lane answers with slices when at most this many are in the window (and at most two per pixel).
MAX_SLICES = 4000
SAMPLES = 5  # instants per pixel that vote for its dominant name


def lane_window(lane: Lane, t0: int, t1: int, px: int, max_slices: int = MAX_SLICES, origin: int = 0) -> dict[str, Any]:
    """Return the slices of ``lane`` in [t0, t1) or, when there are more than ``max_slices`` (or
    two a pixel), its buckets: ``{"lane", "kind": "slices", "first", "start", "end", "name"}`` with
    ``first`` the index of the first slice (slice ``first + i`` is ``start[i]``...; times less
    ``origin``), or
    ``{"lane", "kind": "buckets", "busy" (0..1 per pixel), "count", "name" (-1: none)}``."""
    i0 = int(np.searchsorted(lane.end, t0, "right"))  # ends are sorted: slices of a lane never overlap
    i1 = int(np.searchsorted(lane.start, t1, "left"))
    n = max(0, i1 - i0)
    if n <= min(max_slices, 2 * px):
        return {"lane": lane.id, "kind": "slices", "first": i0, "start": (lane.start[i0:i1] - origin).tolist(),
                "end": (lane.end[i0:i1] - origin).tolist(), "name": lane.name[i0:i1].tolist()}
    edges = t0 + (np.arange(px + 1, dtype=np.float64) * ((t1 - t0) / px)).astype(np.int64)
    busy = np.diff(busy_before(lane, edges)) / np.maximum(np.diff(edges), 1)
    starts = np.searchsorted(lane.start, edges, "left")
    count = np.diff(starts)
    width = (t1 - t0) / px
    at = (t0 + (np.arange(px)[:, None] + (np.arange(SAMPLES) + 0.5)[None, :] / SAMPLES) * width).astype(np.int64)
    j = np.searchsorted(lane.start, at, "right") - 1
    jc = np.clip(j, 0, len(lane) - 1)
    hit = (j >= 0) & (lane.end[jc] > at)
    names = np.where(hit, lane.name[jc], -1)
    votes = (names[:, :, None] == names[:, None, :]).sum(axis=2) * (names >= 0)
    dominant = names[np.arange(px), votes.argmax(axis=1)]
    dominant = np.where(votes.max(axis=1) > 0, dominant, -1)
    empty = (dominant < 0) & (count > 0)
    if empty.any():  # nothing ran at the sampled instants: the longest slice starting in the pixel
        for p in np.flatnonzero(empty):
            a, b = starts[p], starts[p + 1]
            dur = lane.end[a:b] - lane.start[a:b]
            dominant[p] = lane.name[a + int(dur.argmax())]
    return {"lane": lane.id, "kind": "buckets", "busy": np.round(np.clip(busy, 0.0, 1.0), 3).tolist(),
            "count": count.tolist(), "name": dominant.astype(int).tolist()}


def busy_before(lane: Lane, t: np.ndarray) -> np.ndarray:
    """Return, for each instant of ``t``, the time (ns) the lane's slices ran before it."""
    j = np.searchsorted(lane.start, t, "right") - 1
    jc = np.clip(j, 0, max(len(lane) - 1, 0))
    if not len(lane):
        return np.zeros(len(t), dtype=np.int64)
    inside = np.clip(t - lane.start[jc], 0, lane.end[jc] - lane.start[jc])
    return np.where(j >= 0, lane.cum[jc] + inside, 0)


def window(index: TimelineIndex, t0: int, t1: int, px: int, lanes: list[int] | None = None,
           max_slices: int = MAX_SLICES) -> dict[str, Any]:
    """Return the window [t0, t1) (timeline times) on ``px`` pixels of every lane (or of ``lanes``):
    ``{"t0", "t1", "px", "lanes": [lane_window...], "names": {position: name}}`` with only the
    names it uses."""
    px = max(1, min(int(px), 8192))
    t0 = int(t0)
    t1 = max(int(t1), t0 + 1)
    o = index.start_ns
    chosen = index.lanes if lanes is None else [index.lanes[i] for i in lanes if 0 <= i < len(index.lanes)]
    out = [lane_window(lane, t0 + o, t1 + o, px, max_slices, origin=o) for lane in chosen]
    used = {n for w in out for n in w["name"] if n >= 0}
    return {"t0": int(t0), "t1": t1, "px": px, "lanes": out, "names": {int(n): index.names[n] for n in sorted(used)}}


def counters(index: TimelineIndex, t0: int, t1: int, px: int) -> list[dict[str, Any]]:
    """Return each counter track's samples in [t0, t1) (timeline times; with the one before, so
    that its line starts at t0): ``{"track", "t", "v"}``, or with more samples than pixels, per
    pixel ``{"track", "t", "v" (last value), "lo", "hi"}``."""
    out = []
    o = index.start_ns
    t0, t1 = int(t0) + o, max(int(t1), int(t0) + 1) + o
    for track in index.tracks:
        if track.kind != "counter" or track.t is None or track.v is None:
            continue
        i0 = max(int(np.searchsorted(track.t, t0, "left")) - 1, 0)
        i1 = int(np.searchsorted(track.t, t1, "left"))
        t, v = track.t[i0:i1], track.v[i0:i1]
        if len(t) <= 2 * px:
            out.append({"track": track.id, "t": (t - o).tolist(), "v": _finite(v)})
            continue
        b = np.clip(((t - t0) * px) // max(t1 - t0, 1), 0, px - 1)
        cut = np.flatnonzero(np.diff(b)) + 1
        first = np.concatenate([[0], cut])
        last = np.concatenate([cut - 1, [len(t) - 1]])
        out.append({"track": track.id, "t": (t[first] - o).tolist(), "v": _finite(v[last]),
                    "lo": _finite(np.minimum.reduceat(v, first)), "hi": _finite(np.maximum.reduceat(v, first))})
    return out


def _finite(v: np.ndarray) -> list[float | None]:
    return [float(x) if np.isfinite(x) else None for x in v]
