"""Where each GPU operation was launched, and which ranges enclose that launch.

A GPU operation (kernel, memcpy, memset) is attributed to ranges by its *launch point*:

- With CUDA API records (``--trace cuda-api``): the API call that launched it (same ``pid`` and
  ``correlation_id``); the thread is the call's ``tid``, the time its ``start_ns``.
- Without them: a kernel of a CUDA graph, the graph's launch call (``launch_call``, recorded by
  default); any other kernel its ``queued_ns`` where CUPTI's latency timestamps were on, else its
  GPU start pulled back between its launch anchors (trace/launch.py), on an unknown thread of its
  process; memory copies and sets likewise by their anchors. gpuscope's own ranges carry anchors
  at both ends, so operations fall into them exactly; a range it did not record (NVTX from C/C++)
  is matched by the anchored time, which is the GPU start when no anchor came after the launch.

A range *encloses* a launch at time ``t`` when it belongs to the same process, to the same thread
when the launch thread is known (to any thread of the process when it is not), and
``start_ns <= t <= end_ns``. A range that never ended (``end_ns`` NULL) encloses every later
launch. The *innermost* enclosing range is the one that started last (Nsight Systems' definition;
among ranges that started at the same time, the one that ends first).

Everything is computed in DuckDB with sorts, window functions and equality or as-of joins, so the
cost grows with the number of operations and ranges (and, for :func:`op_ranges`, with the number of
operation-range pairs), never with their product. Results are kept as temporary tables on the
report's connection, so several reports share one computation.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ...trace.report import Report
from .cuda_summaries import COPY_LABEL
from .sql import op_queries

if TYPE_CHECKING:
    import pandas as pd

FOREVER = 9_223_372_036_854_775_807  # the end of a range that never ended
ANY_THREAD = -1  # the thread key of a launch whose thread is unknown

OPS = "gpuscope_op"
# the order of op_id; operations launched and started at once (on two streams) by their end, device,
# stream and record, so that their ids do not depend on how the sort splits its work
OP_ORDER = "pid, launch_ns, start_ns, kind, end_ns, device_id, stream_id, correlation_id"
RANGES = "gpuscope_range"


def _exists(report: Report, name: str) -> bool:
    return bool(report.sql("SELECT 1 FROM duckdb_tables() WHERE temporary AND table_name = ?", [name]))


def temp_table(report: Report, name: str, query: str | Callable[[], str]) -> str:
    """Create temp table ``name`` from ``query`` (or from the query it returns, called only where the
    table is made) unless this connection already has it; return ``name``."""
    if not _exists(report, name):
        report.sql(f"CREATE TEMP TABLE {name} AS {query() if callable(query) else query}")
    return name


def ops_table(report: Report) -> str:
    """Create the table of every GPU operation with its launch point; return its name.

    Columns: ``op_id``, ``kind`` (kernel, memcpy, memset, graph: a whole CUDA graph launch, recorded
    with ``--trace cuda-graph``), ``pid``, ``tid`` (the launching thread,
    NULL when unknown), ``launch_ns``, ``start_ns``, ``end_ns``, ``device_id``, ``name_id`` (the
    kernel's demangled name; NULL for memory operations), ``copy_kind`` (memcpy only), ``config_id``
    (the kernel's ``kernel_config`` row; kernels only), ``stream_id`` and ``correlation_id`` (of the
    operation's own record). A kernel
    with neither an API call nor a queued time (CUPTI gives 0 when it has none) is placed at its
    GPU start between its anchors, like a memory operation (trace/launch.py).
    """
    placed, query = op_queries(f"{OPS}_placed")
    if not _exists(report, f"{OPS}_sorted"):  # placed, then joined: one at a time, they need less memory
        report.sql(f"CREATE OR REPLACE TEMP TABLE {OPS}_placed AS {placed}")
        # stored in the order that numbers them (the connection keeps insertion order), and numbered by
        # position in a view: a row_number() window over ten million rows took twice the sort's time,
        # and a numbered copy of the table as long again
        report.sql(f"CREATE OR REPLACE TEMP TABLE {OPS}_sorted AS {query} ORDER BY {OP_ORDER}")
        report.sql(f"DROP TABLE {OPS}_placed")
        report.sql(f"CREATE OR REPLACE TEMP VIEW {OPS} AS SELECT rowid + 1 AS op_id, * FROM {OPS}_sorted")
    return OPS


_NUMERIC = ("BIGINT", "INTEGER", "SMALLINT", "TINYINT", "UBIGINT", "UINTEGER", "USMALLINT", "UTINYINT",
            "BOOLEAN", "DOUBLE", "FLOAT")  # the column types read as arrays, the rest by DuckDB's sort


def ordered_frame(report: Report, query: str, order: Sequence[str],
                  codes: dict[str, Sequence[str]] | None = None) -> pd.DataFrame:
    """``report.df(f"{query} ORDER BY {', '.join(order)}")``, for results of millions of rows of a
    query that selects from one table (no join, no aggregate). The ``order`` columns (integers, the
    last one unique) are read first and sorted by a numpy lexsort; then each column is read on its
    own, in the table's order (DuckDB keeps the insertion order of a query without ORDER BY while
    ``preserve_insertion_order`` is on), and put in that order: the frame is held once, plus one
    column and DuckDB's result of one column (DuckDB's sort of ten million operations spilled and
    took three times as long, and its result of every column at once held them twice). A column
    named in ``codes`` comes as the position of its value in that list (``enum_code()`` of an ENUM of
    those values) and is made the ordered categorical ``report.df`` gives an ENUM. Where a key has
    NULLs, or a column is of a type read otherwise (texts), DuckDB sorts them as before."""
    import numpy as np
    import pandas as pd

    codes = codes or {}
    with report.deadline():
        described = report.con.execute(f"SELECT * FROM ({query}) LIMIT 0").description
        kept = report.con.execute("SELECT current_setting('preserve_insertion_order')").fetchone()
    names = [str(d[0]) for d in described]
    if not (kept and kept[0]) or any(str(d[1]) not in _NUMERIC for d in described):
        return _fallback(report, query, order, codes)
    with report.deadline():
        arrays = report.con.execute(f"SELECT {', '.join(order)} FROM ({query})").fetchnumpy()
    if any(_array_kind(arrays[k]) != "plain" or arrays[k].dtype.kind not in "iu" for k in order):
        del arrays
        return _fallback(report, query, order, codes)
    at = np.lexsort([arrays[k].astype(np.int64, copy=False) for k in reversed(order)])
    moved = not np.array_equal(at, np.arange(len(at)))
    columns = {}
    for c in names:
        if c in arrays:
            a = arrays.pop(c)
        else:
            with report.deadline():
                a = report.con.execute(f'SELECT "{c}" FROM ({query})').fetchnumpy()[c]
        kind = _array_kind(a)
        if len(a) != len(at) or (kind is None and c not in codes):
            del a, columns, arrays
            return _fallback(report, query, order, codes)
        if moved:
            a = a[at]  # the column as it came is freed here
        if c in codes:
            columns[c] = _categorical(a, codes[c])
        elif kind == "masked":
            columns[c] = _nullable(a)
        else:
            columns[c] = a
    return pd.DataFrame(columns, copy=False)


def _array_kind(a: Any) -> str | None:
    """How :func:`ordered_frame` takes a column from ``fetchnumpy()``: "plain" (numbers or booleans
    without NULLs), "masked" (integers or booleans with NULLs), None (anything else: read by DuckDB)."""
    import numpy as np

    if isinstance(a, np.ma.MaskedArray):
        return "masked" if a.dtype.kind in "iub" else None
    return "plain" if isinstance(a, np.ndarray) and a.dtype.kind in "iubf" else None


def _nullable(a: Any) -> Any:
    """The pandas nullable array (Int64, Int32, boolean, ...) of a masked array, as ``report.df`` gives it."""
    import numpy as np
    import pandas as pd

    data, mask = np.ma.getdata(a), np.ma.getmaskarray(a)
    return pd.arrays.BooleanArray(data, mask) if data.dtype.kind == "b" else pd.arrays.IntegerArray(data, mask)


def _categorical(positions: Any, values: Sequence[str]) -> pd.Categorical:
    """The ordered categorical of ``values`` that ``report.df`` gives an ENUM of them, from positions."""
    import numpy as np
    import pandas as pd

    dtype = pd.CategoricalDtype(list(values), ordered=True)
    return pd.Categorical.from_codes(np.asarray(positions).astype(np.int8), dtype=dtype)


def _fallback(report: Report, query: str, order: Sequence[str], codes: dict[str, Sequence[str]]) -> pd.DataFrame:
    """:func:`ordered_frame` by DuckDB's ORDER BY, the ``codes`` columns made categorical as there."""
    import numpy as np
    import pandas as pd

    frame = report.df(f"{query} ORDER BY {', '.join(order)}")
    for c, values in codes.items():
        frame[c] = _categorical(frame[c].to_numpy(np.int8), values)
    return frame


def ranges_table(report: Report) -> str:
    """Create the table of every range (marks left out) with a report-wide id; return its name.

    Columns: ``rid``, ``pid``, ``tid``, ``start_ns``, ``end_ns`` (NULL if it never ended),
    ``end_eff`` (``end_ns``, or :data:`FOREVER`), ``name_id``, ``domain_id``, ``source``,
    ``category``.
    """
    query = f"""
        SELECT row_number() OVER (ORDER BY pid, tid, start_ns, id) AS rid, pid, tid, start_ns,
               end_ns, coalesce(end_ns, {FOREVER}) AS end_eff, name_id, domain_id, source, category
        FROM nvtx_range WHERE kind = 'range'"""
    return temp_table(report, RANGES, query)


def _where(sources: Sequence[str] | None, categories: Sequence[str] | None) -> str:
    parts = ["TRUE"]
    for column, values in (("source", sources), ("category", categories)):
        if values is not None:
            quoted = ", ".join("'" + v.replace("'", "''") + "'" for v in values)
            parts.append(f"r.{column} IN ({quoted})" if values else "FALSE")
    return " AND ".join(parts)


def _selects_all(report: Report, where: str) -> bool:
    (selected, total) = report.sql(
        f"SELECT count(*) FILTER (WHERE {where}), count(*) FROM {ranges_table(report)} r"
    )[0]
    return bool(selected == total)


def _name(kind: str, *params: object) -> str:
    digest = hashlib.sha1(repr(params).encode()).hexdigest()[:10]
    return f"gpuscope_{kind}_{digest}"


def _keyed(report: Report, where: str, same_thread: bool) -> tuple[str, str]:
    """SQL of the operations and of the selected ranges, each with a thread key ``ktid``.

    An operation whose thread is known has ``ktid = tid`` (if ``same_thread``); otherwise
    :data:`ANY_THREAD`. Ranges appear once under their thread's key and once under the process's
    ANY_THREAD key, each only if some operation has that key.
    """
    ktid = f"coalesce(tid, {ANY_THREAD})" if same_thread else str(ANY_THREAD)
    ops = f"SELECT op_id, pid, {ktid} AS ktid, launch_ns, start_ns, end_ns FROM {ops_table(report)}"
    ranges = f"""
        SELECT k.pid, k.ktid, r.rid, r.start_ns, r.end_eff
        FROM {ranges_table(report)} r
        JOIN (SELECT DISTINCT pid, ktid FROM ({ops})) k
          ON k.pid = r.pid AND (k.ktid = {ANY_THREAD} OR k.ktid = r.tid)
        WHERE {where}"""
    return ops, ranges


def _levels(report: Report, where: str) -> int:
    """The largest ``j`` with ``2**j`` at most the number of selected ranges of one process (the
    most that one thread key can hold): the levels of :func:`_last_covering`."""
    (most,) = report.sql(
        f"SELECT coalesce(max(n), 1) FROM (SELECT count(*) AS n FROM {ranges_table(report)} r "
        f"WHERE {where} GROUP BY pid)"
    )[0]
    return max(int(most), 1).bit_length() - 1


def _last_covering(indexed: str, queries: str, levels: int) -> str:
    """SQL: per query, the largest index ``i <= p`` in ``indexed`` with ``end_eff >= c`` (0: none).

    ``indexed`` has ``pid, ktid, i`` and ``m0 .. m{levels}``, where ``m{j}`` is the latest end among
    the ``2**j`` ranges ending at index ``i``; ``queries`` has ``pid, ktid, qid, c`` and ``cur = p``.
    Going down from ``p``, blocks of ``2**j`` ranges that all end before ``c`` are skipped, largest
    blocks first (binary lifting), so each query takes ``levels + 1`` equality joins.
    """
    q = f"SELECT pid, ktid, qid, c, cur FROM ({queries})"
    for j in range(levels, -1, -1):
        q = f"""
            SELECT q.pid, q.ktid, q.qid, q.c,
                   CASE WHEN q.cur >= {2**j} AND s.m{j} < q.c THEN q.cur - {2**j} ELSE q.cur END AS cur
            FROM ({q}) q LEFT JOIN {indexed} s ON s.pid = q.pid AND s.ktid = q.ktid AND s.i = q.cur"""
    return q


def _indexed(ranges: str, levels: int) -> str:
    """SQL: ``ranges`` numbered per thread key by start (ties: the longer first), with the
    block maxima of their ends that :func:`_last_covering` needs (each level from the one below)."""
    q = f"""
        SELECT *, end_eff AS m0,
               row_number() OVER (PARTITION BY pid, ktid ORDER BY start_ns, end_eff DESC, rid) AS i
        FROM ({ranges})"""
    for j in range(levels):
        q = f"""
            SELECT *, greatest(m{j}, coalesce(lag(m{j}, {2**j}) OVER (PARTITION BY pid, ktid ORDER BY i),
                                               m{j})) AS m{j + 1}
            FROM ({q})"""
    return q


def innermost_table(
    report: Report,
    sources: Sequence[str] | None = None,
    categories: Sequence[str] | None = None,
    same_thread: bool = True,
) -> str:
    """Create the table ``(op_id, rid)`` of each operation's innermost enclosing range; return its name.

    Only ranges of the given ``sources`` and ``categories`` (None: all) take part; operations that
    no such range encloses have no row. With ``same_thread=False`` the launching thread is ignored.

    Per thread key, the innermost range is the last range started by the launch that has not
    ended (:mod:`.nesting`).
    """
    where = _where(sources, categories)
    if (sources, categories) != (None, None) and _selects_all(report, where):
        return innermost_table(report, same_thread=same_thread)
    name = _name("innermost", sources, categories, same_thread)
    if _exists(report, name):
        return name
    from .nesting import innermost_into  # it builds on this module

    ops, ranges = _keyed(report, where, same_thread)
    return innermost_into(report, name, ops, ranges)


def innermost_query(ops: str, intervals: str, levels: int) -> str:
    """SQL of ``(op_id, rid)``: for each operation of ``ops`` (``op_id, pid, ktid, launch_ns``),
    the innermost interval of ``intervals`` (``pid, ktid, rid, start_ns, end_eff``) under the same
    ``(pid, ktid)`` that contains its launch; no row where none does. ``levels``: as
    :func:`_levels`, for the most intervals under one key."""
    return f"""
        WITH op AS MATERIALIZED ({ops}),
        kr AS MATERIALIZED ({_indexed(intervals, levels)}),
        ev AS (
            SELECT pid, ktid, start_ns AS t, 1 AS is_start FROM kr
            UNION ALL SELECT pid, ktid, start_ns, 0 FROM kr
            UNION ALL SELECT pid, ktid, end_eff + 1, 0 FROM kr WHERE end_eff < {FOREVER}),
        points AS (  -- each point, with the number of ranges started by then
            SELECT DISTINCT pid, ktid, t AS c, t AS qid, started AS cur FROM (
                SELECT *, count(CASE WHEN is_start = 1 THEN 1 END) OVER (
                    PARTITION BY pid, ktid ORDER BY t, is_start DESC ROWS UNBOUNDED PRECEDING) AS started
                FROM ev)
            WHERE is_start = 0),
        seg AS MATERIALIZED (
            SELECT q.pid, q.ktid, q.c, kr.rid
            FROM ({_last_covering('kr', 'SELECT * FROM points', levels)}) q
            LEFT JOIN kr ON kr.pid = q.pid AND kr.ktid = q.ktid AND kr.i = q.cur)
        SELECT op.op_id, seg.rid
        FROM op ASOF JOIN seg ON seg.pid = op.pid AND seg.ktid = op.ktid AND op.launch_ns >= seg.c
        WHERE seg.rid IS NOT NULL"""


def enclosing_table(
    report: Report,
    sources: Sequence[str] | None = None,
    categories: Sequence[str] | None = None,
    same_thread: bool = True,
) -> str:
    """Create the table ``(op_id, rid)`` of every (operation, enclosing range) pair; return its name.

    Per thread key, launches are numbered in time order; the launches inside a range are then the
    consecutive numbers between two counts, which are expanded and joined by equality.
    """
    where = _where(sources, categories)
    if (sources, categories) != (None, None) and _selects_all(report, where):
        return enclosing_table(report, same_thread=same_thread)
    name = _name("enclosing", sources, categories, same_thread)
    if _exists(report, name):
        return name
    ops, ranges = _keyed(report, where, same_thread)
    query = f"""
        WITH op AS MATERIALIZED (
            SELECT *, row_number() OVER (PARTITION BY pid, ktid ORDER BY launch_ns, op_id) AS pos
            FROM ({ops})),
        kr AS MATERIALIZED ({ranges}),
        ev AS (  -- at equal times: range starts, then launches, then range ends
            SELECT pid, ktid, start_ns AS t, 0 AS f, rid FROM kr
            UNION ALL SELECT pid, ktid, launch_ns, 1, NULL FROM op
            UNION ALL SELECT pid, ktid, end_eff, 2, rid FROM kr),
        counted AS (
            SELECT *, count(CASE WHEN f = 1 THEN 1 END) OVER (
                PARTITION BY pid, ktid ORDER BY t, f ROWS UNBOUNDED PRECEDING) AS n
            FROM ev),
        bounds AS (
            SELECT pid, ktid, rid, max(n) FILTER (WHERE f = 0) + 1 AS lo, max(n) FILTER (WHERE f = 2) AS hi
            FROM counted WHERE f <> 1 GROUP BY pid, ktid, rid),
        spans AS (
            SELECT pid, ktid, rid, unnest(range(lo, hi + 1)) AS pos FROM bounds WHERE hi >= lo)
        SELECT op.op_id, spans.rid FROM spans JOIN op USING (pid, ktid, pos)"""
    return temp_table(report, name, query)


def parent_tree(intervals: str, levels: int, depth: str) -> str:
    """Return the CTEs (for a ``WITH RECURSIVE``) that end in ``tree(rid, parent, <depth>)``: each
    interval of ``intervals`` (columns pid, ktid, rid, start_ns, end_eff) with its parent, the last
    interval of its (pid, ktid) before it in start order that ends no earlier, and its depth (0 for
    an interval without parent)."""
    queries = "SELECT pid, ktid, rid AS qid, end_eff AS c, i - 1 AS cur FROM kr"
    return f"""kr AS MATERIALIZED ({_indexed(intervals, levels)}),
        q AS ({_last_covering('kr', queries, levels)}),
        parents AS MATERIALIZED (
            SELECT q.qid AS rid, p.rid AS parent
            FROM q LEFT JOIN kr p ON p.pid = q.pid AND p.ktid = q.ktid AND p.i = q.cur),
        tree(rid, parent, {depth}) AS (
            SELECT rid, parent, 0 FROM parents WHERE parent IS NULL
            UNION ALL
            SELECT c.rid, c.parent, tree.{depth} + 1 FROM parents c JOIN tree ON c.parent = tree.rid)"""


def range_tree_table(report: Report) -> str:
    """Create the table ``(rid, parent, level)`` of every range's place among the ranges of its
    thread (all sources); return its name.

    The parent is the tightest range of the same thread that encloses the whole range (the latest
    started; of equal ranges, the one listed first); ``level`` is 0 for a range without parent.
    """
    name = "gpuscope_range_tree"
    if _exists(report, name):
        return name
    from .nesting import tree_into  # it builds on this module

    return tree_into(report, name, f"SELECT pid, tid AS ktid, rid, start_ns, end_eff FROM {ranges_table(report)}")


def _op_name() -> str:
    cases = " ".join(f"WHEN '{k}' THEN '{v}'" for k, v in COPY_LABEL.items())
    return f"""CASE o.kind WHEN 'kernel' THEN kn.value WHEN 'memset' THEN '[CUDA memset]'
               WHEN 'graph' THEN '[CUDA graph]'
               ELSE '[CUDA memcpy ' || (CASE o.copy_kind {cases} ELSE o.copy_kind END) || ']' END"""


def _frame(report: Report, pairs: str) -> pd.DataFrame:
    return report.df(
        f"""
        SELECT o.op_id, o.kind, {_op_name()} AS name, o.pid, o.tid, o.launch_ns, o.start_ns, o.end_ns,
               r.rid AS range_id, rn.value AS range_name, r.source AS range_source,
               r.category AS range_category, r.tid AS range_tid, r.start_ns AS range_start_ns,
               r.end_ns AS range_end_ns
        FROM {ops_table(report)} o
        LEFT JOIN {pairs} p ON p.op_id = o.op_id
        LEFT JOIN {ranges_table(report)} r ON r.rid = p.rid
        LEFT JOIN string kn ON kn.id = o.name_id
        LEFT JOIN string rn ON rn.id = r.name_id
        ORDER BY o.op_id, r.start_ns"""
    )


def innermost(
    report: Report,
    sources: Sequence[str] | None = None,
    categories: Sequence[str] | None = None,
    same_thread: bool = True,
) -> pd.DataFrame:
    """Every GPU operation with its launch point and its innermost enclosing range.

    Returns one row per operation: ``op_id, kind, name, pid, tid, launch_ns, start_ns, end_ns`` and
    the range's ``range_id, range_name, range_source, range_category, range_tid, range_start_ns,
    range_end_ns`` (NULL when no range encloses the launch).
    """
    return _frame(report, innermost_table(report, sources, categories, same_thread))


def op_ranges(
    report: Report,
    sources: Sequence[str] | None = None,
    categories: Sequence[str] | None = None,
    same_thread: bool = True,
) -> pd.DataFrame:
    """Every GPU operation with each range that encloses its launch, at any depth.

    Returns the columns of :func:`innermost`, one row per (operation, enclosing range) pair, and
    one row with NULL range columns for an operation that no range encloses.
    """
    return _frame(report, enclosing_table(report, sources, categories, same_thread))
