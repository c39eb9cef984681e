"""What the context of either side of a report holds for the engine and the rules (engine.py):
the report, the share of the step below which findings are left out, the notes the rules add, and
which side it reads (:data:`.rule.GPU` or :data:`.rule.CPU`)."""

from __future__ import annotations

from typing import ClassVar

from ...trace.report import Report


class SideContext:
    """The part of :class:`.context.Context` and :class:`.cpu_context.CpuContext` that is the same."""

    side: ClassVar[str]

    def __init__(self, report: Report, min_share: float) -> None:
        self.report = report
        self.min_share = min_share
        self.notes: list[str] = []
