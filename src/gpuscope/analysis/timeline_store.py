"""A timeline index kept beside its report (:mod:`..trace.sidecar`), so that ``gpuscope view``
starts without reading every slice of the report again.

The file ``timeline.bin``: the magic ``GSTLINDX``, a little-endian u64 header length, a JSON
header (the report's key, format version, span, steps, names, tracks, and per lane the offset of
each array), then the arrays themselves, each at a multiple of 64 bytes. Loading maps the file
and views the arrays in place (no copy: the operating system pages in what a window query
touches), after checking the magic, the version, the report's key and that every array lies
inside the file; a file that fails a check is ignored (and rewritten).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np

from ..trace import sidecar
from .timeline_tracks import Lane, TimelineIndex, Track

NAME = "timeline.bin"
MAGIC = b"GSTLINDX"
VERSION = 2  # 2: Python samples as a flame strip
ALIGN = 64
_LANE_ARRAYS = {"start": "<i8", "end": "<i8", "name": "<i4", "src": "i1", "cum": "<i8"}
_COUNTER_ARRAYS = {"t": "<i8", "v": "<f8"}


def _pad(n: int) -> int:
    return -n % ALIGN


def dump(index: TimelineIndex, key: dict[str, int]) -> list[bytes | memoryview]:
    """Return the file of ``index`` (made from the report whose key is ``key``) as chunks of bytes."""
    arrays: list[np.ndarray] = []
    offset = 0

    def place(a: np.ndarray, dtype: str) -> list[int]:
        nonlocal offset
        a = np.ascontiguousarray(a, dtype=dtype)
        at = offset
        arrays.append(a)
        offset += a.nbytes + _pad(a.nbytes)
        return [at, len(a)]

    lanes = [{"id": ln.id, "track": ln.track, "depth": ln.depth,
              **{k: place(getattr(ln, k), dt) for k, dt in _LANE_ARRAYS.items()}} for ln in index.lanes]
    tracks = []
    for t in index.tracks:
        d = {"id": t.id, "group": t.group, "label": t.label, "kind": t.kind, "lanes": t.lanes, "pid": t.pid,
             "counter": t.counter, "tid": t.tid, "device": t.device, "stream": t.stream}
        if t.t is not None and t.v is not None:
            d.update({k: place(getattr(t, k), dt) for k, dt in _COUNTER_ARRAYS.items()})
        tracks.append(d)
    header = json.dumps({"version": VERSION, "key": key, "start_ns": index.start_ns, "end_ns": index.end_ns,
                         "steps": index.steps, "steps_found": index.steps_found, "names": index.names,
                         "tracks": tracks, "lanes": lanes}, separators=(",", ":")).encode()
    head = MAGIC + struct.pack("<Q", len(header)) + header
    chunks: list[bytes | memoryview] = [head, b"\0" * _pad(len(head))]
    for a in arrays:
        chunks += [memoryview(a).cast("B"), b"\0" * _pad(a.nbytes)]
    return chunks


def load(buf: Any, key: dict[str, int]) -> TimelineIndex | None:
    """Return the index held in ``buf`` (a file of :func:`dump`) when it was made from the report
    whose key is ``key``; None when it was not, or the file is not whole."""
    size = len(buf)
    if size < 16 or bytes(buf[:8]) != MAGIC:
        return None
    (n,) = struct.unpack("<Q", bytes(buf[8:16]))
    if 16 + n > size:
        return None
    try:
        h = json.loads(bytes(buf[16:16 + n]))
    except ValueError:
        return None
    if not isinstance(h, dict) or h.get("version") != VERSION or h.get("key") != key:
        return None
    base = 16 + n + _pad(16 + n)

    def view(spec: list[int], dtype: str) -> np.ndarray:
        at, count = int(spec[0]), int(spec[1])
        nbytes = count * np.dtype(dtype).itemsize
        if at < 0 or count < 0 or base + at + nbytes > size:
            raise ValueError("an array lies outside the file")
        return np.frombuffer(buf, dtype=dtype, count=count, offset=base + at)

    try:
        lanes = [Lane(int(d["id"]), int(d["track"]), int(d["depth"]),
                      **{k: view(d[k], dt) for k, dt in _LANE_ARRAYS.items()}) for d in h["lanes"]]
        tracks = []
        for d in h["tracks"]:
            extra = {k: view(d[k], dt) for k, dt in _COUNTER_ARRAYS.items()} if "t" in d else {}
            tracks.append(Track(int(d["id"]), str(d["group"]), str(d["label"]), str(d["kind"]), list(d["lanes"]),
                                pid=d["pid"], counter=d["counter"], tid=d["tid"], device=d["device"],
                                stream=d["stream"], **extra))
        if any(len(ln.cum) != len(ln) + 1 or len(ln.end) != len(ln) for ln in lanes):
            return None
        steps = [(int(a), int(b), int(c), int(e)) for a, b, c, e in h["steps"]]
        return TimelineIndex(tracks, lanes, [str(x) for x in h["names"]], int(h["start_ns"]), int(h["end_ns"]),
                             steps, steps_found=bool(h["steps_found"]))
    except (KeyError, TypeError, ValueError, IndexError):
        return None


def cached(path: Path) -> TimelineIndex | None:
    """Return the index kept beside the report at ``path`` while it matches the report, else None."""
    mapped = sidecar.read(path, NAME)
    if mapped is None:
        return None
    return load(mapped.buffer(), sidecar.report_key(path))  # the arrays hold the map open


def keep(path: Path, index: TimelineIndex, key: dict[str, int]) -> Path | None:
    """Write ``index`` beside the report at ``path`` (made from it when its key was ``key``);
    return where it went, or None where it could not be written."""
    return sidecar.write(path, NAME, dump(index, key))
