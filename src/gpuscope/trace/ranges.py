"""NVTX ranges from CUPTI's marker events: a start and an end with the same id make a range.

A range's start and end can arrive in different buffers (and, for start/end ranges, on different
threads), so pairing keeps state for the whole session. A range still open when the program ends
is stored with a NULL end.
"""

from __future__ import annotations

from typing import Any

SOURCE = "nvtx"  # what CUPTI records: NVTX calls of any library
Row = tuple[Any, ...]  # (start_ns, end_ns, pid, tid, id, domain_id, name_id, kind, source, category, color)


class RangeBuilder:
    """Pairs marker events into ``nvtx_range`` rows."""

    def __init__(self) -> None:
        self._open: dict[tuple[int, int], tuple[int, int, int, int]] = {}
        self._early_end: dict[tuple[int, int], int] = {}

    def add(self, pid: int, cols: dict[str, Any]) -> list[Row]:
        """Take decoded marker events of one process; return the ranges and marks they complete."""
        out: list[Row] = []
        for ts, tid, mid, event, name, domain in zip(
            cols["ts_ns"].tolist(), cols["tid"].tolist(), cols["id"].tolist(), cols["event"],
            cols["name_id"].tolist(), cols["domain_id"].tolist(),
        ):
            key = (pid, mid)
            if event == "mark":
                out.append((ts, ts, pid, tid, mid, domain, name, "mark", SOURCE, None, None))
            elif event == "start":
                end = self._early_end.pop(key, None)
                if end is None:
                    self._open[key] = (ts, tid, domain, name)
                else:
                    out.append((ts, end, pid, tid, mid, domain, name, "range", SOURCE, None, None))
            else:
                start = self._open.pop(key, None)
                if start is None:
                    self._early_end[key] = ts
                else:
                    s, stid, sdomain, sname = start
                    out.append((s, ts, pid, stid, mid, sdomain, sname, "range", SOURCE, None, None))
        return out

    def unfinished(self) -> list[Row]:
        """Return the ranges that never ended, with a NULL end."""
        rows = [(s, None, pid, tid, mid, domain, name, "range", SOURCE, None, None)
                for (pid, mid), (s, tid, domain, name) in self._open.items()]
        self._open.clear()
        return rows
