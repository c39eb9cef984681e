"""The fleet summaries as tables (what ``gpuscope stats R1 R2 ...`` prints)."""

from __future__ import annotations

import pandas as pd

from ...table import Column, Table

TITLES = {"fleet_kern_sum": "GPU Kernels across Reports and Ranks",
          "fleet_rank_sum": "Processes and Ranks across Reports"}


def _v(x: object) -> object:
    if x is None or (isinstance(x, float) and pd.isna(x)):
        return None
    return x.item() if hasattr(x, "item") else x


def to_table(name: str, frame: pd.DataFrame, by_report: bool, notes: list[str]) -> Table:
    """The table of one fleet summary; ``by_report``: rows of different runs carry their report."""
    lead = [Column("Report")] if by_report else []
    if name == "fleet_kern_sum":
        cols = lead + [Column("Name"), Column("Instances", "count"), Column("Total Time", "ns"), Column("Avg", "ns"),
                       Column("Min", "ns"), Column("Max", "ns"), Column("Processes", "count"),
                       Column("Least per Process", "ns"), Column("Most per Process", "ns")]
        keys = ["name", "instances", "total", "mean", "shortest", "longest", "processes", "least_process",
                "most_process"]
        text = ["Kernels of every report by name; Least/Most per Process: the smallest and largest total time of one "
                "process (rank) for that kernel: their gap is the imbalance across ranks."]
    else:
        cols = lead + [Column("Rank", "id"), Column("PID", "id"), Column("Host"), Column("Kernels", "count"),
                       Column("GPU Time", "ns"), Column("NCCL Time", "ns"), Column("Collectives", "count")]
        keys = ["rank", "pid", "host", "kernels", "gpu_ns", "comm_ns", "collectives"]
        text = ["Every process with GPU work, collectives or a rank; NCCL Time: NCCL kernels' GPU time; Collectives: "
                "NCCL kernels and c10d operator calls."]
    keys = (["report"] if by_report else []) + keys
    rows = [tuple(_v(r[k]) for k in keys) for r in frame.to_dict("records")]
    if not rows:
        text = ["No GPU kernels in these reports." if name == "fleet_kern_sum"
                else "No processes with GPU work, collectives or ranks in these reports."]
    return Table(name, TITLES[name], cols, rows, text + notes)
