"""A JSON header and numpy arrays in one file, read back mapped without a copy: the form of the
files kept beside a report (:mod:`.sidecar`).

The file: an 8-byte magic, a little-endian u64 header length, the JSON header, then the arrays,
each at a multiple of :data:`ALIGN` bytes. The header names each array by ``[offset, count]``
from where the arrays begin. Reading checks the magic, the header's ``version`` and ``key`` (the
report it was made from), and that each array it views lies inside the file.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

import numpy as np

ALIGN = 64

View = Callable[[list[int], str], np.ndarray]  # ([offset, count], dtype) -> the array, in place


def _pad(n: int) -> int:
    return -n % ALIGN


class Packer:
    """Lays out arrays after a header: :meth:`place` gives each its ``[offset, count]`` for the
    header, :meth:`chunks` the whole file."""

    def __init__(self) -> None:
        self.arrays: list[np.ndarray] = []
        self.offset = 0

    def place(self, a: Any, dtype: str) -> list[int]:
        """Add ``a`` (as ``dtype``); return its ``[offset, count]``."""
        a = np.ascontiguousarray(a, dtype=dtype)
        at = self.offset
        self.arrays.append(a)
        self.offset += a.nbytes + _pad(a.nbytes)
        return [at, len(a)]

    def chunks(self, magic: bytes, header: dict[str, Any]) -> list[bytes | memoryview]:
        """Return the file (``magic``, ``header``, then the arrays placed) as chunks to write."""
        data = json.dumps(header, separators=(",", ":")).encode()
        head = magic + struct.pack("<Q", len(data)) + data
        out: list[bytes | memoryview] = [head, b"\0" * _pad(len(head))]
        for a in self.arrays:
            out += [memoryview(a).cast("B"), b"\0" * _pad(a.nbytes)]
        return out


def unpack(buf: Any, magic: bytes, version: int, key: dict[str, int]) -> tuple[dict[str, Any], View] | None:
    """Return the header of the file in ``buf`` and a function that views its arrays (raising
    ValueError for one outside the file); None when the file is not whole, is of another kind or
    version, or was made from another report than ``key``'s."""
    size = len(buf)
    if size < 16 or bytes(buf[:8]) != magic:
        return None
    (n,) = struct.unpack("<Q", bytes(buf[8:16]))
    if 16 + n > size:
        return None
    try:
        h = json.loads(bytes(buf[16:16 + n]))
    except ValueError:
        return None
    if not isinstance(h, dict) or h.get("version") != version or h.get("key") != key:
        return None
    base = 16 + n + _pad(16 + n)

    def view(spec: list[int], dtype: str) -> np.ndarray:
        at, count = int(spec[0]), int(spec[1])
        if at < 0 or count < 0 or base + at + count * np.dtype(dtype).itemsize > size:
            raise ValueError("an array lies outside the file")
        return np.frombuffer(buf, dtype=dtype, count=count, offset=base + at)

    return h, view
