"""``cpu_straggler``: in a multi-rank job without GPU work (gloo), the rank the others wait for, and why."""

from __future__ import annotations

from ..cpu_breakdown import CPU_LABELS
from ..cpu_context import CpuContext
from ..finding import Finding
from ..hung_ranks import hung_findings
from ..stragglers import cached_waits, skip_reason, straggler_findings
from .base import CpuRule


class CpuStraggler(CpuRule):
    name = "cpu_straggler"
    description = ("One rank arrives last at the collectives and the others wait for it (or the ranks take turns); "
                   "why, from that rank's step against the others'.")
    needs = ()

    def skip(self, ctx: CpuContext) -> str | None:  # type: ignore[override]
        return skip_reason(ctx)

    def evaluate(self, ctx: CpuContext) -> list[Finding]:  # type: ignore[override]
        waits = cached_waits(ctx)
        if waits is None:
            return []
        means = {p.pid: p.breakdown.mean_parts() for p in ctx.processes}
        step = sum(waits.step_ns.values()) / len(waits.step_ns) if waits.step_ns else 0.0
        hung = hung_findings(ctx.report, waits.collectives, step, prefix="cpu_")
        return hung + straggler_findings(waits, means, CPU_LABELS, ctx.min_share, prefix="cpu_")
