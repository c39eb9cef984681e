"""PyTorch operators (``torch_op``, recorded with ``--trace torch-ops``) and the GPU work they launched.

Every GPU operation of :func:`..ops.attribution.ops_table` belongs to the *innermost* operator that was
running on its launching thread when it was launched: the operator of the same process and thread
whose ``[start_ns, end_ns]`` contains the launch (of all threads of the process when the launching
thread is unknown, as in :mod:`..ops.attribution`); among nested operators, the one that started last.
The recorder sees operators at the level where autograd hands them to the backend, so the
operators of one thread do not nest in reports it wrote (``depth`` 0); nesting is still worked out
for reports whose operators do.
"""

from __future__ import annotations

import json

from ...trace.report import Report
from ..ops.attribution import ANY_THREAD, FOREVER, ops_table, temp_table
from ..ops.nesting import innermost_into, tree_into
from .op_windows import sampled, windows
from ..table import Column, Table

TORCH_OPS = "gpuscope_torch_op"
OP_KERNELS = "gpuscope_op_torch_op"
OUTSIDE = "(not in an operator)"
_HELPERS = (f"{TORCH_OPS}_calls", f"{TORCH_OPS}_tree")  # dropped once the operators' table is made
_OWNER_HELPERS = (f"{OP_KERNELS}_calls", f"{OP_KERNELS}_tangled", f"{OP_KERNELS}_general")

COLUMNS = [
    Column("Name"), Column("Input Shapes"), Column("Input Dtypes"), Column("Calls", "count"),
    Column("CPU Total", "ns"), Column("CPU Avg", "ns"), Column("Kernels", "count"),
    Column("GPU Time", "ns"), Column("GPU Share", "percent"),
]  # fmt: skip


def _before(partition: str, end: str, tiebreak: str) -> str:
    """SQL: the latest end among the intervals before this one in its partition (in start order,
    of equal starts the longer first)."""
    return (f"max({end}) OVER (PARTITION BY {partition} ORDER BY start_ns, {end} DESC, {tiebreak} "
            "ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)")


def torch_ops_table(report: Report) -> str:
    """Create the table of every PyTorch operator call with its place among those of its thread;
    return its name.

    Columns: ``torch_op_id`` (numbered by process, start, thread), ``pid``, ``tid``, ``start_ns``,
    ``end_ns``, ``name`` (``aten::mm``), ``seq``, ``shapes``, ``dtypes``, ``out_shapes``,
    ``scalars`` (JSON text as stored), ``depth`` (0 for an operator no other one of its thread
    encloses) and ``parent_id`` (the tightest enclosing operator of its thread, NULL at depth 0:
    the last one of the thread started before it, of equal starts the longer, that ends no earlier).
    The nesting is found by :func:`..ops.nesting.tree_into`, in memory linear in the operators.
    """
    name = temp_table(report, TORCH_OPS, lambda: _calls_query(report))
    for helper in _HELPERS:
        report.sql(f"DROP TABLE IF EXISTS {helper}")
    return name


def _calls_query(report: Report) -> str:
    """The query of :func:`torch_ops_table`; where operators nest, it first creates the tables it reads
    (numbered calls and their tree), which :func:`torch_ops_table` drops once the table is made."""
    end = f"coalesce(end_ns, {FOREVER})"
    calls = """
        SELECT row_number() OVER (ORDER BY pid, start_ns, tid, end_ns DESC, name_id) AS torch_op_id,
               pid, tid, start_ns, end_ns, name_id, seq, shapes, dtypes, out_shapes, scalars
        FROM torch_op"""
    columns = """t.torch_op_id, t.pid, t.tid, t.start_ns, t.end_ns, s.value AS name, t.seq, t.shapes,
               t.dtypes, t.out_shapes, t.scalars"""
    (nested,) = report.sql(f"SELECT count(*) FROM (SELECT {end} AS e, {_before('pid, tid', end, 'name_id')} AS b "
                           "FROM torch_op) WHERE b >= e")[0]
    if not nested:  # what the recorder writes: no call encloses another of its thread
        return f"""
            SELECT {columns}, 0 AS depth, CAST(NULL AS BIGINT) AS parent_id
            FROM ({calls}) t JOIN string s ON s.id = t.name_id"""
    numbered, tree = _HELPERS
    for helper in _HELPERS:
        report.sql(f"DROP TABLE IF EXISTS {helper}")
    report.sql(f"CREATE TEMP TABLE {numbered} AS {calls}")  # once, so that equal calls keep their ids
    tree_into(report, tree, f"SELECT pid, tid AS ktid, torch_op_id AS rid, start_ns, {end} AS end_eff FROM {numbered}")
    return f"""
        SELECT {columns}, tree.level AS depth, tree.parent AS parent_id
        FROM {numbered} t JOIN {tree} tree ON tree.rid = t.torch_op_id JOIN string s ON s.id = t.name_id"""


def op_kernels_table(report: Report) -> str:
    """Create the table ``(op_id, torch_op_id)`` of every GPU operation of ``ops_table`` with the
    innermost PyTorch operator running at its launch (NULL when none was); return its name.

    Where the operators of a thread key (a thread, or all threads of a process for launches of an
    unknown thread) never overlap, the one running at a launch is the last one started before it,
    if it has not ended (an as-of join); keys with overlapping operators take the general way of
    :func:`..ops.nesting.innermost_into` (memory linear in the operators and launches).
    """
    name = temp_table(report, OP_KERNELS, lambda: _owners_query(report))
    for helper in _OWNER_HELPERS:
        report.sql(f"DROP TABLE IF EXISTS {helper}")
    return name


def _owners_query(report: Report) -> str:
    """The query of :func:`op_kernels_table`; it first creates the tables it reads: the operators
    under each launch key, the keys where they overlap, and the innermost operator of each launch
    under those keys."""
    ops, calls = ops_table(report), torch_ops_table(report)
    keyed = f"SELECT op_id, pid, coalesce(tid, {ANY_THREAD}) AS ktid, launch_ns FROM {ops}"
    intervals = f"""
        SELECT k.pid, k.ktid, t.torch_op_id AS rid, t.start_ns, coalesce(t.end_ns, {FOREVER}) AS end_eff
        FROM {calls} t
        JOIN (SELECT DISTINCT pid, ktid FROM ({keyed})) k
          ON k.pid = t.pid AND (k.ktid = {ANY_THREAD} OR k.ktid = t.tid)"""
    keyed_calls, tangled, general = _OWNER_HELPERS
    for helper in _OWNER_HELPERS:
        report.sql(f"DROP TABLE IF EXISTS {helper}")
    report.sql(f"""CREATE TEMP TABLE {keyed_calls} AS
                   SELECT *, {_before('pid, ktid', 'end_eff', 'rid')} AS before FROM ({intervals})""")
    report.sql(f"CREATE TEMP TABLE {tangled} AS SELECT DISTINCT pid, ktid FROM {keyed_calls} WHERE before >= start_ns")
    innermost_into(report, general, f"SELECT * FROM ({keyed}) SEMI JOIN {tangled} USING (pid, ktid)",
                   f"SELECT pid, ktid, rid, start_ns, end_eff FROM {keyed_calls} SEMI JOIN {tangled} USING (pid, ktid)")
    return f"""
        WITH launches AS MATERIALIZED ({keyed}),
        simple AS (
            SELECT l.op_id, CASE WHEN c.end_eff >= l.launch_ns THEN c.rid END AS rid
            FROM (SELECT * FROM launches ANTI JOIN {tangled} USING (pid, ktid)) l
            ASOF JOIN (SELECT * FROM {keyed_calls} ANTI JOIN {tangled} USING (pid, ktid)) c
              ON c.pid = l.pid AND c.ktid = l.ktid AND l.launch_ns >= c.start_ns)
        SELECT o.op_id, i.rid AS torch_op_id
        FROM {ops} o
        LEFT JOIN (SELECT op_id, rid FROM simple WHERE rid IS NOT NULL
                   UNION ALL SELECT op_id, rid FROM {general}) i ON i.op_id = o.op_id"""


def _no_ops(report: Report) -> list[str]:
    trace = report.meta.get("trace")
    if isinstance(trace, list) and "torch-shapes" in trace:
        return ["No PyTorch operators in this report: no sample window of --trace torch-shapes opened (the first "
                "opens at the end of the first step, or without steps after the set-up's operators); record "
                "every operator with --trace torch-ops."]
    hint = report.not_recorded().get("torch_ops")
    if hint:
        return [f"No PyTorch operators in this report: {hint}."]
    names = ",".join(trace) if isinstance(trace, list) and trace else "..."
    return [f"No PyTorch operators in this report: rerun with --trace {names},torch-ops."]


def op_sum(report: Report) -> Table:
    """Per PyTorch operator and input signature (name, input shapes, input dtypes): calls, CPU time
    of the calls (total and average), and the GPU operations launched inside them (kernels, GPU
    time, share of all GPU time); a last row for GPU operations launched outside every operator.

    GPU Time adds up, over all rows, to the GPU time (sum of durations) of all operations; GPU Share
    is a row's GPU Time over that total. Rows are ordered by GPU time, then CPU time.
    """
    name, title = "op_sum", "PyTorch Operator Summary"
    if not report.count("torch_op"):
        return Table(name, title, COLUMNS, [], _no_ops(report))
    calls, ops, owner = torch_ops_table(report), ops_table(report), op_kernels_table(report)
    rows = report.sql(
        f"""
        WITH gpu AS (
            SELECT w.torch_op_id, count(*) FILTER (WHERE o.kind = 'kernel') AS kernels,
                   sum(o.end_ns - o.start_ns) AS t
            FROM {owner} w JOIN {ops} o USING (op_id) GROUP BY ALL),
        grand AS (SELECT nullif(sum(end_ns - start_ns), 0) AS t FROM {ops}),
        per_sig AS (
            SELECT c.name, c.shapes, c.dtypes, count(*) AS n, sum(c.end_ns - c.start_ns) AS cpu,
                   sum(coalesce(g.kernels, 0)) AS kernels, sum(coalesce(g.t, 0)) AS t
            FROM {calls} c LEFT JOIN gpu g ON g.torch_op_id = c.torch_op_id
            GROUP BY ALL
            UNION ALL
            SELECT '{OUTSIDE}', NULL, NULL, NULL, NULL, kernels, t FROM gpu WHERE torch_op_id IS NULL)
        SELECT s.name, s.shapes, s.dtypes, s.n, s.cpu, CAST(round(s.cpu / s.n) AS BIGINT), s.kernels,
               s.t, 100.0 * s.t / grand.t
        FROM per_sig s, grand
        ORDER BY s.name = '{OUTSIDE}', s.t DESC, s.cpu DESC, s.name, s.shapes, s.dtypes"""
    )
    notes = ["Calls grouped by operator, input shapes and input dtypes (one entry per argument up to the "
             "last tensor; null for others). CPU: time from the call's start "
             "to its end, on its thread. GPU: operations launched while the call was the innermost "
             "operator running on the launching thread."]
    if sampled(report):
        n, recorded, ns = windows(report)
        notes.append(f"Operators were recorded in {n} sample window{'s' if n != 1 else ''} only (--trace "
                     f"torch-shapes; {recorded:,} operators in {ns / 1e6:.4g} ms): calls, CPU and GPU times "
                     "cover those windows; GPU operations launched outside them are in the last row.")
    gpu = bool(report.count(ops))  # without GPU activity the GPU columns are left empty, not 0
    if not gpu:
        notes.append("No GPU activity in this report.")
    elif not report.count("api_call"):
        notes.append("No CUDA API calls in this report: GPU operations are placed by their launch anchors on "
                     "any thread of their process; add --trace cuda-api to place them on their thread.")
    shown = [(r[0], _trimmed(r[1]), _trimmed(r[2]), *r[3:6], *(r[6:] if gpu else (None, None, None)))
             for r in rows]
    return Table(name, title, COLUMNS, shown, notes)


def _trimmed(text: str | None) -> str | None:
    """A stored JSON list without its trailing nulls (the non-tensor arguments at its end)."""
    if text is None:
        return None
    items = json.loads(text)
    while items and items[-1] is None:
        items.pop()
    return json.dumps(items, separators=(",", ":"))


REPORTS = {"op_sum": op_sum}
