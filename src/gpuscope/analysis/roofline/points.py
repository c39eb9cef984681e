"""The roofline: each kernel's (each layer's, the whole step's) work against the device's roofs.

For a group of kernels with ``F`` operations, ``B`` minimum bytes (:mod:`.kernel_work`) and GPU
time ``t``:

- arithmetic intensity ``I = F / B``; achieved ``F / t`` FLOP/s and ``B / t`` bytes/s;
- the time at the roofs is ``max(tc, tm)``: ``tc`` the operations at the peak of their precision
  (matrix work at the tensor-core peak when the kernel uses tensor cores, the rest at the CUDA-core
  peak), ``tm = B / DRAM bandwidth``; attainable FLOP/s ``= F / max(tc, tm)``, which is
  ``min(peak, I × bandwidth)`` for work of one precision;
- efficiency ``= max(tc, tm) / t``, shown as it is: above 1 a kernel ran faster than its roof,
  so that roof is wrong for it (data served from L2 beats the DRAM roof; a machine never
  calibrated; a work model that counts more than the kernel does), and the notes say so;
  headroom ``= t - max(tc, tm)`` (at least 0): the time that reaching the roof would save, by
  which kernels are ranked as optimization priorities;
- bound: ``compute`` when ``tc >= tm``, else ``memory``; ``latency`` when the efficiency is under
  10% (far below both roofs: launch-bound, too little parallelism, waits); ``unknown`` without a
  work model (or without the peak of the work's precision).

Ceilings come from :func:`.ceilings.for_report` unless given.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...trace.report import Report
from .ceilings import LABELS, Ceilings, for_report
from ..ranges import op_windows
from .work import carried_summary
from .work.kernels import WRITER_KERNEL, has_torch_ops, kernel_work
from ..steps.source import step_source, steps_table
from ..table import Column, Table

OVER_ROOF = 1.05  # efficiency above this: the roof (or the work model) is wrong for the row
LATENCY_EFFICIENCY = 0.1

POINT_COLUMNS = [
    "name", "kernels", "time_ns", "flops", "bytes", "intensity", "achieved_flops_per_s", "achieved_bytes_per_s",
    "attainable_flops_per_s", "efficiency", "headroom_ns", "bound", "tensor_cores", "precision", "layer",
]  # fmt: skip


def _roof_times(items: pd.DataFrame, ceilings: Ceilings) -> pd.DataFrame:
    """Add each item's time at the compute roof and at the DRAM roof (seconds; NaN when unknown)."""
    out = items.copy()
    # Per item (vectorized: a CPU report has millions): no operations or no work model (NaN): 0 at the
    # roof; no roof for its precision: NaN; tensor-core work: its matrix part at the tensor roof and the
    # rest at the CUDA-core roof; other work: all at the CUDA-core roof.
    prec = out["precision"].astype(object).where(out["precision"].notna(), None)
    kinds = [p for p in prec.unique() if p is not None]

    def roofs(tensor: bool) -> np.ndarray:
        table = {p: ceilings.peak(p, tensor=tensor) or np.nan for p in kinds}
        return prec.map(table).astype(float).fillna(np.nan).to_numpy()

    flops = out["flops"].astype(float).to_numpy()
    matrix = out["matrix_flops"].astype(float).to_numpy()
    vector, tensor_roof = roofs(False), roofs(True)
    with np.errstate(invalid="ignore", divide="ignore"):
        tensor = (out["tensor_cores"] == "used").to_numpy() | (
            (prec == "fp64").to_numpy() & (matrix > 0) & ("tensor_fp64" in ceilings.flops))
        roof = np.where(tensor, tensor_roof, vector)
        missing = np.isnan(roof) | (roof == 0) | ((matrix < flops) & (np.isnan(vector) | (vector == 0)))
        rest = np.where(flops > matrix, (flops - matrix) / vector, 0.0)
        compute = np.where(tensor, matrix / roof + rest, flops / roof)
    compute = np.where(missing, np.nan, compute)
    compute = np.where((flops == 0) | np.isnan(flops), 0.0, compute)
    out["compute_s"] = compute
    bw = ceilings.dram_bytes_per_s
    out["memory_s"] = out["bytes"] / bw if bw else np.nan
    return out


def _tensor_summary(states: pd.Series) -> str:
    values = set(states.dropna().unique())
    if "used" in values:
        return "used"
    return "eligible-unused" if "eligible-unused" in values else "n/a"


def _precisions(values: pd.Series) -> str | None:
    found = sorted(set(values.dropna().unique()))
    return "+".join(found) if found else None


def _points(items: pd.DataFrame, keys: list[str], ceilings: Ceilings) -> pd.DataFrame:
    """Aggregate items by ``keys`` and place each group on the roofline."""
    if items.empty:
        return pd.DataFrame(columns=POINT_COLUMNS)
    timed = _roof_times(items, ceilings)
    timed["has_work"] = timed["flops"].notna()
    g = timed.groupby(keys, dropna=False, sort=False)
    df = g.agg(kernels=("name", "size"), time_ns=("time_ns", "sum"), flops=("flops", "sum"),
               bytes=("bytes", "sum"), compute_s=("compute_s", lambda s: s.sum(min_count=1)),
               memory_s=("memory_s", lambda s: s.sum(min_count=1)), has_work=("has_work", "any"),
               tensor_cores=("tensor_cores", _tensor_summary), precision=("precision", _precisions),
               compute_known=("compute_s", lambda s: bool(s.notna().all()) if len(s) else False))
    df = df.reset_index()
    seconds = df["time_ns"] * 1e-9
    worked = df["has_work"] & ((df["flops"] > 0) | (df["bytes"] > 0))
    df.loc[~df["has_work"], ["flops", "bytes"]] = np.nan
    df["intensity"] = (df["flops"] / df["bytes"]).where(df["bytes"] > 0)
    df["achieved_flops_per_s"] = (df["flops"] / seconds).where(seconds > 0)
    df["achieved_bytes_per_s"] = (df["bytes"] / seconds).where(seconds > 0)
    roof_s = np.fmax(df["compute_s"].where(df["compute_known"]), df["memory_s"])
    roof_s = roof_s.where(worked & df["compute_known"] & df["memory_s"].notna())
    df["attainable_flops_per_s"] = (df["flops"] / roof_s).where(roof_s > 0)
    df["efficiency"] = (roof_s / seconds).where(seconds > 0)
    df["headroom_ns"] = (df["time_ns"] - roof_s * 1e9).clip(lower=0)
    bound = np.where(df["compute_s"] >= df["memory_s"], "compute", "memory")
    bound = np.where(df["efficiency"] < LATENCY_EFFICIENCY, "latency", bound)
    df["bound"] = np.where(roof_s.notna() & df["efficiency"].notna(), bound, "unknown")
    df["layer"] = df["layer"].astype(object).where(df["layer"].notna(), None) if "layer" in df else None
    df["kernels"] = df["kernels"].astype(int)
    return df[POINT_COLUMNS]


def _ordered(df: pd.DataFrame) -> pd.DataFrame:
    """Known points by headroom (then time), unknown ones after them by time."""
    key = df["headroom_ns"].fillna(-1)
    return df.assign(_k=key).sort_values(["_k", "time_ns", "name"], ascending=[False, False, True]).drop(
        columns="_k").reset_index(drop=True)


def kernel_points(report: Report, ceilings: Ceilings | None = None) -> pd.DataFrame:
    """Return one roofline point per kernel name and layer.

    Columns: ``name``, ``kernels`` (launches), ``time_ns``, ``flops``, ``bytes``, ``intensity``
    (FLOP/byte), ``achieved_flops_per_s``, ``achieved_bytes_per_s``, ``attainable_flops_per_s``,
    ``efficiency`` (0..1), ``headroom_ns``, ``bound`` (compute, memory, latency, unknown),
    ``tensor_cores`` (used, eligible-unused, n/a), ``precision`` (``bf16``, ``fp32+bf16``, ...),
    ``layer`` (the PyTorch module, or None). Rows by headroom. Empty when the report has no work
    model data (no PyTorch operators recorded, or none with a model).
    """
    items = kernel_work(report)
    if items.empty or items["flops"].isna().all():
        return pd.DataFrame(columns=POINT_COLUMNS)
    return _ordered(_points(items, ["name", "layer"], ceilings or for_report(report)))


def layer_points(report: Report, ceilings: Ceilings | None = None) -> pd.DataFrame:
    """Return one roofline point per PyTorch module (and per other owning range: optimizer,
    ``(not in a module)``): the columns of :func:`kernel_points`, ``name`` and ``layer`` the owner."""
    items = kernel_work(report)
    if items.empty or items["flops"].isna().all():
        return pd.DataFrame(columns=POINT_COLUMNS)
    df = _points(items.assign(name=items["owner"]).drop(columns="layer"), ["name"], ceilings or for_report(report))
    df["layer"] = df["name"]
    return _ordered(df)


def step_point(report: Report, ceilings: Ceilings | None = None) -> tuple[pd.Series | None, str]:
    """Return the roofline point of one step (the sums over all steps divided by their number) and
    what it covers in words; the whole run when the report has no steps. None without work data."""
    items = kernel_work(report)
    if items.empty or items["flops"].isna().all():
        return None, ""
    source = step_source(report)
    steps = report.sql(f"SELECT count(*) FROM {steps_table(report, source)}")[0][0] if source.kind else 0
    what = "the whole run"
    windows_only = not report.count("kernel") and op_windows.sampled(report)  # no kernels to carry work to
    if windows_only:
        steps = op_windows.steps_in_windows(report, steps_table(report, source)) if steps else 0
        what = "the sample windows"
    if steps:
        items = items[items["in_step"].fillna(False).astype(bool)]
        what = f"one step (mean of {steps}{' in the sample windows' if windows_only else ''})"
    if items.empty:
        return None, what
    point = _points(items.assign(name="step"), ["name"], ceilings or for_report(report)).iloc[0].copy()
    for col in ("time_ns", "flops", "bytes", "headroom_ns", "kernels"):
        point[col] = point[col] / max(steps, 1)
    return point, what


# -- tables ------------------------------------------------------------------------------------------
COLUMNS = [
    Column("Time", "percent"), Column("Total Time", "ns"), Column("Instances", "count"),
    Column("FLOPs", "flops"), Column("Bytes", "bytes"), Column("Intensity", "number"),
    Column("Achieved", "flops_per_s"), Column("Bandwidth", "bytes_per_s"), Column("Attainable", "flops_per_s"),
    Column("Efficiency", "percent"), Column("Headroom", "ns"), Column("Bound"), Column("Tensor Cores"),
    Column("Precision"), Column("Name"),
]  # fmt: skip


def _value(v: object) -> object:
    if v is None or (isinstance(v, float) and v != v):
        return None
    return v.item() if isinstance(v, np.generic) else v


def _rows(df: pd.DataFrame) -> list[tuple[object, ...]]:
    total = float(df["time_ns"].sum()) or 1.0
    return [
        tuple(_value(v) for v in (
            100.0 * r.time_ns / total, r.time_ns, r.kernels, r.flops, r.bytes, r.intensity,
            r.achieved_flops_per_s, r.achieved_bytes_per_s, r.attainable_flops_per_s,
            None if r.efficiency != r.efficiency else 100.0 * r.efficiency, r.headroom_ns, r.bound,
            r.tensor_cores, r.precision, r.name))
        for r in df.itertuples()
    ]


def ceilings_note(ceilings: Ceilings) -> str:
    """One line: which device's ceilings, and where they came from."""
    if not ceilings.sources:
        return f"No ceilings for {ceilings.device}: run gpuscope roofline --calibrate on that machine."
    detail = {"measured": f"measured {ceilings.measured_at or ''}".strip(), "datasheet": "datasheet",
              "device": "device record"}
    by = sorted(set(ceilings.sources.values()), key=list(detail).index)
    text = f"Ceilings: {ceilings.device}, " + " and ".join(detail[b] for b in by)
    if "measured" not in by:
        text += " (no calibration of this device here: gpuscope roofline --calibrate measures one)"
    shaky = ceilings.unstable()
    if shaky:
        top = max(shaky, key=lambda k: shaky[k])
        text += (f" (unstable when measured: {LABELS.get(top, top)} varied {100 * shaky[top]:.0f}% over the repeats; "
                 "calibrate again on an idle machine)")
    return text + "."


def _notes(report: Report, df: pd.DataFrame, ceilings: Ceilings) -> list[str]:
    notes = [ceilings_note(ceilings)]
    total = float(df["time_ns"].sum())
    unknown = df["bound"] == "unknown"
    no_work = float(df.loc[unknown & df["flops"].isna(), "time_ns"].sum())
    no_roof = float(df.loc[unknown & df["flops"].notna(), "time_ns"].sum())
    if total and no_work:
        notes.append(f"{100 * no_work / total:.1f}% of the time is in kernels without a work model (no PyTorch "
                     "operator, an operator without a model, or a helper kernel of a matrix product).")
        writers = df.loc[unknown & df["flops"].isna() & df["name"].astype(str).str.contains(WRITER_KERNEL)]
        if len(writers):
            n = len(writers)
            notes.append(f"Among them, {n} kernel{'s' if n != 1 else ''} only write{'' if n != 1 else 's'} memory "
                         "(random numbers, fills, workspace init) for another operator or none: what "
                         f"{'they write' if n != 1 else 'it writes'} is not known (a random-number or fill operator "
                         "gives its kernels the tensor it writes).")
    if total and no_roof:
        notes.append(f"{100 * no_roof / total:.1f}% of the time is in kernels with work but no roof for its "
                     "precision in these ceilings: their bound is not known.")
    over = df[df["efficiency"] > OVER_ROOF]
    if len(over):
        top = over.sort_values("time_ns", ascending=False).iloc[0]
        notes.append(f"{len(over)} row{'s' if len(over) > 1 else ''} ran faster than the roof (efficiency above "
                     f"100%, e.g. {100 * float(top['efficiency']):.0f}% for {str(top['name'])[:60]}): that roof is "
                     "too low for them (data served from L2, ceilings not calibrated on this machine) or their work "
                     "model counts more FLOPs or bytes than the kernel does; their bound and headroom are not "
                     "verified.")
    kernels = bool(report.count("kernel"))
    if not kernels:
        notes.append("No kernels in this report: the rows are PyTorch operators, timed on the CPU.")
    point, what = step_point(report, ceilings)
    if point is not None and point["time_ns"]:
        eff = "-" if point["efficiency"] != point["efficiency"] else f"{100 * point['efficiency']:.1f}%"
        items = "kernels" if kernels else "operators"
        notes.append(f"For {what}: {point['time_ns'] / 1e6:.3g} ms of {items}, {point['flops'] / 1e9:.4g} GFLOP, "
                     f"{point['bytes'] / 1e9:.4g} GB; {eff} of attainable; {point['bound']} bound.")
    notes.append("Rows by headroom: the kernel time that running at the roof would save. FLOPs and bytes come "
                 "from the PyTorch operators' shapes (minimum bytes), given to the operators' kernels.")
    sample = carried_summary.note(report)
    if sample:
        notes.append(sample)
    return notes


def _no_ops_note(report: Report) -> list[str]:
    trace = report.meta.get("trace")
    if isinstance(trace, list) and "torch-shapes" in trace:
        return ["No PyTorch operators in this report: --trace torch-shapes records them in a sample window that "
                "opens at the end of the first step (or, without steps, after the program's set-up operators), "
                "and no window opened in this run; record every operator with --trace torch-ops."]
    hint = report.not_recorded().get("torch-ops")
    if hint:
        return [f"No PyTorch operators in this report: {hint}."]
    return ["No PyTorch operators in this report: record them with --trace torch-ops to get FLOPs and bytes."]


def roofline_sum(report: Report, ceilings: Ceilings | None = None) -> Table:
    """Per kernel name: time, FLOPs, bytes, intensity, achieved and attainable FLOP/s, efficiency,
    headroom, bound and tensor-core use, ranked by headroom (the optimization priorities)."""
    name, title = "roofline_sum", "Roofline Summary (kernels by headroom)"
    if not has_torch_ops(report):
        return Table(name, title, COLUMNS, [], _no_ops_note(report))
    items = kernel_work(report)
    if items.empty or items["flops"].isna().all():
        return Table(name, title, COLUMNS, [], ["No kernel ran inside a PyTorch operator that has a work model."])
    ceilings = ceilings or for_report(report)
    df = _ordered(_points(items, ["name"], ceilings))
    return Table(name, title, COLUMNS, _rows(df), _notes(report, df, ceilings))


def roofline_layer_sum(report: Report, ceilings: Ceilings | None = None) -> Table:
    """Per PyTorch module (and other owning range): the columns of :func:`roofline_sum`."""
    name, title = "roofline_layer_sum", "Roofline per Layer (by headroom)"
    if not has_torch_ops(report):
        return Table(name, title, COLUMNS, [], _no_ops_note(report))
    ceilings = ceilings or for_report(report)
    df = layer_points(report, ceilings)
    return Table(name, title, COLUMNS, _rows(df), [ceilings_note(ceilings)] if len(df) else [])


REPORTS = {"roofline_sum": roofline_sum}
