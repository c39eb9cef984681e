"""The stats tables a large report stores when it is closed, so that ``gpuscope stats`` reads them
instead of computing them from millions of rows (what is stored, and when it is used:
trace/stored_stats.py)."""

from __future__ import annotations

from pathlib import Path

# Below this many GPU operations (kernels, copies, sets) the tables take well under a second to
# compute: nothing is stored, and closing the report takes no longer.
MIN_OPERATIONS = 100_000


def store(database: Path, minimum: int = MIN_OPERATIONS) -> str | None:
    """Compute the stored stats tables of the finished report file ``database`` and store them in it
    (nothing for a report of fewer than ``minimum`` GPU operations, or one not finished). Return
    None, or why they could not be stored: the report stays as it was, and ``stats`` computes them."""
    from ..analysis import stats_to_store
    from ..trace import stored_stats
    from ..trace.report import Report

    try:
        with Report.open(database) as report:
            if not report.complete:
                return None
            if sum(report.count(t) for t in ("kernel", "memcpy", "memset")) < minimum:
                return None
            basis = stored_stats.basis(report)
            tables = stats_to_store(report)
        stored_stats.write(database, tables, basis)
    except Exception as exc:  # noqa: BLE001  (the report is kept whatever computing its tables met)
        lines = str(exc).strip().splitlines()
        return f"{type(exc).__name__}: {lines[0] if lines else ''}"
    return None
