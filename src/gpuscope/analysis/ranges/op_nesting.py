"""The numbers, names and nesting of the PyTorch operator calls, and the innermost call around each GPU
launch, worked out in numpy from a few integer columns read a batch at a time.

DuckDB's window functions and sorts over millions of calls (an imported profiler trace holds three
million nested ones) took several hundred megabytes beyond the columns themselves. Here the calls'
order is a numpy ``lexsort`` of their keys (a NULL sorts last, as in DuckDB), the nesting the search
of :mod:`..ops.nesting`, and the result comes in the order of the ``torch_op`` table's rows
(:func:`call_numbers`), which :mod:`.operators` pairs with them by position.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...trace.report import Report
from ..ops.attribution import ANY_THREAD, FOREVER
from ..ops.nesting import CHUNK, fetch_columns, last_at_least, parents_and_depths, pyramid


def _read(report: Report, query: str, exprs: dict[str, str]) -> dict[str, np.ndarray]:
    """The ``exprs`` (name: SQL of an integer or boolean without NULLs) of every row of ``query``, as
    int64 arrays, read a batch at a time so that DuckDB holds one batch of the result."""
    select = ", ".join(f"{e} AS {k}" for k, e in exprs.items())
    with report.deadline():
        (rows,) = report.con.execute(f"SELECT count(*) FROM ({query})").fetchone() or (0,)
        arrays = fetch_columns(report, f"SELECT {select} FROM ({query})", list(exprs), int(rows))
    return dict(zip(exprs, arrays))


def _keyed(report: Report, table: str, columns: Sequence[str]) -> dict[str, str]:
    """SQL of ``columns`` of ``table`` as sort keys: each value with NULL as 0, and ``{column}_null``
    (1 for NULL) before it where the column has NULLs."""
    counts = report.sql(f"SELECT {', '.join(f'count(*) - count({c})' for c in columns)} FROM {table}")[0]
    exprs: dict[str, str] = {}
    for c, nulls in zip(columns, counts):
        if nulls:
            exprs[f"{c}_null"] = f"({c} IS NULL)::BIGINT"
        exprs[c] = f"coalesce({c}, 0)"
    return exprs


def _order(keys: Sequence[np.ndarray]) -> np.ndarray:
    """The positions that sort by ``keys`` (most significant first; the sort is stable)."""
    return np.lexsort(list(reversed(keys)))


def _with_nulls(cols: dict[str, np.ndarray], name: str) -> list[np.ndarray]:
    return [cols[f"{name}_null"], cols[name]] if f"{name}_null" in cols else [cols[name]]


def call_numbers(report: Report) -> dict[str, object]:
    """For every row of ``torch_op``, in the table's order: its ``name`` (a categorical of the texts of
    its ``name_id``), ``named`` (False where ``string`` has no row of it), its ``torch_op_id`` (its place in the
    order of process, start, thread, longer first (a call that never ended last), name, and the
    table's order), its ``depth`` and its ``parent_id`` (-1 at depth 0): the parent is the last call
    of its thread before it in the order of start, longer first (never ended first), id, that ends no
    earlier. Returned as columns by name."""
    cols = _read(report, "SELECT * FROM torch_op", {
        **_keyed(report, "torch_op", ("pid", "tid", "start_ns", "name_id")),
        "end_null": "(end_ns IS NULL)::BIGINT", "end": "coalesce(end_ns, 0)"})
    n = len(cols["end"])
    pid, tid, start = _with_nulls(cols, "pid"), _with_nulls(cols, "tid"), _with_nulls(cols, "start_ns")
    at = _order([*pid, *start, *tid, cols["end_null"], np.invert(cols["end"]), *_with_nulls(cols, "name_id")])
    ids = np.empty(n, dtype=np.int64)
    ids[at] = np.arange(1, n + 1, dtype=np.int64)
    end = np.where(cols.pop("end_null") == 1, FOREVER, cols.pop("end"))
    at = _order([*pid, *tid, *start, np.invert(end), ids])  # by thread, start, longer first, id
    new = np.zeros(n, dtype=bool)  # where each thread's calls start in that order
    new[:1] = True
    for key in (*pid, *tid):
        new[1:] |= key[at[1:]] != key[at[:-1]]
    name, named = _names(report, cols)
    del cols, pid, tid, start
    ends, firsts = end[at], np.flatnonzero(new)
    del end, new
    if _nested(ends, firsts):
        parent, depth = parents_and_depths(ends, firsts)
    else:  # what the recorder writes: no call encloses another of its thread
        parent, depth = np.full(n, -1, dtype=np.int64), np.zeros(n, dtype=np.int32)
    del ends
    parent_id = np.full(n, -1, dtype=np.int64)
    has = parent >= 0
    parent_id[at[has]] = ids[at[parent[has]]]
    depths = np.empty(n, dtype=np.int32)
    depths[at] = depth
    return {"torch_op_id": ids, "name": name, "named": named, "depth": depths, "parent_id": parent_id}


def _nested(end: np.ndarray, firsts: np.ndarray) -> bool:
    """Whether a call ends no later than one before it of its thread (``end``: the ends in the order of
    thread, start, longer first; ``firsts``: where each thread's calls begin), so that it has a parent."""
    for lo, hi in zip(firsts, [*firsts[1:], len(end)]):
        if hi - lo > 1 and (np.maximum.accumulate(end[lo:hi - 1]) >= end[lo + 1:hi]).any():
            return True
    return False


def _names(report: Report, cols: dict[str, np.ndarray]) -> tuple[object, np.ndarray]:
    """The calls' names as a categorical (the text of each ``name_id``), and whether ``string`` has it."""
    import pandas as pd

    name_id = cols["name_id"]
    known = cols["name_id_null"] == 0 if "name_id_null" in cols else np.ones(len(name_id), dtype=bool)
    ids = np.unique(name_id[known])
    rows = report.sql("SELECT id, value FROM string WHERE id IN (SELECT unnest(?::BIGINT[]))", [ids.tolist()])
    texts = dict(rows)
    categories = sorted({t for t in texts.values() if t is not None})
    code_of = {t: k for k, t in enumerate(categories)}
    at = np.searchsorted(ids, name_id)
    has = np.array([i in texts for i in ids.tolist()], dtype=bool)
    codes = np.array([code_of.get(texts.get(i), -1) for i in ids.tolist()], dtype=np.int64)
    inside = known & (at < len(ids))
    named = np.zeros(len(name_id), dtype=bool)
    named[inside] = has[at[inside]]
    code = np.full(len(name_id), -1, dtype=np.int64)
    code[named] = codes[at[named]]
    return pd.Categorical.from_codes(code, categories=pd.Index(categories, dtype=object)), named


def frames_into(report: Report, table: str, columns: dict[str, object], nullable: Sequence[str] = ()) -> None:
    """Create temp table ``table`` of ``columns`` (arrays, or categoricals: ENUMs, of one length), its
    rows in their order, written :data:`CHUNK` rows at a time; in the ``nullable`` columns -1 is NULL."""
    import pandas as pd

    n = len(next(iter(columns.values())))  # type: ignore[arg-type]
    for at in range(0, max(n, 1), CHUNK):
        part = {k: v[at:at + CHUNK] for k, v in columns.items()}  # type: ignore[index]
        for k in nullable:
            part[k] = pd.arrays.IntegerArray(part[k], part[k] < 0)
        report.con.register("gpuscope_batch", pd.DataFrame(part))
        try:
            report.sql(f"INSERT INTO {table} SELECT * FROM gpuscope_batch" if at else
                       f"CREATE OR REPLACE TEMP TABLE {table} AS SELECT * FROM gpuscope_batch")
        finally:
            report.con.unregister("gpuscope_batch")


def launch_owners(report: Report, ops: str, calls: str) -> tuple[np.ndarray, np.ndarray]:
    """``op_id`` of every operation of ``ops`` (``op_id, pid, tid, launch_ns``), in its order, and the
    ``torch_op_id`` of the innermost call of ``calls`` running on its launching thread at its launch
    (of any thread of its process where the thread is unknown), -1 where none was: the last call of
    that thread key started by the launch, in the order of start, longer first, id, that ends no
    earlier than it."""
    launches = _read(report, ops, {"op_id": "op_id", "ok": "(pid IS NOT NULL AND launch_ns IS NOT NULL)::BIGINT",
                                   "pid": "coalesce(pid, 0)", "ktid": f"coalesce(tid, {ANY_THREAD})",
                                   "launch": "coalesce(launch_ns, 0)"})
    owner = np.full(len(launches["op_id"]), -1, dtype=np.int64)
    c = _read(report, f"SELECT * FROM {calls} WHERE pid IS NOT NULL AND start_ns IS NOT NULL",
              {"pid": "pid", "tid": "coalesce(tid, 0)", "tid_null": "(tid IS NULL)::BIGINT", "start": "start_ns",
               "end": f"coalesce(end_ns, {FOREVER})", "rid": "torch_op_id"})
    ok = np.flatnonzero(launches["ok"] == 1)
    lat = ok[_order([launches["pid"][ok], launches["ktid"][ok]])]  # the launches by thread key
    lpid, lkt = launches["pid"][lat], launches["ktid"][lat]
    change = (lpid[1:] != lpid[:-1]) | (lkt[1:] != lkt[:-1])
    bounds = np.flatnonzero(np.r_[True, change, True]) if len(lat) else np.zeros(0, dtype=np.int64)
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        key_pid, key_tid = int(lpid[lo]), int(lkt[lo])
        mine = c["pid"] == key_pid
        if key_tid != ANY_THREAD:  # else every call of the process
            mine &= (c["tid"] == key_tid) & (c["tid_null"] == 0)
        sel = np.flatnonzero(mine)
        del mine
        sel = sel[_order([c["start"][sel], np.invert(c["end"][sel]), c["rid"][sel]])]
        which = lat[lo:hi]
        owner[which] = _innermost(c["start"][sel], c["end"][sel], c["rid"][sel], launches["launch"][which])
    return launches["op_id"], owner


def _innermost(start: np.ndarray, end: np.ndarray, rid: np.ndarray, launch: np.ndarray) -> np.ndarray:
    """For calls of one thread key in order (start, longer first, id), the ``rid`` of the innermost
    one around each ``launch`` (-1 where none is)."""
    out = np.full(len(launch), -1, dtype=np.int64)
    if not len(start):
        return out
    levels = pyramid(end)
    for at in range(0, len(launch), CHUNK):
        t = launch[at:at + CHUNK]
        found = last_at_least(levels, np.searchsorted(start, t, side="right") - 1, t)
        out[at:at + CHUNK] = np.where(found >= 0, rid[np.maximum(found, 0)], -1)
    return out
