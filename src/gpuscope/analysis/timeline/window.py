"""Window queries on a timeline index, with level of detail.

Times in and out are *timeline times*: ns from the index's ``start_ns`` (small enough for a
browser's doubles). A window is a time span drawn on ``px`` pixels. A lane with few slices in the
window answers with the slices themselves; a lane with more answers with buckets (:func:`buckets`):
the fraction of the bucket's time that something ran (exact: slices of a lane never overlap, so
busy time up to any instant is a prefix sum and a binary search), the number of slices that start
in it, and the name that dominates it (the most frequent of :data:`SAMPLES` instants spread over
the bucket, else the longest slice starting in it: :mod:`.buckets`). :func:`lane_window` (the file's timeline) puts
one bucket on each pixel; :func:`window` (the viewer's) puts them on the window's power-of-two grid,
read from the lane's pyramid where one was computed (:mod:`.lod`). Counters answer with
their samples, or per pixel the last, the lowest and the highest value.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from .buckets import SAMPLES, buckets, busy_before, longest
from .lod import grid, grid_buckets
from .tracks import Lane, TimelineIndex

__all__ = ["MAX_SLICES", "SAMPLES", "buckets", "busy_before", "counters", "lane_window", "longest", "slices_in", "window"]

# A lane answers with slices when at most this many are in the window (and at most two per pixel).
MAX_SLICES = 4000


def lane_window(lane: Lane, t0: int, t1: int, px: int, max_slices: int = MAX_SLICES, origin: int = 0) -> dict[str, Any]:
    """Return the slices of ``lane`` in [t0, t1) or, when there are more than ``max_slices`` (or
    two a pixel), its buckets: ``{"lane", "kind": "slices", "first", "start", "end", "name"}`` with
    ``first`` the index of the first slice (slice ``first + i`` is ``start[i]``...; times less
    ``origin``), or
    ``{"lane", "kind": "buckets", "busy" (0..1 per pixel), "count", "name" (-1: none)}``."""
    few = slices_in(lane, t0, t1, min(max_slices, 2 * px), origin)
    if few is not None:
        return few
    edges = t0 + (np.arange(px + 1, dtype=np.float64) * ((t1 - t0) / px)).astype(np.int64)
    busy, count, name = buckets(lane, edges)
    return {"lane": lane.id, "kind": "buckets", "busy": np.round(busy, 3).tolist(), "count": count.tolist(),
            "name": name.tolist()}


def slices_in(lane: Lane, t0: int, t1: int, limit: int, origin: int = 0, arrays: bool = False) -> dict[str, Any] | None:
    """Return the slices of ``lane`` in [t0, t1) as :func:`lane_window` does (``arrays``: as numpy
    arrays, not lists), or None when there are more than ``limit``."""
    i0 = int(np.searchsorted(lane.end, t0, "right"))  # ends are sorted: slices of a lane never overlap
    i1 = int(np.searchsorted(lane.start, t1, "left"))
    if max(0, i1 - i0) > limit:
        return None
    i1 = max(i0, i1)
    start, end, name = lane.start[i0:i1] - origin, lane.end[i0:i1] - origin, lane.name[i0:i1]
    if not arrays:
        start, end, name = start.tolist(), end.tolist(), name.tolist()
    return {"lane": lane.id, "kind": "slices", "first": i0, "start": start, "end": end, "name": name}


def window(index: TimelineIndex, t0: int, t1: int, px: int, lanes: list[int] | None = None,
           max_slices: int = MAX_SLICES, lod: Mapping[int, Any] | None = None, arrays: bool = False) -> dict[str, Any]:
    """Return the window [t0, t1) (timeline times) on ``px`` pixels of every lane (or of ``lanes``):
    ``{"t0", "t1", "px", "lanes": [...], "names": {position: name}}`` with only the names it uses.
    A lane with few slices in the window (as :func:`lane_window`) answers with them, a lane with
    more with buckets on the window's grid (:mod:`.lod`): ``{"lane", "kind": "buckets",
    "t0", "step", "busy", "count", "name"}``, bucket ``i`` being [t0 + i * step, t0 + (i + 1) * step),
    taken from the lane's pyramid in ``lod`` (by lane id) where it holds that grid. ``arrays``:
    each lane's values as numpy arrays, not lists."""
    px = max(1, min(int(px), 8192))
    t0 = int(t0)
    t1 = max(int(t1), t0 + 1)
    o = index.start_ns
    k = grid(t0, t1, px)
    b0, b1 = t0 >> k, ((t1 - 1) >> k) + 1
    chosen = index.lanes if lanes is None else [index.lanes[i] for i in lanes if 0 <= i < len(index.lanes)]
    out = []
    for lane in chosen:
        w = slices_in(lane, t0 + o, t1 + o, min(max_slices, 2 * px), origin=o, arrays=True)
        if w is None:
            busy, count, name = grid_buckets(lane, (lod or {}).get(lane.id), k, b0, b1, o)
            w = {"lane": lane.id, "kind": "buckets", "t0": b0 << k, "step": 1 << k, "busy": busy, "count": count,
                 "name": name}
        out.append(w)
    used = np.unique(np.concatenate([w["name"] for w in out])) if out else np.zeros(0, dtype=np.int32)
    if not arrays:
        for w in out:
            for key in ("start", "end", "busy", "count", "name"):
                if key in w:
                    w[key] = w[key].tolist()
    return {"t0": int(t0), "t1": t1, "px": px, "lanes": out,
            "names": {int(n): index.names[n] for n in used.tolist() if n >= 0}}


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
