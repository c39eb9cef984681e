"""A timeline index kept beside its report (:mod:`...trace.sidecar`), so that ``gpuscope view``
starts without reading every slice of the report again.

The file ``timeline.bin`` (:mod:`...trace.packed`): the magic ``GSTLINDX``, a JSON header (the
report's key, format version, span, steps, names, tracks, and per lane the offset of each array),
then the arrays themselves, each at a multiple of 64 bytes. Loading maps the file
and views the arrays in place (no copy: the operating system pages in what a window query
touches), after checking the magic, the version, the report's key and that every array lies
inside the file; a file that fails a check is ignored (and rewritten).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...trace import sidecar
from ...trace.packed import Packer, unpack
from .tracks import Lane, TimelineIndex, Track

NAME = "timeline.bin"
MAGIC = b"GSTLINDX"
VERSION = 4  # 2: Python samples as a flame strip; 3: thread lanes named by the thread's name; 4: the overhead probe's steps
_LANE_ARRAYS = {"start": "<i8", "end": "<i8", "name": "<i4", "src": "i1", "cum": "<i8"}
_COUNTER_ARRAYS = {"t": "<i8", "v": "<f8"}


def dump(index: TimelineIndex, key: dict[str, int]) -> list[bytes | memoryview]:
    """Return the file of ``index`` (made from the report whose key is ``key``) as chunks to write."""
    pack = Packer()
    lanes = [{"id": ln.id, "track": ln.track, "depth": ln.depth,
              **{k: pack.place(getattr(ln, k), dt) for k, dt in _LANE_ARRAYS.items()}} for ln in index.lanes]
    tracks = []
    for t in index.tracks:
        d = {"id": t.id, "group": t.group, "label": t.label, "kind": t.kind, "lanes": t.lanes, "pid": t.pid,
             "counter": t.counter, "tid": t.tid, "device": t.device, "stream": t.stream}
        if t.t is not None and t.v is not None:
            d.update({k: pack.place(getattr(t, k), dt) for k, dt in _COUNTER_ARRAYS.items()})
        tracks.append(d)
    return pack.chunks(MAGIC, {"version": VERSION, "key": key, "start_ns": index.start_ns, "end_ns": index.end_ns,
                               "steps": index.steps, "steps_found": index.steps_found, "names": index.names,
                               "probe_steps": index.probe_steps,
                               "tracks": tracks, "lanes": lanes})


def load(buf: Any, key: dict[str, int]) -> TimelineIndex | None:
    """Return the index held in ``buf`` (a file of :func:`dump`) when it was made from the report
    whose key is ``key``; None when it was not, or the file is not whole."""
    unpacked = unpack(buf, MAGIC, VERSION, key)
    if unpacked is None:
        return None
    h, view = unpacked
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
        probe = [(int(a), int(b), int(c), int(e), str(w)) for a, b, c, e, w in h["probe_steps"]]
        return TimelineIndex(tracks, lanes, [str(x) for x in h["names"]], int(h["start_ns"]), int(h["end_ns"]),
                             steps, steps_found=bool(h["steps_found"]), probe_steps=probe)
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
