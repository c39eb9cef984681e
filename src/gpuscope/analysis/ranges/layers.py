"""GPU and CPU time per PyTorch module (layer), from the ranges of gpuscope's PyTorch hooks.

Each GPU operation belongs to its innermost enclosing PyTorch range (source ``torch``) on the thread
that launched it. Module forward ranges run on the calling thread and backward ranges on
autograd's worker thread; an operation launched by a thread that has no PyTorch range open (the
autograd worker between module backward ranges) belongs to the ``loss.backward()`` call
(category ``autograd``) open at that time on any thread of its process. Modules without
parameters of their own (activations, dropout) have no backward range, so their backward kernels
count to the module around them. Without CUDA API records the launching thread is unknown and
ranges of every thread of the process count (:mod:`..ops.attribution`).
"""

from __future__ import annotations

from ...trace.report import Report
from ..ops.attribution import innermost_table, ops_table, ranges_table, temp_table
from ..ops.enclosed import union_gpu_time
from .module_steps import module_steps, ranged_ops_sql
from ..steps.source import StepSource, op_steps_table, step_source
from ..table import Column, Table

MODULE = ("forward", "backward")
OUTSIDE = "(not in a module)"
OWNER_RID = "gpuscope_owner_rid"  # each operation with the rid of the range that owns it, for a moment

COLUMNS = [
    Column("Name"), Column("Kind"), Column("Calls", "count"), Column("GPU Self", "ns"),
    Column("Share", "percent"), Column("Kernels", "count"), Column("Fwd GPU Self", "ns"),
    Column("Fwd GPU Total", "ns"), Column("Bwd GPU Self", "ns"), Column("Bwd GPU Total", "ns"),
    Column("Fwd CPU", "ns"), Column("Bwd CPU", "ns"), Column("Top Kernel"),
]  # fmt: skip


def _no_torch(report: Report) -> list[str]:
    hint = report.not_recorded().get("torch")
    if hint:
        return [f"No PyTorch ranges in this report: {hint}."]
    return ["No PyTorch ranges in this report: record module, optimizer and step ranges with --trace torch."]

def _owned(report: Report, source: StepSource) -> str:
    """SQL: every operation with its duration, whether it was launched within a step, and the
    PyTorch range that owns it (its innermost one on its thread, else the backward call open).

    Also ``pid``, ``start_ns`` and ``end_ns`` of the operation. The rows are made once per report
    and step source, into a table of their own, in two joins at a time: all five joined in one
    query held five hash tables of the run's size at once, more than the memory a report may use
    (:data:`...trace.report.MEMORY_LIMIT`) at ten million operations.
    """
    table = temp_table(report, f"gpuscope_owned_{source.kind or 'none'}", lambda: _owned_query(report, source))
    report.sql(f"DROP TABLE IF EXISTS {OWNER_RID}")  # the first join's rows, in the table now
    return f"""
            SELECT w.op_id, w.kind, w.name_id, w.d, w.in_step, w.ranged, w.category,
                   CASE WHEN w.owner_rid IS NULL THEN '{OUTSIDE}' ELSE n.value END AS row_name,
                   w.row_kind, w.owner_rid, w.pid, w.start_ns, w.end_ns
            FROM {table} w LEFT JOIN string n ON n.id = w.owner_name_id"""


def _owned_query(report: Report, source: StepSource) -> str:
    ops, ranges = ops_table(report), ranges_table(report)
    own = innermost_table(report, sources=("torch",))
    backward_call = innermost_table(report, sources=("torch",), categories=("autograd",), same_thread=False)
    owner = temp_table(report, OWNER_RID, f"""
        SELECT o.op_id, o.kind, o.name_id, o.pid, o.start_ns, o.end_ns, coalesce(a.rid, b.rid) AS rid
        FROM {ops} o LEFT JOIN {own} a ON a.op_id = o.op_id LEFT JOIN {backward_call} b ON b.op_id = o.op_id""")
    in_step = f"x.op_id IN (SELECT op_id FROM {op_steps_table(report, source)})" if source.kind else "TRUE"
    ranged_ops = ranged_ops_sql(report, source)
    ranged = f"x.op_id IN ({ranged_ops})" if ranged_ops else "TRUE"
    return f"""
        SELECT x.op_id, x.kind, x.name_id, x.end_ns - x.start_ns AS d, {in_step} AS in_step, {ranged} AS ranged,
               r.category,
               r.name_id AS owner_name_id,
               CASE WHEN r.category IN ('forward', 'backward') THEN 'module' ELSE r.category END AS row_kind,
               r.rid AS owner_rid, x.pid, x.start_ns, x.end_ns
        FROM {owner} x LEFT JOIN {ranges} r ON r.rid = x.rid"""


def op_owners_sql(report: Report) -> str:
    """SQL: every GPU operation with the PyTorch range that owns it, as ``layer_sum`` counts it.

    Columns: ``op_id, kind, name_id, d`` (duration), ``in_step``, ``ranged`` (launched in a step with
    module ranges, or TRUE where every step has them: analysis/ranges/module_steps.py), ``category`` (of the owning
    range), ``row_name`` (its name, or ``(not in a module)``), ``row_kind`` (``module``,
    ``optimizer``, ``autograd``, ...; NULL outside every range) and ``owner_rid`` (the owning
    range's ``rid`` in :func:`..ops.attribution.ranges_table`; NULL outside every range), then the
    operation's ``pid``, ``start_ns`` and ``end_ns``.
    """
    return _owned(report, step_source(report))


def kernels_per_range(report: Report) -> dict[tuple[str, str | None], int]:
    """Return the kernels each PyTorch range name owns, by (name, category): ``("GPT.head",
    "forward")``; kernels outside them all under ``("(not in a module)", None)``."""
    owned = _owned(report, step_source(report))
    rows = report.sql(f"SELECT row_name, category, count(*) FROM ({owned}) WHERE kind = 'kernel' GROUP BY ALL")
    return {(name, category): int(n) for name, category, n in rows}


def module_labels(report: Report) -> dict[str, str]:
    """Return, per module name whose class the report holds (``module_class``, schema 8), how tables
    and the viewer show it: ``Sequential.2 (Linear)``; a name that ends in its class (``Net``,
    ``Net.Block`` of class ``Block``) stays as it is. Two classes under one name (two models with the
    same root class) are both said: ``Sequential.0 (Linear/Conv2d)``. Keys stay names: ranges and
    ``gpuscope diff`` match modules by name."""
    if not report.count("module_class"):
        return {}
    rows = report.sql(
        """SELECT n.value, string_agg(DISTINCT c.value, '/' ORDER BY c.value)
           FROM module_class m JOIN string n ON n.id = m.name_id JOIN string c ON c.id = m.class_id
           GROUP BY n.value""")
    return {str(name): f"{name} ({cls})" for name, cls in rows if cls and str(name).rpartition(".")[2] != cls}


def layer_sum(report: Report) -> Table:
    """Per module: calls, GPU time it launched itself (forward, backward) and with its submodules,
    CPU time of its ranges, kernels and top kernel; then one row per other PyTorch range (optimizer,
    zero_grad, autograd outside modules, dataloader) and one for operations outside them all.

    GPU Self adds up, over all rows, to the GPU time (sum of durations) of all operations. Share is
    a row's GPU Self over the GPU time of all operations, both counting only operations launched
    within steps when the report has steps (:mod:`..steps.source`). Totals include submodules; CPU times are
    sums of range durations (ranges that never ended are left out).
    """
    name, title = "layer_sum", "PyTorch Layer Summary"
    if not report.count("nvtx_range") or not report.sql(
        "SELECT count(*) FROM nvtx_range WHERE source = 'torch' AND kind = 'range'"
    )[0][0]:
        return Table(name, title, COLUMNS, [], _no_torch(report))
    ops, ranges = ops_table(report), ranges_table(report)
    report.con.register("gpuscope_module_gpu", union_gpu_time(report, ("torch",), MODULE))
    source = step_source(report)
    rows = report.sql(
        f"""
        WITH owned AS (SELECT * FROM ({_owned(report, source)}) WHERE ranged),
        self AS (
            SELECT row_kind, row_name, sum(d) AS gpu, sum(d) FILTER (WHERE in_step) AS step_gpu,
                   count(*) FILTER (WHERE kind = 'kernel') AS kernels,
                   sum(d) FILTER (WHERE category = 'forward') AS fwd,
                   sum(d) FILTER (WHERE category = 'backward') AS bwd
            FROM owned GROUP BY ALL),
        top AS (
            SELECT row_kind, row_name, arg_max(name_id, t) AS top_id FROM (
                SELECT row_kind, row_name, name_id, sum(d) AS t FROM owned WHERE kind = 'kernel' GROUP BY ALL)
            GROUP BY ALL),
        inclusive AS (  -- an operation counts once even where instances overlap
            SELECT n.value AS row_name, sum(g.gpu_ns) FILTER (WHERE g.category = 'forward') AS fwd,
                   sum(g.gpu_ns) FILTER (WHERE g.category <> 'forward') AS bwd
            FROM gpuscope_module_gpu g JOIN string n ON n.id = g.name_id
            GROUP BY ALL),
        calls AS (
            SELECT CASE WHEN r.category IN ('forward', 'backward') THEN 'module' ELSE r.category END AS row_kind,
                   n.value AS row_name, count(*) FILTER (WHERE r.category = 'forward') AS fwd_n,
                   count(*) AS n, sum(r.end_ns - r.start_ns) FILTER (WHERE r.category = 'forward') AS fwd_cpu,
                   sum(r.end_ns - r.start_ns) FILTER (WHERE r.category = 'backward') AS bwd_cpu
            FROM {ranges} r JOIN string n ON n.id = r.name_id
            WHERE r.source = 'torch' AND r.category IS DISTINCT FROM 'model' GROUP BY ALL),
        all_rows AS (
            SELECT row_kind, row_name FROM self UNION SELECT row_kind, row_name FROM calls)
        SELECT a.row_name, a.row_kind,
               CASE WHEN c.row_kind = 'module' AND c.fwd_n > 0 THEN c.fwd_n ELSE c.n END,
               coalesce(s.gpu, 0), 100.0 * coalesce(s.step_gpu, 0) / nullif(sum(s.step_gpu) OVER (), 0),
               coalesce(s.kernels, 0),
               CASE WHEN a.row_kind = 'module' THEN coalesce(s.fwd, 0) END,
               CASE WHEN a.row_kind = 'module' THEN coalesce(i.fwd, 0) END,
               CASE WHEN a.row_kind = 'module' THEN coalesce(s.bwd, 0) END,
               CASE WHEN a.row_kind = 'module' THEN coalesce(i.bwd, 0) END,
               c.fwd_cpu, c.bwd_cpu, k.value
        FROM all_rows a
        LEFT JOIN self s ON s.row_kind IS NOT DISTINCT FROM a.row_kind AND s.row_name = a.row_name
        LEFT JOIN calls c ON c.row_kind IS NOT DISTINCT FROM a.row_kind AND c.row_name = a.row_name
        LEFT JOIN inclusive i ON a.row_kind = 'module' AND i.row_name = a.row_name
        LEFT JOIN top t ON t.row_kind IS NOT DISTINCT FROM a.row_kind AND t.row_name = a.row_name
        LEFT JOIN string k ON k.id = t.top_id
        ORDER BY 4 DESC, a.row_name, a.row_kind"""
    )
    report.con.unregister("gpuscope_module_gpu")
    share = f"within steps ({source.description})" if source.kind else "(no steps were found)"
    notes = [
        (
            "GPU Self: GPU time of the operations launched while this was the innermost PyTorch range; "
            f"over all rows it adds up to the GPU time of all operations. Share: of GPU time {share}."
        ),
    ]
    said = module_steps(report)
    if said is not None and said.sampled and source.kind:
        notes.append(f"Steps: {said.describe()}; the GPU columns count the operations of those steps only.")
    hint = report.not_recorded().get("torch_backward")
    if hint:
        notes.append(f"Not recorded: {hint}; the kernels of the backward pass count to the backward() call.")
    if not report.count(ops):  # without GPU activity the GPU columns are left empty, not 0
        notes.append("No GPU activity in this report: CPU times only.")
        gpu_columns = {3, 4, 5, 6, 7, 8, 9, 12}
        rows = [tuple(None if i in gpu_columns else v for i, v in enumerate(r)) for r in rows]
    elif not report.count("api_call"):
        notes.append("No CUDA API calls in this report: operations are placed by their launch anchors "
                     "on any thread of their process; add --trace cuda-api to place them on their thread.")
    labels = module_labels(report)
    if labels:  # a module shown with its class; other ranges (optimizer, dataloader) by name
        rows = [(labels.get(r[0], r[0]) if r[1] == "module" else r[0], *r[1:]) for r in rows]
    return Table(name, title, COLUMNS, rows, notes)
