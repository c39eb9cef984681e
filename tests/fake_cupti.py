"""Fake CUPTI activity objects over real CUPTI struct layouts, for testing record handling on CPU.

The objects mimic what cupti-python hands to a buffer-completed callback: each has the class name of
its struct version (``ActivityKernel11``) and a ``ptr`` to its bytes, here in one numpy buffer laid
out as CUPTI lays out an activity buffer.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np


def dtype(cupti: Any, struct: str) -> np.dtype:
    from gpuscope.capture.cupti.activity import struct_dtypes

    return struct_dtypes(cupti)[struct.lower()]


_CLASSES: dict[str, type] = {}
_CSTRINGS: dict[str, Any] = {}


class FakeBuffer:
    """Holds records of several struct types back to back, like a CUPTI activity buffer."""

    def __init__(self, cupti: Any) -> None:
        self.cupti = cupti
        self.parts: list[tuple[str, np.ndarray]] = []

    def cstring(self, text: str) -> int:
        """Return the address of a C string holding ``text``; one per text, as CUPTI keeps names."""
        buf = _CSTRINGS.get(text)
        if buf is None:
            buf = _CSTRINGS[text] = ctypes.create_string_buffer(text.encode())
        return ctypes.addressof(buf)

    def add(self, struct: str, **fields: Any) -> None:
        rec = np.zeros(1, dtype=dtype(self.cupti, struct))
        for k, v in fields.items():
            if isinstance(v, str):
                v = self.cstring(v)
            rec[k] = v
        self.parts.append((struct, rec))

    def activities(self) -> list[Any]:
        """Return activity objects whose ``ptr`` point into one contiguous block."""
        blob = b"".join(rec.tobytes() for _, rec in self.parts)
        self.block = np.frombuffer(bytearray(blob), dtype=np.uint8)
        base = self.block.ctypes.data
        out, off = [], 0
        for struct, rec in self.parts:
            cls = _CLASSES.setdefault(struct, type(struct, (), {}))
            obj = cls()
            obj.ptr = base + off
            obj.kind = int(rec["kind"][0])
            out.append(obj)
            off += rec.dtype.itemsize
        return out


class RawLayout:
    """A CUPTI buffer as CUPTI's C API hands it over: records at known offsets in zeroed memory,
    and CUPTI's record iterator over them (``next_record``, or ``iterate`` with the C signature)."""

    def __init__(self, buf: FakeBuffer, size: int = 1 << 16, gaps: dict[int, bytes] | None = None) -> None:
        """Place ``buf``'s records back to back; ``gaps[i]`` is put between record i and i + 1."""
        self.raw = np.zeros(size, dtype=np.uint8)
        self.offsets: list[int] = []
        off = 0
        for i, (_, rec) in enumerate(buf.parts):
            data = rec.tobytes()
            self.raw[off : off + len(data)] = np.frombuffer(data, dtype=np.uint8)
            self.offsets.append(off)
            off += len(data)
            filler = (gaps or {}).get(i, b"")
            self.raw[off : off + len(filler)] = np.frombuffer(filler, dtype=np.uint8)
            off += len(filler)
        self.valid = self.offsets[-1] + buf.parts[-1][1].dtype.itemsize if self.offsets else 0
        self.calls = 0
        self._next = dict(zip(self.offsets, self.offsets[1:] + [-1]))

    def next_record(self, off: int | None) -> int:
        self.calls += 1
        if off is None:
            return self.offsets[0] if self.offsets else -1
        return self._next[off]

    def iterate(self, base: int, valid: int, rec: Any) -> int:
        """cuptiActivityGetNextRecord over this layout, for a buffer at ``base``."""
        cur = rec[0]
        nxt = self.next_record(None if cur is None else cur - base)
        if nxt < 0:
            return 7  # CUPTI_ERROR_MAX_LIMIT_REACHED
        rec[0] = base + nxt
        return 0
