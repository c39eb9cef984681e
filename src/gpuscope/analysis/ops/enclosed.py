"""Per range, the count, first start, last end and total duration of the GPU operations launched
inside it (at any depth, :mod:`.attribution`), without listing any (operation, range) pair.

Per thread key (``pid, ktid`` of :func:`.attribution._keyed`) the operations are numbered in launch
order. The operations whose launch a range encloses are then the run of consecutive numbers from
the first launch at or after its start to the last at or before its end: two binary searches give
the run, its length is the count, a running sum gives any total over it, and
``np.minimum.reduceat``/``np.maximum.reduceat`` over the runs (sorted by their first number, so
that the gaps between runs add up to at most one pass over the operations) give the earliest start
and the latest end. Memory is a few numbers per operation plus one chunk of ranges, whatever the
nesting depth; the listing of every pair that :func:`.attribution.enclosing_table` makes grows with
operations times depth (gigabytes on ten million operations).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pandas as pd

from ...trace.report import Report
from .attribution import ANY_THREAD, _exists, _keyed, _name, _selects_all, _where, ranges_table
from .nesting import fetch_columns

CHUNK = 1 << 20  # ranges per batch
LATEST = np.iinfo(np.int64).max  # stands for a NULL start (never the earliest)
EARLIEST = -LATEST  # stands for a NULL end (never the latest)


def _keys(report: Report, ops: str, name: str) -> str:
    """Create table ``name`` of the thread keys with operations: ``pid, ktid, k0`` (the number of
    the key's first operation in :func:`_op_columns` order) and ``n``; return its name."""
    if not _exists(report, name):
        report.sql(f"""
            CREATE TEMP TABLE {name} AS
            SELECT pid, ktid, n, (sum(n) OVER (ORDER BY pid, ktid) - n)::BIGINT AS k0
            FROM (SELECT pid, ktid, count(*) AS n FROM ({ops}) WHERE launch_ns IS NOT NULL GROUP BY pid, ktid)""")
    return name


def _op_columns(report: Report, ops: str, exprs: Sequence[str]) -> list[np.ndarray]:
    """Each of ``exprs`` over the operations of ``ops`` (with a launch time) as int64, in key and
    launch order (one sort), each with one extra element at the end (so that a run may end at the
    last operation)."""
    columns = [f"v{i}" for i in range(len(exprs))]
    listed = ", ".join(f"{e} AS {c}" for e, c in zip(exprs, columns))
    (rows,) = report.sql(f"SELECT count(*) FROM ({ops}) WHERE launch_ns IS NOT NULL")[0]
    return fetch_columns(report, f"SELECT {listed} FROM ({ops}) WHERE launch_ns IS NOT NULL "
                                 "ORDER BY pid, ktid, launch_ns, op_id", columns, int(rows), extra=1)


def _runs(report: Report, launch: np.ndarray, intervals: str) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per batch of table ``intervals`` (``id, k0, n, start_ns, end_eff``: one interval under one
    thread key), the ids, first and last operation numbers of those that enclose a launch."""
    (total,) = report.sql(f"SELECT count(*) FROM {intervals}")[0]
    for at in range(0, int(total), CHUNK):
        part = report.df(f"SELECT id, k0, n, start_ns, end_eff FROM {intervals} "
                         f"WHERE rowid >= {at} AND rowid < {at + CHUNK}")
        order = np.argsort(part["k0"].to_numpy(dtype=np.int64), kind="stable")  # each key a slice
        ident = part["id"].to_numpy(dtype=np.int64)[order]
        k0, n = part["k0"].to_numpy(dtype=np.int64)[order], part["n"].to_numpy(dtype=np.int64)[order]
        start = part["start_ns"].to_numpy(dtype=np.int64)[order]
        end = part["end_eff"].to_numpy(dtype=np.int64)[order]
        lo, hi = np.empty_like(k0), np.empty_like(k0)
        for key in np.unique(k0):
            sel = slice(*np.searchsorted(k0, [key, key + 1]))
            first, count = int(key), int(n[sel.start])
            launches = launch[first:first + count]
            lo[sel] = first + np.searchsorted(launches, start[sel], side="left")
            hi[sel] = first + np.searchsorted(launches, end[sel], side="right") - 1
        keep = hi >= lo
        yield ident[keep], lo[keep], hi[keep]


def _reduce(ufunc: np.ufunc, values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``ufunc`` over ``values[lo[i]:hi[i] + 1]`` for each i (runs not empty; ``values`` has one
    element past every run). Sorted by ``lo``, the runs and the gaps between them are reduced in
    one call; a gap costs at most the operations up to the next run, so all gaps of a call
    together at most one pass."""
    order = np.argsort(lo, kind="stable")
    bounds = np.empty(2 * len(lo), dtype=np.int64)
    bounds[0::2], bounds[1::2] = lo[order], hi[order] + 1
    out = np.empty(len(lo), dtype=values.dtype)
    if len(lo):
        out[order] = ufunc.reduceat(values[: int(bounds.max()) + 1], bounds)[0::2]
    return out


def _intervals(report: Report, name: str, query: str) -> str:
    """Create table ``name`` (``id, k0, n, start_ns, end_eff``) from ``query``; return its name."""
    report.sql(f"CREATE OR REPLACE TEMP TABLE {name} AS {query}")
    return name


def _keyed_ranges(report: Report, keys: str, where: str, columns: str) -> str:
    """SQL: each selected range (``r``) under each thread key with operations that it can enclose
    (its own thread's, and the process's key of operations whose thread is unknown)."""
    return f"""
        SELECT {columns}, k.k0, k.n, r.start_ns, r.end_eff FROM {ranges_table(report)} r
        JOIN {keys} k ON k.pid = r.pid AND (k.ktid = {ANY_THREAD} OR k.ktid = r.tid)
        WHERE {where} AND r.start_ns IS NOT NULL"""


def projection_table(
    report: Report,
    sources: Sequence[str] | None = None,
    categories: Sequence[str] | None = None,
    same_thread: bool = True,
) -> str:
    """Create the table ``(rid, ops, first_start, last_end)`` of each range that encloses at least
    one launch: how many operations it encloses, the earliest GPU start and the latest GPU end among
    them (NULL where none has one); return its name.

    The same numbers as grouping :func:`.attribution.enclosing_table` by range, without its pairs.
    """
    where = _where(sources, categories)
    if (sources, categories) != (None, None) and _selects_all(report, where):
        return projection_table(report, same_thread=same_thread)
    name = _name("projection", sources, categories, same_thread)
    if _exists(report, name):
        return name
    ops, _ = _keyed(report, where, same_thread)
    keys = _keys(report, ops, _name("opkeys", same_thread))
    intervals = _intervals(report, f"{name}_in", _keyed_ranges(report, keys, where, "r.rid AS id"))
    launch, firsts, lasts = _op_columns(
        report, ops, ("launch_ns", f"coalesce(start_ns, {LATEST})", f"coalesce(end_ns, {EARLIEST})"))
    stage = f"{name}_stage"
    report.sql(f"CREATE OR REPLACE TEMP TABLE {stage} (rid BIGINT, ops BIGINT, first_start BIGINT, last_end BIGINT)")
    for ident, lo, hi in _runs(report, launch, intervals):
        batch = pd.DataFrame({"rid": ident, "ops": hi - lo + 1, "first_start": _reduce(np.minimum, firsts, lo, hi),
                              "last_end": _reduce(np.maximum, lasts, lo, hi)})
        report.con.register("gpuscope_batch", batch)
        report.sql(f"INSERT INTO {stage} SELECT * FROM gpuscope_batch")
        report.con.unregister("gpuscope_batch")
    del launch, firsts, lasts
    report.sql(f"""
        CREATE TEMP TABLE {name} AS
        SELECT rid, sum(ops)::BIGINT AS ops, nullif(min(first_start), {LATEST}) AS first_start,
               nullif(max(last_end), {EARLIEST}) AS last_end
        FROM {stage} GROUP BY rid""")
    report.sql(f"DROP TABLE {stage}; DROP TABLE {intervals}")
    return name


def union_gpu_time(report: Report, sources: Sequence[str], categories: Sequence[str]) -> pd.DataFrame:
    """Per range name and category (ranges of the given ``sources`` and ``categories``): the GPU
    time (sum of durations) of the operations launched inside any range of that name and
    category on the operation's thread, each operation counted once however many such ranges
    enclose it.

    Returns columns ``name_id, category, gpu_ns``, one row per name and category (0 where no
    launch is inside). Overlapping ranges of one name and category under one thread key are merged
    first, so that the runs summed are disjoint.
    """
    where = _where(sources, categories)
    ops, _ = _keyed(report, where, True)
    keys = _keys(report, ops, _name("opkeys", True))
    names = report.df(f"""
        SELECT row_number() OVER (ORDER BY name_id, category) AS id, name_id, category
        FROM (SELECT DISTINCT name_id, category FROM {ranges_table(report)} r WHERE {where})""")
    report.con.register("gpuscope_names", names)
    merged = f"""
        WITH keyed AS ({_keyed_ranges(report, keys, where, "r.name_id, r.category")}),
        flagged AS (  -- a range opens a new merged interval unless an earlier one reaches it
            SELECT *, coalesce(start_ns > max(end_eff) OVER (
                       PARTITION BY k0, name_id, category ORDER BY start_ns, end_eff
                       ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), TRUE)::INT AS opens
            FROM keyed),
        grouped AS (
            SELECT *, sum(opens) OVER (PARTITION BY k0, name_id, category ORDER BY start_ns, end_eff
                                       ROWS UNBOUNDED PRECEDING) AS g
            FROM flagged)
        SELECT m.id, g.k0, any_value(g.n) AS n, min(g.start_ns) AS start_ns, max(g.end_eff) AS end_eff
        FROM grouped g JOIN gpuscope_names m
          ON m.name_id = g.name_id AND m.category IS NOT DISTINCT FROM g.category
        GROUP BY m.id, g.k0, g.name_id, g.category, g.g"""
    intervals = _intervals(report, _name("merged", sources, categories), merged)
    report.con.unregister("gpuscope_names")
    launch, running = _op_columns(report, ops, ("launch_ns", "coalesce(end_ns - start_ns, 0)"))
    running = np.concatenate(([0], np.cumsum(running[:-1])))  # running[i]: operations 0 .. i-1
    totals = np.zeros(len(names) + 1, dtype=np.int64)
    for ident, lo, hi in _runs(report, launch, intervals):
        np.add.at(totals, ident, running[hi + 1] - running[lo])
    report.sql(f"DROP TABLE {intervals}")
    return names.assign(gpu_ns=totals[names["id"].to_numpy(dtype=np.int64)])[["name_id", "category", "gpu_ns"]]
