"""Levels of detail of the timeline's lanes: each zoom answered from bins computed once.

A window that holds too many slices to send is answered on a *grid*: buckets of ``2**k`` ns
from timeline time 0 (the index's ``start_ns``), ``k`` chosen so that a bucket is the nearest
power of two to one pixel (:func:`grid`). Buckets on a grid stay where they are as the view pans,
and the same bucket has the same answer whatever the window. A bucket holds what
:func:`.buckets.buckets` says of it: the exact fraction of its time that something ran,
the number of slices that start in it, and its dominant name.

For a lane of many slices those answers are computed once for every bucket of every grid from
the coarsest (one bucket for the lane) down to about one bucket per :data:`FINEST_SLICES`
slices (a *pyramid*, about ``2 / FINEST_SLICES`` buckets per slice, 16 bytes each), so that a
zoomed-out window is a slice of an array instead of thousands of binary searches spread over
the whole lane. Finer windows, and lanes of few slices, are computed from the slices themselves,
where the searches stay local. The pyramid is kept beside the report (``lod.bin``, as the index
is: :mod:`...trace.sidecar`) and read back mapped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...trace import sidecar
from ...trace.packed import Packer, unpack
from .buckets import buckets
from .tracks import Lane, TimelineIndex

FINEST_SLICES = 16  # the finest grid kept has at most one bucket per this many slices of the lane
MIN_SLICES = 50_000  # a lane with fewer answers from its slices (a millisecond or two at most)
CHUNK = 1 << 15  # buckets computed at once (bounds the memory of building: a few MB)
NAME = "lod.bin"
MAGIC = b"GSTLLOD1"
VERSION = 1
_ARRAYS = {"busy": "<u2", "count": "<i8", "name": "<i4"}  # busy in thousandths, as answered


@dataclass
class Pyramid:
    """A lane's buckets on the grids ``k_min..k_max``: ``busy[k]`` (thousandths), ``count[k]``,
    ``name[k]``, bucket ``b`` of grid ``k`` being [b * 2**k, (b + 1) * 2**k) in timeline times."""

    k_min: int
    busy: dict[int, np.ndarray]
    count: dict[int, np.ndarray]
    name: dict[int, np.ndarray]


def grid(t0: float, t1: float, px: int) -> int:
    """Return the grid (``k``: buckets of ``2**k`` ns) of a window [t0, t1) on ``px`` pixels: the
    power of two nearest one pixel's time, so that a window has 0.7 to 1.5 buckets a pixel."""
    width = max(float(t1) - float(t0), 1.0) / max(int(px), 1)
    return max(0, round(math.log2(width)))


def lane_buckets(lane: Lane, k: int, b0: int, b1: int, origin: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return busy, count and name (as :func:`.buckets.buckets`) of buckets ``b0..b1 - 1``
    of grid ``k``, computed from the lane's slices (``origin``: the index's start_ns)."""
    parts = []
    for a in range(b0, max(b1, b0), CHUNK):
        edges = origin + np.arange(a, min(a + CHUNK, b1) + 1, dtype=np.int64) * (1 << k)
        parts.append(buckets(lane, edges))
    if not parts:
        return np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
    return tuple(np.concatenate([p[i] for p in parts]) for i in range(3))  # type: ignore[return-value]


def levels(lane: Lane, origin: int) -> range:
    """Return the grids a pyramid of ``lane`` holds (none when the lane has few slices)."""
    if len(lane) < MIN_SLICES:
        return range(0)
    last = max(int(lane.end[-1]) - origin, 1)
    k_max = max(0, math.ceil(math.log2(last + 1)))  # one bucket holds the lane
    k_min = k_max
    while k_min > 0 and (last >> (k_min - 1)) + 1 <= len(lane) // FINEST_SLICES:
        k_min -= 1
    return range(k_min, k_max + 1)


def build(index: TimelineIndex, should_stop: Callable[[], bool] = lambda: False) -> dict[int, Pyramid]:
    """Return the pyramids of the index's lanes of many slices, by lane id (an empty dict, or
    what was built so far, if ``should_stop`` says so between grids)."""
    out: dict[int, Pyramid] = {}
    o = index.start_ns
    for lane in sorted(index.lanes, key=len, reverse=True):
        ks = levels(lane, o)
        if not ks:
            continue
        p = Pyramid(ks.start, {}, {}, {})
        for k in reversed(ks):
            if should_stop():
                return out
            n = ((int(lane.end[-1]) - o) >> k) + 1
            busy, count, name = lane_buckets(lane, k, 0, n, o)
            p.busy[k], p.count[k], p.name[k] = _thousandths(busy), count.astype(np.int64), name.astype(np.int32)
        out[lane.id] = p
    return out


def grid_buckets(lane: Lane, pyramid: Pyramid | None, k: int, b0: int, b1: int,
                 origin: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return busy (to the thousandth), count and name of buckets ``b0..b1 - 1`` of grid ``k``:
    from the pyramid when it holds that grid (what lies outside the lane is empty), else from the
    slices."""
    if pyramid is None or k not in pyramid.busy:
        busy, count, name = lane_buckets(lane, k, b0, b1, origin)
        return _thousandths(busy) / 1000, count, name
    n = b1 - b0
    busy, count, name = np.zeros(n), np.zeros(n, dtype=np.int64), np.full(n, -1, dtype=np.int32)
    lo, hi = max(b0, 0), min(b1, len(pyramid.busy[k]))
    if lo < hi:
        busy[lo - b0:hi - b0] = pyramid.busy[k][lo:hi] / 1000
        count[lo - b0:hi - b0] = pyramid.count[k][lo:hi]
        name[lo - b0:hi - b0] = pyramid.name[k][lo:hi]
    return busy, count, name


def _thousandths(busy: np.ndarray) -> np.ndarray:
    return np.rint(np.clip(busy, 0.0, 1.0) * 1000).astype(np.uint16)


def dump(pyramids: Mapping[int, Pyramid], key: dict[str, int]) -> list[bytes | memoryview]:
    """Return the file of ``pyramids`` (made from the report whose key is ``key``) as chunks."""
    pack = Packer()
    lanes = {str(lane_id): [[k, *(x for field, dt in _ARRAYS.items() for x in pack.place(getattr(p, field)[k], dt))]
                            for k in sorted(p.busy)]
             for lane_id, p in pyramids.items()}
    return pack.chunks(MAGIC, {"version": VERSION, "key": key, "lanes": lanes})


def load(buf: Any, key: dict[str, int]) -> dict[int, Pyramid] | None:
    """Return the pyramids held in ``buf`` (a file of :func:`dump`) when made from the report
    whose key is ``key``; None when not, or when the file is not whole."""
    unpacked = unpack(buf, MAGIC, VERSION, key)
    if unpacked is None:
        return None
    h, view = unpacked
    try:
        out = {}
        for lane_id, specs in h["lanes"].items():
            p = Pyramid(min(int(s[0]) for s in specs), {}, {}, {})
            for s in specs:
                k = int(s[0])
                for i, (field, dt) in enumerate(_ARRAYS.items()):
                    getattr(p, field)[k] = view(s[1 + 2 * i:3 + 2 * i], dt)
                if not len(p.busy[k]) == len(p.count[k]) == len(p.name[k]):
                    return None
            out[int(lane_id)] = p
        return out
    except (KeyError, TypeError, ValueError, IndexError):
        return None


def cached(path: Path) -> dict[int, Pyramid] | None:
    """Return the pyramids kept beside the report at ``path`` while they match it, else None."""
    mapped = sidecar.read(path, NAME)
    if mapped is None:
        return None
    return load(mapped.buffer(), sidecar.report_key(path))


def keep(path: Path, pyramids: Mapping[int, Pyramid], key: dict[str, int]) -> Path | None:
    """Write ``pyramids`` beside the report at ``path``; return where, or None where it could not."""
    return sidecar.write(path, NAME, dump(pyramids, key))
