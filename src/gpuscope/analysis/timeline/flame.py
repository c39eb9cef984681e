"""A thread's Python samples as a flame strip: one lane per stack depth (the outermost frame on
top), where consecutive samples that share the stack down to a depth make one slice at that depth.

Two samples share their stack down to depth ``d`` when their frames (function, file, line) from
the outermost down to ``d`` are the same (:class:`StackTree` gives each such prefix an id).
A sample lasts until the next sample of its thread (or its own weight, if shorter); a gap between
samples ends every slice. The strip leaves out gpuscope's own frames and Python's start-up frames
(``<frozen runpy>``: how ``gpuscope profile`` starts the program), and keeps the
:data:`MAX_DEPTH` outermost frames of the rest.
"""

from __future__ import annotations

import numpy as np

from ...trace.report import Report
from ...trace.stacks import is_own

MAX_DEPTH = 24


class StackTree:
    """The stack nodes of one process: each node's frame (function, file, line), its parent, and its
    *prefix* at each depth: an id shared by every stack with the same frames down to that depth
    (a report's tree shares nodes between such stacks; this does not rely on it)."""

    def __init__(self, report: Report, pid: int) -> None:
        rows = report.sql("""SELECT k.id, k.parent_id, f.function_id, f.file_id, f.line FROM cpu_stack k
                             LEFT JOIN cpu_frame f ON f.pid = k.pid AND f.id = k.frame_id WHERE k.pid = ?""", [pid])
        self.parent = {int(i): (int(p) if p is not None else 0) for i, p, *_ in rows}
        self.frame = {int(i): (-1 if fn is None else int(fn), -1 if fl is None else int(fl), int(ln or 0))
                      for i, _, fn, fl, ln in rows}
        files = report.sql("""SELECT id, value FROM string WHERE id IN
                              (SELECT file_id FROM cpu_frame WHERE pid = ?)""", [pid])
        self.hidden = {int(i) for i, path in files if str(path).startswith("<frozen") or is_own(str(path))}
        self._prefix: dict[tuple[int, tuple[int, int, int]], int] = {}
        self._function: list[int] = []  # the function (string id) of each prefix's last frame

    def prefixes(self, node: int) -> list[int]:
        """Return the prefix ids of the stack ending at ``node``, from the outermost frame (at most
        10,000: a damaged tree)."""
        path: list[int] = []
        n = node
        while n and n in self.parent and len(path) < 10_000:
            path.append(n)
            n = self.parent[n]
        out, prev = [], -1
        for n in reversed(path):
            if self.frame[n][1] in self.hidden:
                continue
            key = (prev, self.frame[n])
            if key not in self._prefix:
                self._prefix[key] = len(self._function)
                self._function.append(self.frame[n][0])
            prev = self._prefix[key]
            out.append(prev)
        return out

    def function(self, prefix: int) -> int:
        """Return the function (a string id, -1 if unknown) of a prefix's innermost frame."""
        return self._function[prefix]


def flame_parts(tree: StackTree, start: np.ndarray, end: np.ndarray, stack: np.ndarray) -> list[dict[str, np.ndarray]]:
    """Return, per depth from the outermost, the slices of the samples (by time: ``start``, ``end``,
    leaf ``stack`` node) as ``{"start_ns", "end_ns", "name_id"}`` (the frame's function)."""
    leaves = np.unique(stack)
    chains = [tree.prefixes(int(s)) for s in leaves]
    depth = min(max((len(c) for c in chains), default=0), MAX_DEPTH)
    if not depth or not len(start):
        return []
    table = np.full((len(leaves), depth), -1, dtype=np.int64)  # each leaf's prefix at each depth
    for row, c in enumerate(chains):
        table[row, : min(len(c), depth)] = c[:depth]
    anc = table[np.searchsorted(leaves, stack)]  # per sample
    joined = np.concatenate([end[:-1] == start[1:], [False]])  # a sample runs on into the next one
    out = []
    for d in range(depth):
        a = anc[:, d]
        same_next = joined & (a == np.concatenate([a[1:], [-1]]))
        first = np.flatnonzero((a >= 0) & ~np.concatenate([[False], same_next[:-1]]))
        last = np.flatnonzero((a >= 0) & ~same_next)
        names = np.array([tree.function(int(n)) for n in a[first]], dtype=np.int64)
        out.append({"start_ns": start[first], "end_ns": end[last], "name_id": names})
    return out
