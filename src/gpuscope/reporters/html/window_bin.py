"""The binary form of a timeline window, as the viewer's page asks for it (``/api/window?...&bin=1``).

The same answer as the JSON of :func:`...analysis.timeline.window.window`, but its arrays as
little-endian arrays the page views in place (``assets/timeline.js``, ``decodeWindow``) instead of
text to print and parse: a zoom's answer is smaller and costs less on both sides.

Layout: a u32 length ``n``, four zero bytes, ``n`` bytes of UTF-8 JSON (the answer without its
lanes' arrays: each lane says its length ``n`` instead; names and counters as in the JSON), then
each lane's arrays in order, each starting at a multiple of 8 bytes: a lane of slices ``start``,
``end`` (f64, timeline times) and ``name`` (i32); a lane of buckets ``busy`` (u16, thousandths),
``count`` (u32) and ``name`` (i32).
"""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np

_SLICES = (("start", "<f8"), ("end", "<f8"), ("name", "<i4"))
_BUCKETS = (("busy", "<u2"), ("count", "<u4"), ("name", "<i4"))


def _pad(n: int) -> bytes:
    return b"\0" * (-n % 8)


def encode(answer: dict[str, Any]) -> bytes:
    """Return ``answer`` (a window with its lanes' values as numpy arrays: ``window(...,
    arrays=True)``, with its ``counters``) in the binary form."""
    lanes, arrays = [], []
    for w in answer["lanes"]:
        fields = _SLICES if w["kind"] == "slices" else _BUCKETS
        lanes.append({k: v for k, v in w.items() if k not in dict(fields)} | {"n": len(w["name"])})
        for key, dtype in fields:
            a = np.asarray(w[key])
            if key == "busy":
                a = np.rint(a * 1000)
            arrays.append(np.ascontiguousarray(a, dtype=dtype).tobytes())
    head = json.dumps({**answer, "lanes": lanes}, separators=(",", ":"), default=str).encode()
    out = [struct.pack("<II", len(head), 0), head, _pad(8 + len(head))]
    for a in arrays:
        out += [a, _pad(len(a))]
    return b"".join(out)


def decode(data: bytes) -> dict[str, Any]:
    """Return the answer held in ``data`` (the binary form) with its arrays as lists, as the JSON
    answer has them (what the page makes of it)."""
    (n,) = struct.unpack_from("<I", data, 0)
    answer = json.loads(data[8:8 + n])
    at = 8 + n + (-(8 + n) % 8)
    for w in answer["lanes"]:
        count = w.pop("n")
        for key, dtype in _SLICES if w["kind"] == "slices" else _BUCKETS:
            a = np.frombuffer(data, dtype=dtype, count=count, offset=at)
            at += a.nbytes + (-a.nbytes % 8)
            w[key] = (a / 1000).tolist() if key == "busy" else a.tolist()
    return answer
