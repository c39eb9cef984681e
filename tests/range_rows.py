"""The ranges a report gets from an in-process range recorder: its own rows, and its logged ranges
paired as the launcher pairs them (trace/range_log.py), in the recorder's row shape (start_ns,
end_ns, tid, id, domain, name, kind, source, category, color)."""

from __future__ import annotations

import weakref
from typing import Any

import pandas as pd

from gpuscope.trace.range_log import LoggedRanges

_PAIRERS: weakref.WeakKeyDictionary[Any, tuple[LoggedRanges, list[str]]] = weakref.WeakKeyDictionary()


def _pairer(recorder: Any) -> tuple[LoggedRanges, list[str]]:
    found = _PAIRERS.get(recorder)
    if found is None:
        names: list[str] = []

        def intern(text: str) -> int:
            names.append(text)
            return len(names) - 1

        found = _PAIRERS[recorder] = (LoggedRanges(intern), names)
    return found


def recorded_rows(recorder: Any) -> list[tuple[Any, ...]]:
    """Take what ``recorder`` hands over (as the flush thread does); return its rows, then the logged
    ranges ended so far (in the order they ended, per thread)."""
    taken = recorder.take_rows()
    pairer, names = _pairer(recorder)
    pairer.name_kinds(0, taken.get("range_kind", []))
    rows = list(taken.get("range", []))
    for frame in pairer.frames(0, taken.get("range_log", [])):
        rows += _as_rows(frame, names)
    return rows


def still_open(recorder: Any) -> list[tuple[Any, ...]]:
    """The logged ranges still open (no end), as the launcher stores them when the report ends."""
    pairer, names = _pairer(recorder)
    rows = []
    for frame in pairer.unfinished_frames():
        rows += _as_rows(frame, names)
    return rows


def pair_counts(recorder: Any) -> dict[str, int]:
    """What pairing counted (ranges, reentrant_calls, unbalanced_pops)."""
    return dict(_pairer(recorder)[0].counts.get(0, {"ranges": 0, "reentrant_calls": 0, "unbalanced_pops": 0}))


def _as_rows(frame: Any, names: list[str]) -> list[tuple[Any, ...]]:
    return [(int(r.start_ns), None if pd.isna(r.end_ns) else int(r.end_ns), int(r.tid),
             int(r.id), names[r.domain_id], names[r.name_id], r.kind, r.source, r.category, r.color)
            for r in frame.astype(object).itertuples(index=False)]
