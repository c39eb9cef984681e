"""``rank_layer_sum``: each PyTorch layer's (and other range's) time per step on every rank, and how
far the ranks are apart: the layer where one rank is slower (a different batch, a slower device, a
CPU-bound input step) stands out by its spread."""

from __future__ import annotations

import pandas as pd

from ...trace.report import Report
from ..ops.attribution import ops_table, ranges_table
from ..ranges.layers import OUTSIDE, op_owners_sql
from ..ranges.module_steps import ranged_step_counts
from .ranks import rank_table
from ..steps.source import step_source, step_windows
from ..table import Column, Table

COLUMNS = [Column("Name"), Column("Kind"), Column("Time"), Column("Ranks", "count"), Column("Mean per Rank", "ns"),
           Column("Min", "ns"), Column("Min Rank", "id"), Column("Max", "ns"), Column("Max Rank", "id"),
           Column("Max - Min", "ns"), Column("Spread", "percent")]


def layer_times(report: Report) -> pd.DataFrame:
    """Per ranked process, layer (``pid``, ``rank``, ``name``, ``kind``) and ``time`` (``gpu``: GPU self
    time of the operations the layer launched within steps, as ``layer_sum`` counts it; ``cpu``: its
    PyTorch ranges' time): ``time_ns`` per step of that process."""
    ranks = rank_table(report).dropna(subset=["rank"])
    columns = ["pid", "rank", "name", "kind", "time", "time_ns"]
    if not len(ranks) or not report.count("nvtx_range"):
        return pd.DataFrame(columns=columns)
    frames = [report.df(f"""SELECT r.pid, n.value AS name,
                                   CASE WHEN r.category IN ('forward', 'backward') THEN 'module' ELSE r.category END
                                     AS kind, 'cpu' AS time, sum(r.end_ns - r.start_ns) AS total
                            FROM {ranges_table(report)} r JOIN string n ON n.id = r.name_id
                            WHERE r.source = 'torch' AND r.category IS DISTINCT FROM 'model' AND r.end_ns IS NOT NULL
                            GROUP BY ALL""")]
    ops = ops_table(report)
    if report.count(ops):
        frames.append(report.df(f"""SELECT o.pid, w.row_name AS name, w.row_kind AS kind, 'gpu' AS time,
                                           sum(w.d) AS total
                                    FROM ({op_owners_sql(report)}) w JOIN {ops} o USING (op_id)
                                    WHERE w.in_step AND w.ranged GROUP BY ALL"""))
    frame = pd.concat([f for f in frames if len(f)], ignore_index=True) if any(len(f) for f in frames) else frames[0]
    frame = frame[frame["pid"].isin(ranks["pid"])]
    if not len(frame):
        return pd.DataFrame(columns=columns)
    source = step_source(report)
    steps = step_windows(report, source).groupby("pid").size()
    per = frame["pid"].map(steps).fillna(1).clip(lower=1)
    ranged = ranged_step_counts(report, source)
    if ranged is not None:  # module ranges in some steps only: those steps' GPU time, and their modules' CPU time
        some = (frame["time"] == "gpu") | (frame["kind"] == "module")
        per = per.where(~some, frame["pid"].map(ranged).fillna(1).clip(lower=1))
    frame = frame.assign(time_ns=frame["total"].astype(float) / per.to_numpy(float),
                         rank=frame["pid"].map(ranks.set_index("pid")["rank"]).astype(int),
                         name=frame["name"].fillna(OUTSIDE))
    return frame[columns]


def rank_layer_sum(report: Report) -> Table:
    """Per layer and kind of time (GPU, CPU): how many ranks ran it, its mean time per step over
    ranks, the fastest and slowest rank with their times, their gap and the spread ((max - min) /
    mean); the largest gaps first."""
    name, title = "rank_layer_sum", "Layers per Rank: Time per Step and Spread"
    times = layer_times(report)
    if times["pid"].nunique() < 2:
        why = ("Fewer than two ranks with PyTorch ranges in this report: nothing to compare (record module ranges "
               "with --trace torch)." if report.count("rank") else
               "No ranks in this report (a single process, or no torch.distributed): nothing to compare.")
        return Table(name, title, COLUMNS, [], [why])
    all_ranks = sorted(times["rank"].unique())
    rows = []
    for (layer, kind, what), f in times.groupby(["name", "kind", "time"], dropna=False, sort=False):
        # a rank that never ran the layer counts as 0: that is a difference between ranks too
        per = f.groupby("rank")["time_ns"].sum().reindex(all_ranks, fill_value=0.0)
        mean = float(per.mean())
        lo, hi = per.idxmin(), per.idxmax()
        gap = float(per[hi] - per[lo])
        rows.append((layer, None if pd.isna(kind) else kind, what.upper(), int((per > 0).sum()), mean, float(per[lo]),
                     int(lo), float(per[hi]), int(hi), gap, 100.0 * gap / mean if mean else 0.0))
    rows.sort(key=lambda r: (-r[9], -r[4], r[0]))
    notes = [(f"Per step of each rank, over {len(all_ranks)} ranks. GPU: GPU time of the operations a layer "
              "launched itself within steps (layer_sum's GPU Self); CPU: the time of its PyTorch ranges. Spread: "
              "(Max - Min) / Mean; a rank that never ran a layer counts as 0. The largest gaps between ranks first.")]
    return Table(name, title, COLUMNS, rows, notes)


REPORTS = {"rank_layer_sum": rank_layer_sum}
