"""The ranks of a distributed job: which process is which rank, on which host."""

from __future__ import annotations

import pandas as pd

from ...trace.report import Report

RANK_COLUMNS = ["pid", "rank", "local_rank", "world_size", "node_rank", "host", "backend", "source"]


def rank_table(report: Report) -> pd.DataFrame:
    """One row per process that has a rank (``rank`` table, schema 6): ``pid``, ``rank``,
    ``local_rank``, ``world_size``, ``node_rank``, ``host``, ``backend``, ``source``, by rank.
    Empty for a report without ranks (one process, or an older report)."""
    if not report.count("rank"):
        return pd.DataFrame({c: pd.Series(dtype="object") for c in RANK_COLUMNS})
    return report.df(f"SELECT {', '.join(RANK_COLUMNS)} FROM rank ORDER BY rank, pid")


def rank_of(report: Report) -> dict[int, int]:
    """The rank of each process that has one, by pid."""
    t = rank_table(report)
    return {int(p): int(r) for p, r in zip(t["pid"], t["rank"]) if pd.notna(r)}


def label(pid: int, ranks: dict[int, int]) -> str:
    """``rank 1 (pid 4242)``, or ``process 4242`` without a rank."""
    return f"rank {ranks[pid]} (pid {pid})" if pid in ranks else f"process {pid}"
