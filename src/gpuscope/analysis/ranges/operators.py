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
from ..heap import give_back
from ..ops.attribution import _exists, ops_table
from .op_nesting import call_numbers, frames_into, launch_owners
from .op_windows import sampled, windows
from ..table import Column, Table

TORCH_OPS = "gpuscope_torch_op"
OP_KERNELS = "gpuscope_op_torch_op"
OUTSIDE = "(not in an operator)"
PACKED = "gpuscope_packed"  # an in-memory database of the connection whose tables are stored compressed
BATCH = 4 * 122_880  # rows of the operators' table made at a time: four of DuckDB's row groups

COLUMNS = [
    Column("Name"), Column("Input Shapes"), Column("Input Dtypes"), Column("Calls", "count"),
    Column("CPU Total", "ns"), Column("CPU Avg", "ns"), Column("Kernels", "count"),
    Column("GPU Time", "ns"), Column("GPU Share", "percent"),
]  # fmt: skip


def torch_ops_table(report: Report) -> str:
    """Create the table of every PyTorch operator call with its place among those of its thread;
    return its name.

    Columns: ``torch_op_id`` (numbered by process, start, thread), ``pid``, ``tid``, ``start_ns``,
    ``end_ns``, ``name`` (``aten::mm``), ``seq``, ``shapes``, ``dtypes``, ``out_shapes``,
    ``scalars`` (JSON text as stored), ``depth`` (0 for an operator no other one of its thread
    encloses) and ``parent_id`` (the tightest enclosing operator of its thread, NULL at depth 0:
    the last one of the thread started before it, of equal starts the longer, that ends no earlier).
    The numbers, names and nesting are worked out by :func:`.op_nesting.call_numbers` (in memory
    linear in the operators; DuckDB's window functions over three million nested calls took most
    of a gigabyte), paired with the stored calls by position, and the table is kept compressed
    (:data:`PACKED`: a tenth of the memory of a temporary table), made a batch of rows at a time;
    the name returned is a view of it.
    """
    if _view_exists(report, TORCH_OPS):
        return TORCH_OPS
    numbers = f"{TORCH_OPS}_numbers"
    columns = call_numbers(report)
    named = bool(columns["named"].all())  # type: ignore[union-attr]
    if named:
        del columns["named"]
    frames_into(report, numbers, columns, ("parent_id",))
    del columns
    give_back()  # the arrays' memory, kept by malloc (heap.py), to the table made next
    # the numbers are in the order of torch_op's rows (kept, as insertion order is): paired by position
    calls = f"""
        SELECT n.torch_op_id, t.pid, t.tid, t.start_ns, t.end_ns, CAST(n.name AS VARCHAR) AS name, t.seq, t.shapes,
               t.dtypes, t.out_shapes, t.scalars, n.depth, n.parent_id{'' if named else ', n.named'}
        FROM torch_op t POSITIONAL JOIN {numbers} n"""
    _attach_packed(report)
    packed = f"{PACKED}.{TORCH_OPS}"
    report.sql(f"CREATE OR REPLACE TABLE {packed} AS SELECT * EXCLUDE (named) FROM ({calls}) LIMIT 0"
               if not named else f"CREATE OR REPLACE TABLE {packed} AS {calls} LIMIT 0")
    (rows,) = report.sql("SELECT count(*) FROM torch_op")[0]
    for at in range(0, int(rows), BATCH):
        part = f"SELECT * FROM ({calls}) LIMIT {BATCH} OFFSET {at}"
        report.sql(f"INSERT INTO {packed} {part}" if named else
                   f"INSERT INTO {packed} SELECT * EXCLUDE (named) FROM ({part}) WHERE named")
        report.sql(f"CHECKPOINT {PACKED}")  # compressed: the batch's rows as they came are freed
    report.sql(f"DROP TABLE {numbers}")
    report.sql(f"CREATE OR REPLACE TEMP VIEW {TORCH_OPS} AS SELECT * FROM {packed}")
    return TORCH_OPS


def _attach_packed(report: Report) -> None:
    import duckdb

    try:
        report.con.execute(f"ATTACH IF NOT EXISTS ':memory:' AS {PACKED} (COMPRESS)")
    except duckdb.Error:  # a DuckDB without in-memory compression (before 1.2): its tables as they come
        report.con.execute(f"ATTACH IF NOT EXISTS ':memory:' AS {PACKED}")


def _view_exists(report: Report, name: str) -> bool:
    return bool(report.sql("SELECT 1 FROM duckdb_views() WHERE temporary AND view_name = ?", [name]))


def op_kernels_table(report: Report) -> str:
    """Create the table ``(op_id, torch_op_id)`` of every GPU operation of ``ops_table`` with the
    innermost PyTorch operator running at its launch (NULL when none was); return its name.

    The operator running at a launch is the innermost one of its thread key (its thread, or all
    threads of its process for launches of an unknown thread) whose ``[start_ns, end_ns]`` holds it:
    :func:`.op_nesting.launch_owners`, in memory linear in the operators and launches.
    """
    if _exists(report, OP_KERNELS):
        return OP_KERNELS
    ops, calls = ops_table(report), torch_ops_table(report)
    op_id, owner = launch_owners(report, f"SELECT op_id, pid, tid, launch_ns FROM {ops}", calls)
    frames_into(report, OP_KERNELS, {"op_id": op_id, "torch_op_id": owner}, ("torch_op_id",))
    del op_id, owner
    give_back()
    return OP_KERNELS


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
