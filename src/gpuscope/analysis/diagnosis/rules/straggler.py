"""``straggler`` (or ``load_imbalance``, ``hung_rank``): the rank the others wait for in collectives, and
why, on reports with GPU work and without (gloo);
``exposed_comm``: NCCL collectives' time that no compute ran beside."""

from __future__ import annotations

from typing import Any

from ..breakdown import LABELS
from ..context import Context, data_dict, fmt_ns
from ..cpu_breakdown import CPU_LABELS
from ..finding import Finding
from ..hung_ranks import hung_findings
from ..rule import CPU, GPU, Rule
from ..rank_work import rank_work
from ..stragglers import cached_waits, skip_reason, straggler_findings, work_excess

EXPOSED_MIN_SHARE = 0.05  # exposed communication under this share of the step is not worth a finding


class Straggler(Rule):
    name = "straggler"
    description = ("One rank arrives last at the collectives and the others wait for it (or the ranks take turns); "
                   "why, from that rank's step breakdown against the others' (GPU parts, or without GPU work the "
                   "loop's CPU parts).")
    sides = (GPU, CPU)
    needs = ()

    def skip(self, ctx: Any) -> str | None:
        return skip_reason(ctx)

    def evaluate(self, ctx: Any) -> list[Finding]:
        waits = cached_waits(ctx)
        if waits is None:
            return []
        means = {p.pid: p.breakdown.mean_parts() for p in ctx.processes}
        step = sum(waits.step_ns.values()) / len(waits.step_ns) if waits.step_ns else 0.0
        hung = hung_findings(ctx.report, waits.collectives, step)
        if ctx.side == CPU:  # the ranks' steps split into the loop's parts; no kernels to compare
            return hung + straggler_findings(waits, means, CPU_LABELS, ctx.min_share)
        excess = work_excess(waits.steps, rank_work(ctx.timelines, ctx.names))
        return hung + straggler_findings(waits, means, LABELS, ctx.min_share, excess=excess)


class ExposedComm(Rule):
    name = "exposed_comm"
    description = "NCCL collectives run while no compute kernel does: communication on the critical path."
    needs = ("gpu",)

    def skip(self, ctx: Context) -> str | None:
        return super().skip(ctx) or skip_reason(ctx)

    def evaluate(self, ctx: Context) -> list[Finding]:
        waits = cached_waits(ctx)
        if waits is None:
            return []
        out = []
        for pid, f in waits.steps.groupby("pid"):
            step = waits.step_ns.get(int(pid), 0.0)
            # the collectives' own time once every rank arrived, that no compute kernel ran beside
            exposed = float((f["comm_ns"] - f["overlap_ns"] - f["wait_ns"]).clip(lower=0).mean())
            share = exposed / step if step else 0.0
            if share < max(EXPOSED_MIN_SHARE, ctx.min_share):
                continue
            comm = float(f["comm_ns"].mean())
            overlap = float(f["overlap_ns"].sum()) / float(f["comm_ns"].sum() or 1)
            rank = waits.ranks.get(int(pid))
            evidence = [f"collectives take {fmt_ns(comm)} per step, {overlap:.0%} of it beside compute kernels; "
                        f"{fmt_ns(exposed)} per step is exposed (arrival waits left out)"]
            fix = ("Overlap communication with the backward pass: DDP(..., bucket_cap_mb=...) smaller for earlier "
                   "all-reduces (or larger, when many small ones dominate), gradient_as_bucket_view=True; with "
                   "FSDP, forward/backward prefetch; or communicate less often: gradient accumulation with "
                   "no_sync() over N micro-batches.")
            where = f"rank {rank} (pid {pid})" if rank is not None else f"process {pid}"
            out.append(Finding(self.name, "Communication is not overlapped with compute", exposed, share, evidence,
                               where, fix, pid=int(pid), data=data_dict(exposed_ns=exposed, comm_ns=comm)))
        return out
