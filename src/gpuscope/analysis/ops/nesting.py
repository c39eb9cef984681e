"""The innermost range around each launch and the parent of each range, in memory linear in the
ranges and operations (no table per binary-lifting level).

Both questions are one search over the ranges of a thread key in start order (of equal starts the
longer first, then by ``rid``): the *last range at or before position b that ends at or after c*.
The innermost range around a launch at ``t`` is that search with b the last range started by
``t`` and c = ``t``; a range's parent is that search with b the range before it and c its end.
:func:`last_at_least` answers it for many queries at once with a pyramid of block maxima of the
ends (each level 32 times shorter): a query scans its own block, then finds the last earlier block
whose maximum reaches c one level up (the same search, recursively) and scans that block. Every
query costs at most two block scans per level, and the pyramid a thirty-first of the ends.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...trace.report import Report

BLOCK = 32
CHUNK = 1 << 20  # queries per batch


def pyramid(values: np.ndarray) -> list[np.ndarray]:
    """Return ``values`` and the maxima of its blocks of :data:`BLOCK`, of those, ... down to one
    element: the levels :func:`last_at_least` searches."""
    levels = [values]
    while len(levels[-1]) > 1:
        top = levels[-1]
        levels.append(np.maximum.reduceat(top, np.arange(0, len(top), BLOCK)))
    return levels


def _scan_down(v: np.ndarray, pos: np.ndarray, floor: np.ndarray, c: np.ndarray, out: np.ndarray,
               which: np.ndarray) -> np.ndarray:
    """From ``pos`` down to ``floor`` (per query), the first index with ``v >= c``, written to
    ``out[which]``; return the queries (indices into ``which``) that found none."""
    todo = np.arange(len(which))
    pos = pos.copy()
    while len(todo):
        todo = todo[pos[todo] >= floor[todo]]
        if not len(todo):
            break
        hit = v[pos[todo]] >= c[todo]
        out[which[todo[hit]]] = pos[todo[hit]]
        todo = todo[~hit]
        pos[todo] -= 1
    found = np.zeros(len(which), dtype=bool)
    found[out[which] >= 0] = True
    return np.flatnonzero(~found)


def last_at_least(levels: list[np.ndarray], b: np.ndarray, c: np.ndarray, level: int = 0) -> np.ndarray:
    """For each query, the largest ``i <= b[q]`` with ``levels[level][i] >= c[q]``, or -1 where
    there is none (``b`` may be -1)."""
    v = levels[level]
    out = np.full(len(b), -1, dtype=np.int64)
    which = np.flatnonzero(b >= 0)
    if not len(which):
        return out
    bb, cc = b[which], c[which]
    left = which[_scan_down(v, bb, (bb // BLOCK) * BLOCK, cc, out, which)]
    if len(left) and level + 1 < len(levels):
        block = last_at_least(levels, b[left] // BLOCK - 1, c[left], level + 1)
        has = block >= 0
        left, block = left[has], block[has]
        top = np.minimum(block * BLOCK + BLOCK - 1, len(v) - 1)
        _scan_down(v, top, block * BLOCK, c[left], out, left)
    return out


def fetch_columns(report: Report, query: str, columns: Sequence[str], rows: int, extra: int = 0) -> list[np.ndarray]:
    """The ``columns`` of the ``rows`` rows of ``query`` as int64 arrays (NULL as 0), streamed so
    that one copy of the rows is held, each with ``extra`` zeros at the end; RuntimeError where the
    query gave fewer rows."""
    n = rows
    out = [np.zeros(int(n) + extra, dtype=np.int64) for _ in columns]
    res = report.con.execute(query)
    at = 0
    while not (chunk := res.fetch_df_chunk(64)).empty:
        for array, column in zip(out, columns):
            array[at:at + len(chunk)] = chunk[column].fillna(0).to_numpy(dtype=np.int64)
        at += len(chunk)
    if at != n:
        raise RuntimeError(f"read {at} rows of {n}")
    return out


def _sorted_ranges(report: Report, ranges: str, keys: str, columns: Sequence[str]) -> list[np.ndarray]:
    """Create table ``keys`` (``pid, ktid, r0, rn``: where each thread key's ranges start in the
    order below, and how many) and return ``columns`` of ``ranges`` (``pid, ktid, rid, start_ns,
    end_eff``) by key, start, longer first, rid."""
    report.sql(f"""
        CREATE OR REPLACE TEMP TABLE {keys} AS
        SELECT pid, ktid, rn, (sum(rn) OVER (ORDER BY pid, ktid) - rn)::BIGINT AS r0
        FROM (SELECT pid, ktid, count(*) AS rn FROM ({ranges}) GROUP BY pid, ktid)""")
    (rows,) = report.sql(f"SELECT coalesce(sum(rn), 0) FROM {keys}")[0]
    return fetch_columns(report, f"SELECT {', '.join(columns)} FROM ({ranges}) "
                                 "ORDER BY pid, ktid, start_ns, end_eff DESC, rid", columns, int(rows))


def _insert(report: Report, table: str, frame: object) -> None:
    report.con.register("gpuscope_batch", frame)
    report.sql(f"INSERT INTO {table} SELECT * FROM gpuscope_batch")
    report.con.unregister("gpuscope_batch")


def innermost_into(report: Report, name: str, ops: str, ranges: str) -> str:
    """Create table ``name`` ``(op_id, rid)``: for each operation of ``ops`` (``op_id, pid, ktid,
    launch_ns``) the innermost range of ``ranges`` (``pid, ktid, rid, start_ns, end_eff``) under
    its key that contains its launch (no row where none does); return ``name``."""
    import pandas as pd

    keys = f"{name}_keys"
    start, end, rid = _sorted_ranges(report, ranges, keys, ("start_ns", "end_eff", "rid"))
    levels = pyramid(end)
    report.sql(f"CREATE TEMP TABLE {name} (op_id BIGINT, rid BIGINT)")
    (top,) = report.sql(f"SELECT coalesce(max(op_id), 0) FROM ({ops})")[0]
    for at in range(0, int(top) + 1, CHUNK):
        got = report.con.execute(f"""
            SELECT o.op_id, k.r0, k.rn, o.launch_ns FROM ({ops}) o JOIN {keys} k USING (pid, ktid)
            WHERE o.op_id >= {at} AND o.op_id < {at + CHUNK} AND o.launch_ns IS NOT NULL
            ORDER BY k.r0""").fetchnumpy()
        op_id, r0, rn, launch = (np.asarray(got[c], dtype=np.int64) for c in ("op_id", "r0", "rn", "launch_ns"))
        last = np.empty_like(r0)  # the last range of its key started by the launch
        for key in np.unique(r0):
            sel = slice(*np.searchsorted(r0, [key, key + 1]))
            first, count = int(key), int(rn[sel.start])
            last[sel] = first + np.searchsorted(start[first:first + count], launch[sel], side="right") - 1
        found = last_at_least(levels, np.where(last >= r0, last, -1), launch)
        inside = found >= r0
        _insert(report, name, pd.DataFrame({"op_id": op_id[inside], "rid": rid[found[inside]]}))
    report.sql(f"DROP TABLE {keys}")
    return name


def parents_and_depths(end: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For ranges sorted by key, start, longer first (``end``: their ends; ``starts``: the sorted
    positions where each key's ranges begin), the position of each one's parent, the last range of
    its key before it that ends no earlier (-1 if none), and its depth (0 without parent)."""
    levels = pyramid(end)
    parent = np.empty(len(end), dtype=np.int64)
    for at in range(0, len(end), CHUNK):
        pos = np.arange(at, min(at + CHUNK, len(end)))
        first = starts[np.searchsorted(starts, pos, side="right") - 1]  # where its key's ranges start
        found = last_at_least(levels, pos - 1, end[pos])
        parent[pos] = np.where(found >= first, found, -1)
    del levels
    depth = np.zeros(len(end), dtype=np.int32)
    up = parent.copy()
    active = np.flatnonzero(up >= 0)
    while len(active):  # one step up the tree per round, for the ranges not yet at their root
        depth[active] += 1
        up[active] = parent[up[active]]
        active = active[up[active] >= 0]
    return parent, depth


def tree_into(report: Report, name: str, ranges: str) -> str:
    """Create table ``name`` ``(rid, parent, level)``: each range of ``ranges`` (``pid, ktid, rid,
    start_ns, end_eff``) with its parent, the last range of its key before it in start order that
    ends no earlier (NULL if none), and its depth (0 without parent); return ``name``."""
    import pandas as pd

    keys = f"{name}_keys"
    end, rid = _sorted_ranges(report, ranges, keys, ("end_eff", "rid"))
    starts = np.array(sorted(r0 for (r0,) in report.sql(f"SELECT r0 FROM {keys}")), dtype=np.int64)
    parent, depth = parents_and_depths(end, starts)
    report.sql(f"CREATE TEMP TABLE {name} (rid BIGINT, parent BIGINT, level INTEGER)")
    for at in range(0, len(end), CHUNK):
        par = parent[at:at + CHUNK]
        above = pd.arrays.IntegerArray(rid[np.maximum(par, 0)], par < 0)
        _insert(report, name, pd.DataFrame({"rid": rid[at:at + CHUNK], "parent": above, "level": depth[at:at + CHUNK]}))
    report.sql(f"DROP TABLE {keys}")
    return name
