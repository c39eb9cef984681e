"""One pass of the diagnosis, the same on either side of a report: run every rule that reads this
side and has its data, cap each process's savings to its step, merge the fixes every rank shares,
and rank the findings by the time they save.

A rule that reads only the other side is listed as not checked where the report has no GPU work
(``GPU_REASON``: the GPU rules on a CPU-only report); on a report with GPU work, the CPU-side rules
are left out silently, for their fixes are judged by the GPU side's rules on the GPU idle time
their causes leave (Python between launches: ``hot_line``; waiting for batches:
``data_loader``).
"""

from __future__ import annotations

from typing import Any, Callable

from ..distributed.ranks import rank_of
from .context import fmt_ns, release_freed
from .finding import Finding, Skipped, cap_to_step, merge_ranks
from .rule import CPU, Rule

GPU_REASON = ("no GPU operations in this report: the CPU side is diagnosed instead (--trace cuda records GPU "
              "work on a machine with an NVIDIA GPU)")


def run_rules(ctx: Any, rules: list[Rule]) -> tuple[list[Finding], list[Skipped]]:
    """Return the findings of every rule of ``rules`` that reads ``ctx.side`` and has its data, and the
    rules skipped with their reasons (the data missing; on a CPU-only report, the GPU rules)."""
    findings: list[Finding] = []
    skipped: list[Skipped] = []
    other: list[Skipped] = []
    for rule in rules:
        if ctx.side not in rule.sides:
            if ctx.side == CPU:
                other.append(Skipped(rule.name, GPU_REASON))
            continue
        reason = rule.skip(ctx)
        if reason:
            skipped.append(Skipped(rule.name, reason))
            continue
        findings += rule.evaluate(ctx)
        release_freed()  # a rule's arrays are freed when it is done: not resident at the next one's peak
    return findings, skipped + other


def ranked(findings: list[Finding], ctx: Any, step_ns: Callable[[Any], float]) -> list[Finding]:
    """Return ``findings`` capped to each process's step (``step_ns`` of a process of ``ctx``), merged
    across ranks, and ordered: advisory and work-changing findings after the others, then by share
    of the step saved."""
    findings = cap_to_step(findings, {p.pid: step_ns(p) for p in ctx.processes},
                           {p.pid: p.share for p in ctx.processes}, ctx.min_share, fmt_ns)
    findings = merge_ranks(findings, rank_of(ctx.report), fmt_ns)
    findings.sort(key=lambda f: (f.advisory, f.work_changing, -f.share, f.rule, f.title))
    return findings
