"""Python stacks as a prefix tree of interned frames, shared by every collector in the process.

A frame is (code object, line), looked up by the code object's id; a stack node is (parent node,
frame), node 0 being the empty stack. Frames and nodes are defined once (rows ``cpu_frame`` and
``cpu_stack``), so a sample or a synchronization site refers to its whole stack by one integer. The
sampler's thread and the program's threads add to the same table; new entries are made under a
lock, lookups of known ones are plain dictionary reads.

Standard library only.
"""

from __future__ import annotations

import threading
from types import CodeType, FrameType
from typing import Any

MAX_DEPTH = 256

Rows = dict[str, list[tuple[Any, ...]]]


class StackTable:
    """Interns frames and stack nodes; hands their definitions over with :meth:`take`."""

    def __init__(self) -> None:
        self._frames: dict[tuple[Any, int], int] = {}  # (id of a code object, or a stand-in, line) -> frame id
        self._codes: list[Any] = []  # keeps code objects alive, so their ids are not reused
        self._at: dict[tuple[int, int], int] = {}  # (id of a code object, instruction offset) -> frame id
        self._nodes: dict[tuple[int, int], int] = {}  # (parent node, frame) -> node id
        self._rows: Rows = {"cpu_frame": [], "cpu_stack": []}
        self._lock = threading.Lock()

    def frame(self, code: Any, line: int) -> int:
        """Return the id of the frame at ``line`` of ``code`` (a code object, or any object with
        ``co_filename`` and ``co_name`` that hashes by them).

        A code object is looked up by its id, kept valid by keeping the code alive: hashing a code
        object hashes its constants, nested code included, which takes microseconds for a module's
        or a class's body (on every stack: the script's ``<module>``).
        """
        key = (id(code), line) if type(code) is CodeType else (code, line)
        fid = self._frames.get(key)
        if fid is None:
            with self._lock:
                fid = self._frames.get(key)
                if fid is None:
                    fid = len(self._frames) + 1
                    self._frames[key] = fid
                    self._codes.append(code)
                    self._rows["cpu_frame"].append((fid, code.co_filename, line, code.co_name))
        return fid

    def frame_of(self, f: FrameType) -> int:
        """Return the id of the running frame ``f``'s frame (its code, at its current line).

        Looked up by the instruction it is at: ``f_lineno`` walks the code's line table, which takes
        microseconds deep in a long module's body.
        """
        key = (id(f.f_code), f.f_lasti)
        fid = self._at.get(key)
        if fid is None:
            fid = self._at[key] = self.frame(f.f_code, f.f_lineno)  # frame() keeps the code alive
        return fid

    def child(self, parent: int, fid: int) -> int:
        """Return the node of frame ``fid`` called from stack node ``parent``."""
        node = self._nodes.get((parent, fid))
        if node is None:
            with self._lock:
                node = self._nodes.get((parent, fid))
                if node is None:
                    node = len(self._nodes) + 1
                    self._nodes[(parent, fid)] = node
                    self._rows["cpu_stack"].append((node, parent, fid))
        return node

    def stack_of(self, frame: FrameType | None) -> int:
        """Return the node of the whole stack ending at ``frame`` (0 for no frame)."""
        chain: list[FrameType] = []
        f = frame
        while f is not None and len(chain) < MAX_DEPTH:
            chain.append(f)
            f = f.f_back
        node = 0
        at, nodes = self._at, self._nodes
        for f in reversed(chain):  # known frames and nodes are plain dictionary reads
            fid = at.get((id(f.f_code), f.f_lasti))
            if fid is None:
                fid = self.frame_of(f)
            known = nodes.get((node, fid))
            node = known if known is not None else self.child(node, fid)
        return node

    def take(self) -> Rows:
        """Return the frames and nodes defined since the last call."""
        with self._lock:
            rows, self._rows = self._rows, {"cpu_frame": [], "cpu_stack": []}
        return {k: v for k, v in rows.items() if v}
