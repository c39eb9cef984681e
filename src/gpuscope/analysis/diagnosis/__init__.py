"""Diagnosis: where the step time goes (:mod:`.breakdown`) and what to fix first (:mod:`.rules`).

``diagnose(report)`` splits each steady step into GPU busy time by bound class and GPU idle time by
cause (without GPU work: the step's wall time into data loading, forward, backward, optimizer and
other Python, :mod:`.cpu_diagnosis`; with both, where PyTorch's ranges were recorded, the host's
parts beside the GPU's), runs every rule whose data the report has (:mod:`.engine`, the
same pass on either side), and ranks their findings by estimated saving (share of the step;
one-time findings by their share of the capture's steps). Rules whose data is missing are listed
with the reason, and the others still run.
"""

from __future__ import annotations

from ...trace.report import Report
from .breakdown import ProcessBreakdown
from .context import MIN_SHARE, Context, Process, fmt_ns
from .engine import ranked, run_rules
from .finding import Finding, Skipped
from .result import Diagnosis
from .rule import Rule

__all__ = ["Diagnosis", "Finding", "Rule", "Skipped", "diagnose"]


def _setup_notes(report: Report, processes: list[ProcessBreakdown]) -> list[str]:
    """For each process, how long the set-up before its first step (or, without steps, before its
    first GPU launch) took: process start, imports, CUDA and library set-up, compilation."""
    starts = dict(report.sql("SELECT pid, min(start_ns) FROM process GROUP BY pid"))
    out = []
    for p in processes:
        begin = starts.get(p.pid)
        if begin is None or not len(p.steps):
            continue
        first = int(p.steps["start_ns"].min())
        if first > begin:
            what = "its first step" if p.has_steps else "its first GPU launch"
            out.append(f"Process {p.pid}: set-up before {what} took {fmt_ns(first - begin)} (process start, "
                       "imports, CUDA and library set-up, compilation); it is left out of the steps.")
    return out


def _profiling_notes(report: Report, processes: list[ProcessBreakdown]) -> list[str]:
    """For each process with kernel launch overhead, how much of it is profiling's own
    (:func:`...overhead.profiling_share_ns`)."""
    from ..steps.overhead import collection_overhead, profiling_share_ns

    if not any(p.mean_parts()["idle_launch"] > 0 for p in processes):
        return []
    o = collection_overhead(report)
    out = []
    for p in processes:
        mean = p.mean_parts()
        own = profiling_share_ns(o, int(p.steps["duration_ns"].sum()), mean["duration_ns"], mean["idle_launch"])
        if own:
            unit = "per step" if p.has_steps else "over the steps"
            out.append(f"Process {p.pid}: of the kernel launch overhead ({fmt_ns(mean['idle_launch'])} {unit}), "
                       f"about {fmt_ns(own)} is profiling's own (the collection overhead, {fmt_ns(o.total_ns)} in all: "
                       f"per-call parts spread over the steps, the rest over the run); without the profiler it would be about "
                       f"{fmt_ns(mean['idle_launch'] - own)}.")
    return out


def _probe_notes(processes: list[Process]) -> list[str]:
    """For each process whose overhead probe measured a cost, what it measured and what it changed."""
    out = []
    for p in processes:
        if p.probe is None or not p.probe.measured:
            continue
        line = f"Process {p.pid}: profiling's own cost, measured: {p.probe.describe()}."
        if p.profiling_ns:
            line += (f" Savings are of the step without the profiler ({fmt_ns(p.base_ns)}): the host's share of "
                     f"the breakdown (CPU work, launch overhead, syncs, data loading) less the {fmt_ns(p.profiling_ns)} "
                     "per step that collection added.")
        out.append(line)
    return out


def _graph_level_notes(report: Report) -> list[str]:
    """Where a process recorded its CUDA graphs whole (capture/cupti/graph_level.py): the kernel
    rules (precision, tensor cores, fusion, roofline) see none of the kernels inside them."""
    from ..ops.graph_level import graphs_recorded_whole

    return [f"Process {pid}: its CUDA graphs were recorded as one operation per launch (the first had "
            f"{st.get('nodes')} nodes): the rules that read kernels (precision, tensor cores, fusion, the "
            "roofline) saw only the kernels launched outside graphs; record again with --trace graph-nodes "
            "to check the graphs' kernels." for pid, st in graphs_recorded_whole(report).items()]


def diagnose(report: Report, rules: list[Rule] | None = None, min_share: float = MIN_SHARE) -> Diagnosis:
    """Return the diagnosis of ``report``: breakdown, findings ranked by saving, and skipped rules.

    A report with GPU operations is read on its GPU side, one without on its CPU side
    (:mod:`.cpu_diagnosis`); the same rules run on either (each reads the sides it names).
    ``rules`` defaults to every rule of :data:`.rules.RULES`; findings saving less than ``min_share``
    of the step are left out.
    """
    from .rules import RULES

    ctx = Context(report, min_share)
    if ctx.missing("gpu"):  # no GPU work: the CPU side is all there is
        from .cpu_diagnosis import diagnose_cpu

        return diagnose_cpu(report, rules, min_share)
    findings, skipped = run_rules(ctx, RULES if rules is None else rules)
    findings = ranked(findings, ctx, lambda p: p.base_ns)
    processes = [p.breakdown for p in ctx.processes]
    ctx.notes += _setup_notes(report, processes)
    ctx.notes += _probe_notes(ctx.processes)
    ctx.notes += _graph_level_notes(report)
    ctx.notes += _profiling_notes(report, [p.breakdown for p in ctx.processes if p.probe is None or not p.probe.measured])
    if processes and ctx.roofline is None and not any("roofline" in n for n in ctx.notes):
        ctx.notes.append(f"Kernels have no bound class (compute, memory, latency): {ctx.missing('roofline')}.")
    from .result import counts_by_process

    from .cpu_diagnosis import host_side

    stepped = any(p.has_steps for p in processes)
    host, host_source = host_side(ctx) if processes else ([], "")
    return Diagnosis(ctx.timelines.step_source.description if processes else "no steps",
                     processes, findings, skipped, ctx.notes, min_share,
                     counts_by_process(report) if stepped else {}, host, host_source)
