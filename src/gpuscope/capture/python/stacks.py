"""Python stacks as a prefix tree of interned frames, shared by every collector in the process.

A frame is (code object, line); a stack node is (parent node, frame), node 0 being the empty
stack. Frames and nodes are defined once (rows ``cpu_frame`` and ``cpu_stack``), so a sample or a
synchronization site refers to its whole stack by one integer. The sampler's thread and the
program's threads add to the same table; new entries are made under a lock, lookups of known ones
are plain dictionary reads.

Standard library only.
"""

from __future__ import annotations

import threading
from types import FrameType
from typing import Any

MAX_DEPTH = 256

Rows = dict[str, list[tuple[Any, ...]]]


class StackTable:
    """Interns frames and stack nodes; hands their definitions over with :meth:`take`."""

    def __init__(self) -> None:
        self._frames: dict[tuple[Any, int], int] = {}  # (code, line) -> frame id
        self._codes: list[Any] = []  # keeps code objects alive, so their ids are not reused
        self._nodes: dict[tuple[int, int], int] = {}  # (parent node, frame) -> node id
        self._rows: Rows = {"cpu_frame": [], "cpu_stack": []}
        self._lock = threading.Lock()

    def frame(self, code: Any, line: int) -> int:
        """Return the id of the frame at ``line`` of ``code``."""
        fid = self._frames.get((code, line))
        if fid is None:
            with self._lock:
                fid = self._frames.get((code, line))
                if fid is None:
                    fid = len(self._frames) + 1
                    self._frames[(code, line)] = fid
                    self._codes.append(code)
                    self._rows["cpu_frame"].append((fid, code.co_filename, line, code.co_name))
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
        for f in reversed(chain):
            node = self.child(node, self.frame(f.f_code, f.f_lineno))
        return node

    def take(self) -> Rows:
        """Return the frames and nodes defined since the last call."""
        with self._lock:
            rows, self._rows = self._rows, {"cpu_frame": [], "cpu_stack": []}
        return {k: v for k, v in rows.items() if v}
