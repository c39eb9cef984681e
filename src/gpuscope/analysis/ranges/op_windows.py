"""The sample windows of PyTorch operators: with ``--trace torch-shapes`` operators are recorded only
in a few windows (``torch_op_window``; capture/python/op_sample.py), while every kernel is recorded."""

from __future__ import annotations

from ...trace.report import Report
from ..ops.attribution import FOREVER

WINDOWS = "torch_op_window"


def sampled(report: Report) -> bool:
    """Return whether the report's operators were recorded in sample windows only (``torch_op_window``)."""
    return bool(report.count(WINDOWS))


def windows(report: Report) -> tuple[int, int, int]:
    """Return the number of sample windows, the operators recorded in them, and their total length (ns;
    a window still open at a crash counts to its process's last operator)."""
    (n, ops, ns) = report.sql(
        f"""SELECT count(*), coalesce(sum(w.operators), 0),
                   coalesce(sum(coalesce(w.end_ns, t.last_ns, w.start_ns) - w.start_ns), 0)
            FROM {WINDOWS} w LEFT JOIN (SELECT pid, max(end_ns) AS last_ns FROM torch_op GROUP BY pid) t USING (pid)"""
    )[0]
    return int(n), int(ops), int(ns)


def steps_in_windows(report: Report, steps: str) -> int:
    """Return how many steps of table ``steps`` (:func:`..steps.source.steps_table`) lie wholly inside a sample window."""
    (n,) = report.sql(
        f"""SELECT count(*) FROM {steps} s WHERE EXISTS (
                SELECT 1 FROM {WINDOWS} w WHERE w.pid = s.pid AND s.start_ns >= w.start_ns
                AND s.end_ns <= coalesce(w.end_ns, {FOREVER}))"""
    )[0]
    return int(n)
