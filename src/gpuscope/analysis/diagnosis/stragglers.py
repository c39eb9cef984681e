"""What the rules of a multi-rank report share: who the others wait for in collectives, how long,
and why, from the straggler's own step breakdown against the other ranks'.

The ranks' collectives are matched call by call (:mod:`...collectives`): a rank waits in each for the
last one to arrive. When the waits one rank makes the others wait are most of all the waits
(:data:`STRAGGLER_SHARE`), it is the straggler: the others lose those waits (and only those), and
the part of its step that is longer than the same part of the others' (data loading, forward, a
host synchronization, ...) is why. When the last arrival
moves between ranks, the ranks are imbalanced in turn, and the waits are a finding of their own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...trace.report import Report
from ..collective_groups import OUTSIDE, step_of
from ..rank_summaries import rank_steps, timed_collectives
from ..ranks import label, rank_of
from .context import data_dict, fmt_ns
from .finding import Finding

STRAGGLER_SHARE = 0.6  # making this share of all the waits in collectives makes a rank the straggler

# per part of a breakdown: the cause in words, and the fix on the straggler
CAUSES: dict[str, tuple[str, str]] = {
    "cpu_data": ("data loading: it waits longer for its batches",
                 "Make its input pipeline as fast as the others': more DataLoader workers (num_workers), "
                 "pinned memory, no per-sample Python on that rank, data of the same size on every rank"),
    "idle_data": ("data loading: its GPU waits longer for batches",
                  "Make its input pipeline as fast as the others': more DataLoader workers (num_workers), "
                  "pinned memory, data of the same size on every rank"),
    "cpu_forward": ("forward: its modules take longer (a bigger batch, or a slower core)",
                    "Give every rank the same batch size and sequence lengths (a sampler that balances them), "
                    "and check the machine for other load"),
    "cpu_backward": ("backward: its gradients take longer (a bigger batch, or a slower core)",
                     "Give every rank the same batch size and sequence lengths, and check the machine for other load"),
    "cpu_optimizer": ("the optimizer step takes longer", "Check what that rank does in its optimizer step"),
    "cpu_other": ("the loop's own Python between the calls (logging, metrics, checkpoints on one rank)",
                  "Move work done on one rank only (logging, evaluation, checkpointing) off the step, "
                  "or to a background thread"),
    "idle_cpu": ("CPU work that launches nothing (logging, metrics, checkpoints on one rank)",
                 "Move work done on one rank only (logging, evaluation, checkpointing) off the step"),
    "idle_sync": ("a host synchronization (.item(), .cpu(), torch.cuda.synchronize())",
                  "Remove the synchronization on that rank, or do it every N steps"),
    "idle_launch": ("kernel launch overhead (the host issues its kernels slower)",
                    "Check that rank's host for other load; CUDA graphs remove the launch cost"),
    "idle_transfer": ("host-device transfers", "Pin the host memory and copy asynchronously on that rank"),
    "busy_compute": ("slower kernels (compute-bound): a bigger batch or a slower GPU",
                     "Give every rank the same work; check that GPU's clocks and temperature (nvidia-smi -q)"),
    "busy_memory": ("slower kernels (memory-bound): a bigger batch or a slower GPU",
                    "Give every rank the same work; check that GPU's clocks and temperature (nvidia-smi -q)"),
    "busy_latency": ("slower kernels: a bigger batch or a slower GPU",
                     "Give every rank the same work; check that GPU's clocks and temperature"),
    "busy_unknown": ("slower GPU work: a bigger batch or a slower GPU",
                     "Give every rank the same work; check that GPU's clocks and temperature"),
}


@dataclass
class RankWaits:
    """Per process with shared collectives: mean steady step, mean wait per step, collectives it arrived
    last at, and the job's straggler (None when the last arrival moves between ranks)."""

    steps: pd.DataFrame  # rank_steps rows of the steady steps
    step_ns: dict[int, float]
    wait_ns: dict[int, float]
    last: dict[int, int]
    shared: int
    straggler: int | None
    ranks: dict[int, int]
    collectives: pd.DataFrame  # every call, with its arrival skew
    caused: dict[int, dict[int, float]] = field(default_factory=dict)  # see _caused


def rank_waits(report: Report) -> RankWaits | None:
    """The waits of a report whose processes share collectives; None with fewer than two such processes."""
    coll = timed_collectives(report)
    if not len(coll) or coll["pid"].nunique() < 2 or not (coll["ranks"] > 1).any():
        return None
    per = rank_steps(report, coll)
    if not len(per):
        return None
    warm = per["warmup"].astype(bool)
    all_warm = (~warm).groupby(per["pid"]).transform("sum") == 0  # a process whose every step is warm-up keeps them
    steady = per[~warm | all_warm]
    step_ns = {int(p): float(f["duration_ns"].mean()) for p, f in steady.groupby("pid")}
    wait_ns = {int(p): float(f["wait_ns"].mean()) for p, f in steady.groupby("pid")}
    last = {int(p): int(f["last"].sum()) for p, f in steady.groupby("pid")}
    shared = sum(last.values())
    caused = _caused(coll, steady)
    total = sum(sum(w.values()) for w in caused.values())
    top = max(caused, key=lambda p: (sum(caused[p].values()), -p)) if caused else None
    straggler = (top if top is not None and total > 0 and sum(caused[top].values()) >= STRAGGLER_SHARE * total
                 else None)
    return RankWaits(steady, step_ns, wait_ns, last, shared, straggler, rank_of(report), coll, caused)


def _caused(coll: pd.DataFrame, steady: pd.DataFrame) -> dict[int, dict[int, float]]:
    """For each process that arrived last at shared collectives of the steady steps: the mean wait
    per step it made each other process wait there (``{last: {waiting: ns per step}}``)."""
    out: dict[int, dict[int, float]] = {}
    waited = coll[(coll["ranks"] > 1) & (coll["last_pid"] != coll["pid"])]
    waited = waited[step_of(waited, steady.assign(end_ns=steady["start_ns"] + steady["duration_ns"])) != OUTSIDE]
    steps = steady.groupby("pid").size()
    for (pid, last), w in waited.groupby(["pid", "last_pid"])["wait_ns"].sum().items():
        out.setdefault(int(last), {})[int(pid)] = float(w) / int(steps[pid])
    return out


def straggler_findings(waits: RankWaits, means: dict[int, dict[str, float]], labels: dict[str, str],
                       min_share: float, prefix: str = "") -> list[Finding]:
    """The straggler finding (or, without one straggler, the imbalance finding) of a multi-rank report.

    ``means``: each process's mean steady step by part (a breakdown's ``mean_parts``); ``labels``:
    the parts' names. The saving is the mean wait per step of the other ranks, its share of their step.
    """
    ranks = waits.ranks
    if waits.straggler is None:
        return _imbalance(waits, min_share, prefix)
    s = waits.straggler
    others = [p for p in waits.wait_ns if p != s]
    # what the others would stop losing: the waits it made them wait, not every wait they had
    made_wait = waits.caused.get(s, {})
    lost = float(np.mean([made_wait.get(p, 0.0) for p in others])) if others else 0.0
    step = float(np.mean([waits.step_ns[p] for p in others])) if others else 0.0
    share = lost / step if step else 0.0
    if share < min_share:
        return []
    evidence = [f"{label(s, ranks)} arrived last at {waits.last[s]} of {waits.shared} collectives of the steady "
                f"steps; the other {len(others)} rank{'s' if len(others) > 1 else ''} wait{'' if len(others) > 1 else 's'}"
                f" {fmt_ns(lost)} per step for it ({share:.0%} of their step of {fmt_ns(step)})"]
    evidence += [f"{label(p, ranks)} waits {fmt_ns(made_wait.get(p, 0.0))} per step for it" for p in sorted(others)[:7]]
    cause, fix, part, excess = _cause(s, others, means, labels)
    if part is not None:
        mine, theirs = means[s][part], float(np.mean([means[p][part] for p in others if p in means]))
        evidence.append(f"why: {cause}: {labels.get(part, part)} takes {fmt_ns(mine)} per step on "
                        f"{label(s, ranks)} against {fmt_ns(theirs)} on the others (+{fmt_ns(excess)})")
        fix = f"{fix}. The others then stop waiting; this saves up to {fmt_ns(lost)} per step on every other rank."
    else:
        cause = "its own breakdown shows no part longer than the others' (steps not recorded on it)"
        fix = "Profile that rank's step (--trace torch,cpu) and compare it with the others'."
    return [Finding(prefix + "straggler", f"Rank {ranks.get(s, s)} is the straggler: the others wait for it", lost, share,
                    evidence, f"{label(s, ranks)}: {cause}", fix,
                    data=data_dict(straggler_pid=s, straggler_rank=ranks.get(s), lost_ns=lost, cause_part=part,
                                   waits={str(p): made_wait.get(p, 0.0) for p in others}))]


def _cause(s: int, others: list[int], means: dict[int, dict[str, float]],
           labels: dict[str, str]) -> tuple[str, str, str | None, float]:
    """The part of the straggler's step longest beyond the others' mean: (cause, fix, part, excess ns)."""
    if s not in means or not any(p in means for p in others):
        return "", "", None, 0.0
    best, excess = None, 0.0
    for part in labels:
        if part not in means[s]:
            continue
        theirs = float(np.mean([means[p].get(part, 0.0) for p in others if p in means]))
        d = means[s][part] - theirs
        if d > excess:
            best, excess = part, d
    if best is None:
        return "", "", None, 0.0
    cause, fix = CAUSES.get(best, (labels.get(best, best), "Make that part as fast as on the other ranks"))
    return cause, fix, best, excess


def _imbalance(waits: RankWaits, min_share: float, prefix: str) -> list[Finding]:
    total = float(np.mean(list(waits.wait_ns.values())))
    step = float(np.mean(list(waits.step_ns.values())))
    share = total / step if step else 0.0
    if share < min_share or not waits.shared:
        return []
    ranks = waits.ranks
    spread = ", ".join(f"{label(p, ranks)} {waits.last[p] / waits.shared:.0%}"
                       for p in sorted(waits.last, key=lambda p: -waits.last[p])[:6])
    evidence = [f"the last rank to arrive at a collective changes: arrived last at {spread} of them",
                f"each rank waits {fmt_ns(total)} per step on average ({share:.0%} of the step)"]
    fix = ("Balance the work per step across ranks: batches of equal size and sequence length (a length-grouped "
           "sampler), the same data pipeline speed everywhere; where the variation is inherent, fewer "
           "synchronizations per step (gradient accumulation with DDP's no_sync()) let it average out.")
    return [Finding(prefix + "load_imbalance", "The ranks take turns being slowest: each waits for the others", total, share,
                    evidence, "every rank", fix, data=data_dict(wait_ns=total, last=dict(map(
                        lambda kv: (str(kv[0]), kv[1]), waits.last.items()))))]


NO_RANKS = ("no collectives shared by two or more ranks in this report: profile the whole job "
            "(gpuscope profile torchrun ...), with --trace torch-ops on a CPU-only job (gloo)")


def cached_waits(ctx: object) -> RankWaits | None:
    """:func:`rank_waits` of the context's report, computed once per context."""
    cache = ctx.__dict__.setdefault("_rank_waits", {})
    if "w" not in cache:
        cache["w"] = rank_waits(ctx.report)  # type: ignore[attr-defined]
    return cache["w"]


def skip_reason(ctx: object) -> str | None:
    """Why the rank rules cannot run: None when they can, and None too for a report without ranks
    (a one-process program: nothing to say, the rules find nothing)."""
    if cached_waits(ctx) is not None:
        return None
    return NO_RANKS if ctx.report.count("rank") > 1 else None  # type: ignore[attr-defined]
