"""The work of each kernel: PyTorch operators' FLOPs and bytes (:mod:`.work_model`) handed to the
kernels they launched.

A kernel belongs to the innermost PyTorch operator open where it was launched
(:func:`.torch_ops.op_kernels_table`). An operator's work goes to its kernels by their share of
its kernel time, with one exception: the work of a matrix product, convolution or attention goes
only to its *main* kernels (GEMM, convolution and attention kernels, by name: ``gemm``, ``nvjet``,
``xmma``, ``cutlass``, ``fprop``, ``dgrad``, ``wgrad``, ``flash``, ``fmha``, ...) when it has any,
so a split-K reduction or a layout transform launched beside the product gets none and shows as a
kernel without work.

FP32 matrix work counts as TF32 on a kernel whose name says it runs on tensor cores (``tf32``,
``tensorop``, ``1688``, ``16816``, ``nvjet``, ``gmma``) and not on FMA units (``simt``, ``sgemm``,
``ffma``). A kernel's tensor-core use is ``used`` for matrix work in TF32, BF16, FP16 or FP8,
``eligible-unused`` for FP32 matrix work on CUDA cores (TF32 off, or a kernel without tensor
cores), and ``n/a`` for other work (and FP64, whose tensor-core use cannot be told from names).

With ``--trace torch-shapes`` operators are recorded in sample windows only; kernels launched
outside them take the work of sampled launches of the same kernel configuration
(:mod:`.carried`).

In a report without kernels (a program profiled on the CPU), the items are the operators
themselves, timed by their duration on the CPU (tensor-core use ``n/a``).
"""

from __future__ import annotations

import re
from weakref import WeakKeyDictionary

import pandas as pd

from ....trace.report import Report
from ...ops.attribution import ranges_table
from ...ranges.layers import OUTSIDE, op_owners_sql
from ...ops.innermost import innermost_sql
from ...steps.source import step_source, steps_table
from .carried import carry
from .call import precision_of
from .measured import PRECISIONS, half_precision, has_metrics, launch_metrics
from .model import Work, is_writer, op_work_json

MATRIX_KINDS = ("matmul", "conv", "attention")
# kernels that only write memory: random numbers, fills, workspace initialisation
WRITER_KERNEL = re.compile(r"distribution_|philox|curand|FillFunctor|fill_kernel|init_device_workspace|memset",
                           re.IGNORECASE)
MAIN_KERNEL = re.compile(
    r"gemm|gemv|nvjet|xmma|cutlass|implicit|fprop|dgrad|wgrad|winograd|convolve|fft|flash|fmha|attention|attn|sdpa",
    re.IGNORECASE,
)
TENSOR_KERNEL = re.compile(r"tf32|xf32|tensorop|1688|16816|nvjet|gmma|hmma|wgmma", re.IGNORECASE)
SIMT_KERNEL = re.compile(r"simt|sgemm|ffma", re.IGNORECASE)
TENSOR_PRECISIONS = ("tf32", "bf16", "fp16", "fp8")

COLUMNS = [
    "item", "name", "pid", "start_ns", "time_ns", "torch_op_id", "op_name", "work_kind", "precision",
    "flops", "matrix_flops", "bytes", "tensor_cores", "source", "layer", "owner", "in_step",
]  # fmt: skip


def _torch_ops() -> tuple[object, object]:
    from ...ranges import operators as torch_ops

    return torch_ops.torch_ops_table, torch_ops.op_kernels_table


def has_torch_ops(report: Report) -> bool:
    """Return whether the report recorded PyTorch operators (``--trace torch-ops``, or samples of them with
    ``--trace torch-shapes``)."""
    return bool(report.count("torch_op"))


def _works(report: Report, ops: str, ids: str) -> pd.DataFrame:
    """The work model of each operator whose id ``ids`` (SQL) selects, one row per operator. The
    model runs once per distinct call (name, shapes, dtypes, outputs, scalars): a run repeats them."""
    keys = "name, shapes, dtypes, out_shapes, scalars"
    rows = report.sql(f"SELECT DISTINCT {keys} FROM {ops} WHERE torch_op_id IN ({ids})")
    models = []
    for name, shapes, dtypes, outs, scalars in rows:
        w: Work | None = op_work_json(name, shapes, dtypes, outs, scalars)
        if w is not None:
            models.append((name, shapes, dtypes, outs, scalars, w.kind, w.precision, w.flops, w.matrix_flops,
                           w.bytes))
    columns = ["torch_op_id", "op_name", "work_kind", "precision", "op_flops", "op_matrix_flops", "op_bytes"]
    if not models:
        return pd.DataFrame(columns=columns)
    frame = pd.DataFrame(models, columns=["name", "shapes", "dtypes", "out_shapes", "scalars", *columns[2:]])
    frame = frame.astype({"name": object, "shapes": object, "dtypes": object, "out_shapes": object,
                          "scalars": object})
    report.con.register("_work_models", frame)
    try:
        same = " AND ".join(f"m.{k} IS NOT DISTINCT FROM t.{k}" for k in keys.split(", "))
        return report.df_shared(
            f"""SELECT t.torch_op_id, t.name AS op_name, m.work_kind, m.precision, m.op_flops, m.op_matrix_flops,
                       m.op_bytes
                FROM {ops} t JOIN _work_models m ON {same}
                WHERE t.torch_op_id IN ({ids}) ORDER BY t.torch_op_id""")
    finally:
        report.con.unregister("_work_models")


def _matches(names: pd.Series, pattern: re.Pattern[str]) -> pd.Series:
    """Whether each name contains ``pattern``, searched once per distinct name (a report of ten
    million kernels has a few hundred names)."""
    text = names.astype(str)
    found = {name: bool(pattern.search(name)) for name in text.unique()}
    return text.map(found).astype(bool)


def _tensor_state(frame: pd.DataFrame) -> pd.Series:
    matrix = frame["matrix_flops"].fillna(0) > 0
    state = pd.Series("n/a", index=frame.index)
    state[matrix & frame["precision"].isin(TENSOR_PRECISIONS)] = "used"
    state[matrix & (frame["precision"] == "fp32")] = "eligible-unused"
    return state


def _share(frame: pd.DataFrame) -> pd.Series:
    """Each kernel's share of its operator's work (see the module docstring)."""
    op = frame["torch_op_id"].fillna(-1)
    main = frame["work_kind"].isin(MATRIX_KINDS) & _matches(frame["name"], MAIN_KERNEL)
    has_main = main.groupby(op).transform("any").astype(bool)
    # a random-number, fill or workspace-init kernel of an operator that also launched others gets
    # none of its work: the others do it
    writer = _matches(frame["name"], WRITER_KERNEL)
    has_other = (~writer).groupby(op).transform("any").astype(bool)
    eligible = (main | ~has_main) & ~(writer & has_other)
    weight = frame["time_ns"].where(eligible, 0).astype(float)
    total = weight.groupby(op).transform("sum")
    count = eligible.groupby(op).transform("sum")
    share = (weight / total).where(total > 0, eligible / count.clip(lower=1))
    return share.where(frame["op_flops"].notna() & eligible)  # NaN: no work model, or a helper kernel


_CACHE: WeakKeyDictionary[Report, pd.DataFrame] = WeakKeyDictionary()


def kernel_work(report: Report) -> pd.DataFrame:
    """Return one row per kernel (per operator in a report without kernels) with the work it did.

    Columns: ``item`` (the operation's ``op_id``; the operator's id without kernels), ``name``,
    ``pid``, ``start_ns``, ``time_ns``, ``torch_op_id`` and ``op_name`` (its operator; NULL when
    none), ``work_kind``, ``precision``, ``flops``, ``matrix_flops``, ``bytes`` (NaN without a work
    model), ``tensor_cores``, ``source`` (``model``; ``carried`` where a launch outside the operator
    sample windows took the work of sampled launches of its configuration, :mod:`.carried`; ``ncu``
    where a kernel without a work model took its name's measured means; None), ``layer`` (the PyTorch
    module that owns it, else None), ``owner``
    (the owning PyTorch range of any kind, or ``(not in a module)``), ``in_step``.
    Empty when the report has no PyTorch operators.
    """
    if report not in _CACHE:
        _CACHE[report] = _kernel_work(report)
    return _CACHE[report].copy()


def _kernel_work(report: Report) -> pd.DataFrame:
    if not has_torch_ops(report):
        return pd.DataFrame(columns=COLUMNS)
    torch_ops_table, op_kernels_table = _torch_ops()
    ops = torch_ops_table(report)  # type: ignore[operator]
    if not report.count("kernel"):
        return _cpu_work(report, ops)
    links = op_kernels_table(report)  # type: ignore[operator]
    frame = report.df_shared(
        f"""SELECT w.op_id AS item, n.value AS name, w.pid, w.start_ns, w.d AS time_ns,
                   l.torch_op_id, w.row_name AS owner, w.row_kind, w.owner_rid, w.in_step
            FROM ({op_owners_sql(report)}) w JOIN string n ON n.id = w.name_id
            LEFT JOIN {links} l ON l.op_id = w.op_id
            WHERE w.kind = 'kernel' ORDER BY w.op_id"""
    )
    works = _works(report, ops, f"SELECT torch_op_id FROM {links}")
    frame["torch_op_id"] = frame["torch_op_id"].astype("Int64")
    frame = frame.merge(works.astype({"torch_op_id": "Int64"}), on="torch_op_id", how="left")
    share = _share(frame)
    for col in ("flops", "matrix_flops", "bytes"):
        frame[col] = frame[f"op_{col}"] * share
    tf32 = ((frame["precision"] == "fp32") & (frame["matrix_flops"] > 0) & _matches(frame["name"], TENSOR_KERNEL)
            & ~_matches(frame["name"], SIMT_KERNEL))
    frame.loc[tf32, "precision"] = "tf32"
    frame.loc[frame["flops"].isna(), ["precision", "work_kind"]] = None
    frame["tensor_cores"] = _tensor_state(frame)
    frame["source"] = frame["flops"].notna().map({True: "model", False: None})
    frame = carry(report, frame)
    frame = _with_measured(report, frame, ops)
    frame = _writers_only(frame)
    frame["layer"] = frame["owner"].where(frame["row_kind"] == "module", None)
    frame["owner"] = frame["owner"].fillna(OUTSIDE)
    return frame[COLUMNS]


def _writers_only(frame: pd.DataFrame) -> pd.DataFrame:
    """Random-number and initialisation kernels (``distribution_*``, Philox/cuRAND, fills, cuDNN's
    workspace init) do no useful arithmetic: their FLOPs are 0 and their tensor-core state n/a,
    whatever instructions ncu counted in them. Their bytes are what they write: the tensor of the
    operator that only writes it (``randn``, ``uniform_``, ``zeros``, ``fill_``: the work model).
    Launched by another operator (a workspace that cuDNN clears, a buffer zeroed inside a
    convolution's backward) or by none, what they write is not known: no work model (ncu's DRAM
    bytes are not it: what a kernel writes stays in L2 past its end)."""
    writer = _matches(frame["name"], WRITER_KERNEL)
    if writer.any():
        own = writer & frame["op_name"].map(lambda n: isinstance(n, str) and is_writer(n)).astype(bool)
        unknown = writer & ~own
        frame.loc[unknown, ["flops", "matrix_flops", "bytes", "precision", "work_kind", "source"]] = None
        frame.loc[writer & frame["flops"].notna(), ["flops", "matrix_flops"]] = 0.0
        frame.loc[writer, "tensor_cores"] = "n/a"
    return frame


def _op_precisions(report: Report, ops: str, ids: list[int]) -> dict[int, str]:
    """The precision of the first floating-point tensor (else the ``dtype`` argument) of each
    operator in ``ids``."""
    import json

    listed = ", ".join(str(int(i)) for i in ids)
    out = {}
    for op_id, dtypes, scalars in report.sql(f"SELECT torch_op_id, dtypes, scalars FROM {ops} "
                                             f"WHERE torch_op_id IN ({listed})"):
        flat: list[object] = []
        for d in json.loads(dtypes or "[]"):
            flat.extend(d if isinstance(d, list) else [d])
        found = [p for p in map(precision_of, flat) if p]
        found = found or [p for p in [precision_of(json.loads(scalars or "{}").get("dtype"))] if p]
        if found:
            out[int(op_id)] = found[0]
    return out


def _half_from_operator(report: Report, frame: pd.DataFrame, ops: str, rows: pd.Series) -> None:
    """ncu's half counters do not tell BF16 from FP16: a kernel measured as FP16 whose name names
    neither takes BF16 from its operator's tensors."""
    ask = rows & (frame["precision"] == "fp16") & frame["torch_op_id"].notna()
    ask &= frame["name"].astype(str).map(half_precision).isna()
    if not ask.any():
        return
    found = _op_precisions(report, ops, sorted(set(frame.loc[ask, "torch_op_id"].astype(int))))
    bf16 = ask & (frame["torch_op_id"].map(lambda i: found.get(int(i)) if pd.notna(i) else None) == "bf16")
    frame.loc[bf16, "precision"] = "bf16"


def _with_measured(report: Report, frame: pd.DataFrame, ops: str) -> pd.DataFrame:
    """Fill kernels without a work model from ncu's metrics of their name (means per launch: FLOPs
    counted, DRAM bytes), and take tensor-core use from the counters where they were read."""
    if not has_metrics(report):
        return frame
    per = launch_metrics(report)
    flops_cols = [f"flops_{p}" for p in PRECISIONS]
    m = per.groupby("name")[["flops", "dram_bytes", "tensor_flops", *flops_cols]].mean()
    m["counted"] = per.groupby("name")["tensor_counted"].any()
    m["dominant"] = m[flops_cols].idxmax(axis=1).str.removeprefix("flops_").where(m["flops"] > 0)
    known = frame["name"].isin(m.index)
    fill = known & frame["flops"].isna()
    rows = m.loc[frame.loc[fill, "name"]]
    frame.loc[fill, "flops"] = rows["flops"].to_numpy()
    frame.loc[fill, "bytes"] = rows["dram_bytes"].to_numpy()
    frame.loc[fill, "matrix_flops"] = rows["tensor_flops"].to_numpy()
    frame.loc[fill, "precision"] = rows["dominant"].to_numpy()
    frame.loc[fill, "source"] = "ncu"
    _half_from_operator(report, frame, ops, fill)
    counted = known & frame["name"].map(m["counted"]).fillna(False).astype(bool)
    tensor = frame["name"].map(m["tensor_flops"]).fillna(0) > 0
    frame.loc[counted & tensor, "tensor_cores"] = "used"
    frame.loc[counted & ~tensor & (frame["matrix_flops"].fillna(0) > 0), "tensor_cores"] = "eligible-unused"
    frame.loc[counted & ~tensor & (frame["source"] == "ncu"), "tensor_cores"] = "n/a"
    return frame


def _cpu_work(report: Report, ops: str) -> pd.DataFrame:
    """The items of a report without kernels: every operator with a work model."""
    source = step_source(report)
    in_step = "FALSE"
    if source.kind:
        in_step = f"""t.torch_op_id IN (SELECT t2.torch_op_id FROM {ops} t2 ASOF JOIN {steps_table(report, source)} s
                     ON s.pid = t2.pid AND t2.start_ns >= s.start_ns WHERE t2.start_ns < s.stop_ns)"""
    ranges = ranges_table(report)
    segs = innermost_sql(report, ranges, "r.source = 'torch'", "_torch_range_segments")
    frame = report.df(
        f"""WITH owner AS (  -- the innermost PyTorch range open at the operator's start (innermost.py)
                SELECT t.torch_op_id, n.value AS owner, r.category
                FROM {ops} t ASOF JOIN {segs} s ON s.pid = t.pid AND s.tid = coalesce(t.tid, -1)
                 AND t.start_ns >= s.from_ns
                JOIN {ranges} r ON r.rid = s.rid
                JOIN string n ON n.id = r.name_id)
            SELECT t.torch_op_id AS item, t.name, t.pid, t.start_ns, t.end_ns - t.start_ns AS time_ns,
                   t.torch_op_id, o.owner, o.category, {in_step} AS in_step
            FROM {ops} t LEFT JOIN owner o USING (torch_op_id) ORDER BY t.torch_op_id"""
    )
    works = _works(report, ops, f"SELECT torch_op_id FROM {ops}")
    frame = frame.merge(works, on="torch_op_id", how="inner")
    for col in ("flops", "matrix_flops", "bytes"):
        frame[col] = frame[f"op_{col}"]
    frame["tensor_cores"] = "n/a"  # operators timed on the CPU: no tensor cores to use
    frame["source"] = "model"
    frame["layer"] = frame["owner"].where(frame["category"].isin(["forward", "backward"]), None)
    frame["owner"] = frame["owner"].fillna(OUTSIDE)
    return frame[COLUMNS]
