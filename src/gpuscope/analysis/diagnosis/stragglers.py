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
from ..distributed.groups import OUTSIDE, step_of
from ..distributed.summaries import rank_steps, timed_collectives
from ..distributed.ranks import label, rank_of
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


def _processes_with_work(report: Report) -> int:
    """How many processes have kernels, PyTorch operators or ranges: the records collectives are
    found in (:func:`..distributed.collectives.collectives`)."""
    parts = " UNION ".join(f"SELECT DISTINCT pid FROM {t}" for t in ("kernel", "torch_op", "nvtx_range"))
    return int(report.sql(f"SELECT count(*) FROM ({parts})")[0][0])


def rank_waits(report: Report) -> RankWaits | None:
    """The waits of a report whose processes share collectives; None with fewer than two such processes."""
    if _processes_with_work(report) < 2:  # one process: no collective is shared (finding them took seconds)
        return None
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


NOISE = 2.0  # a rank's extra work in a step counts when it is this many times the others' spread in that step
# a rank finding of a GPU job under this share of the step is left out: under a profiler the ranks' host
# times differ by about that much with nothing planted (its own cost is not the same on every rank)
RANK_MIN_SHARE = 0.02


HEAVY_SHARE = 2 / 3  # a rank whose compute is beyond the others' in this share of its steps has more work


@dataclass
class Excess:
    """Per process, the work per step beyond the other ranks' (see :mod:`.rank_work`), 0 where it is
    within the noise: ``host`` (lead and DataLoader time), ``loader`` (of which DataLoader waits),
    ``kernel`` (compute kernels, bounded by how much longer its collectives sat queued behind them).
    ``heavy``: the ranks whose compute is longer in most steps (uneven shards or batches), and
    ``heavy_ns``: the mean over the steps of the largest excess of theirs that held up a collective;
    ``turns``: without them, the mean over the steps of the largest excess of any rank in that step,
    where the rank holding it changes from step to step (0 when one rank holds it most of the time)."""

    host: dict[int, float]
    loader: dict[int, float]
    kernel: dict[int, float]
    heavy: list[int]
    heavy_ns: float
    turns: float

    def of(self, pid: int) -> float:
        return self.host.get(pid, 0.0) + self.kernel.get(pid, 0.0)


def work_excess(steps: pd.DataFrame, work: pd.DataFrame) -> Excess:
    """The :class:`Excess` of each process from its steady ``steps`` (``rank_steps`` rows) and their
    ``work`` (:func:`.rank_work.rank_work`), step by step against the median of the others' same step."""
    both = steps[["pid", "step", "start_ns"]].merge(work, on=["pid", "start_ns"])
    if both["pid"].nunique() < 2:
        return Excess({}, {}, {}, [], 0.0, 0.0)
    diffs = {c: _diffs(both, c) for c in ("host_ns", "loader_ns", "kernel_ns", "queue_ns")}
    sig = {c: diffs[c].where(diffs[c] > NOISE * _spread(both, c), 0.0) for c in ("host_ns", "kernel_ns")}
    # extra kernel time makes the others wait only as far as the GPU, not the host, was behind
    kernel = np.minimum(sig["kernel_ns"], diffs["queue_ns"].clip(lower=0).fillna(0.0))
    longer = (sig["kernel_ns"] > 0).where(sig["kernel_ns"].notna())
    heavy = [int(p) for p, share in longer.mean().items() if share >= HEAVY_SHARE]
    heavy_ns = float(kernel[heavy].max(axis=1).fillna(0.0).mean()) if heavy else 0.0
    per_step = sig["host_ns"].fillna(0.0) + kernel.drop(columns=heavy).fillna(0.0)
    top = per_step.max(axis=1)
    holders = per_step.idxmax(axis=1)[top > 0]
    rotates = holders.nunique() > 1 and holders.value_counts().max() <= STRAGGLER_SHARE * len(holders)

    def med(frame: pd.DataFrame) -> dict[int, float]:
        return {int(p): max(0.0, float(v)) for p, v in frame.median().fillna(0.0).items()}

    host = med(sig["host_ns"])
    loader = {p: min(v, host[p]) for p, v in med(diffs["loader_ns"]).items()}
    return Excess(host, loader, med(kernel), heavy, heavy_ns, float(top.mean()) if rotates else 0.0)


def _wide(both: pd.DataFrame, column: str) -> pd.DataFrame:
    return both.pivot_table(index="step", columns="pid", values=column, aggfunc="sum")


def _diffs(both: pd.DataFrame, column: str) -> pd.DataFrame:
    """Per step (rows) and process (columns): its ``column`` minus the median of the other processes'."""
    wide = _wide(both, column)
    out = pd.DataFrame(index=wide.index, columns=wide.columns, dtype=float)
    for p in wide.columns:
        out[p] = wide[p] - wide.drop(columns=p).median(axis=1)
    return out


def _spread(both: pd.DataFrame, column: str) -> pd.DataFrame:
    """Per step and process: how far the other processes' ``column`` lie from their median in that
    step (their median absolute deviation; 0 with one other): the noise a difference must stand above."""
    wide = _wide(both, column)
    out = pd.DataFrame(index=wide.index, columns=wide.columns, dtype=float)
    for p in wide.columns:
        rest = wide.drop(columns=p)
        out[p] = rest.sub(rest.median(axis=1), axis=0).abs().median(axis=1).fillna(0.0)
    return out


def _net_caused(waits: RankWaits) -> dict[int, float]:
    """Per process, the mean wait per step it made each other rank wait, less what the other ranks
    typically made the rest wait (the waits every rank causes in turn: launch lag, noise)."""
    pids = list(waits.wait_ns)
    made = {p: float(np.mean([waits.caused.get(p, {}).get(o, 0.0) for o in pids if o != p])) for p in pids}
    return {p: made[p] - float(np.median([made[o] for o in pids if o != p])) for p in pids}


def straggler_findings(waits: RankWaits, means: dict[int, dict[str, float]], labels: dict[str, str],
                       min_share: float, excess: Excess | None = None) -> list[Finding]:
    """The straggler finding (or, without one straggler, the imbalance finding) of a multi-rank report.

    ``means``: each process's mean steady step by part (a breakdown's ``mean_parts``); ``labels``:
    the parts' names. With ``excess`` (GPU jobs, :func:`work_excess`), a rank is the straggler only
    for work of its own beyond the noise: the saving is the waits it makes the others wait net of
    those every rank causes, at most its extra work per step. Without it (CPU jobs), the rank that
    causes :data:`STRAGGLER_SHARE` of the waits, at most the excess of its longest part.
    """
    if excess is not None:
        return _from_work(waits, means, labels, min_share, excess)
    if waits.straggler is None:
        return _imbalance(waits, min_share)
    s = waits.straggler
    others = [p for p in waits.wait_ns if p != s]
    # what the others would stop losing: the waits it made them wait, not every wait they had
    made_wait = waits.caused.get(s, {})
    lost = float(np.mean([made_wait.get(p, 0.0) for p in others])) if others else 0.0
    cause, fix, part, extra = _cause(s, others, means, labels)
    if part is not None:
        lost = min(lost, extra)
    return _straggler(waits, s, lost, made_wait, means, labels, min_share, (cause, fix, part, extra))


def _from_work(waits: RankWaits, means: dict[int, dict[str, float]], labels: dict[str, str], min_share: float,
               excess: Excess) -> list[Finding]:
    min_share = max(min_share, RANK_MIN_SHARE)
    net = _net_caused(waits)
    saving = {p: max(0.0, min(net[p], excess.of(p))) for p in net}
    s = max(saving, key=lambda p: (saving[p], -p))
    others = [p for p in waits.wait_ns if p != s]
    step = float(np.mean([waits.step_ns[p] for p in others])) if others else 0.0
    if step and saving[s] / step >= min_share:
        if excess.host.get(s, 0.0) >= excess.kernel.get(s, 0.0):
            data_led = excess.loader.get(s, 0.0) >= 0.5 * excess.host.get(s, 0.0)
            part = next((q for q in (("idle_data", "cpu_data") if data_led else ("idle_cpu", "cpu_other"))
                         if q in labels), None)
            found = _cause(s, others, means, labels, (part,) if part else ())
            found = found if found[2] else (*CAUSES.get(part or "idle_cpu", ("", "")), part, excess.of(s))
        elif len(excess.heavy) > 1 and s in excess.heavy:
            return _uneven(waits, excess.heavy, step, excess)
        else:
            found = _cause(s, others, means, labels, tuple(q for q in labels if q.startswith("busy_")))
        return _straggler(waits, s, saving[s], waits.caused.get(s, {}), means, labels, min_share, found,
                          own=(excess.host.get(s, 0.0), excess.kernel.get(s, 0.0)))
    mean_step = float(np.mean(list(waits.step_ns.values())))
    if excess.heavy and mean_step and excess.heavy_ns / mean_step >= min_share:
        return _uneven(waits, excess.heavy, mean_step, excess)
    turns = min(float(np.mean(list(waits.wait_ns.values()))), excess.turns)
    return _imbalance(waits, min_share, turns)


def _straggler(waits: RankWaits, s: int, lost: float, made_wait: dict[int, float], means: dict[int, dict[str, float]],
               labels: dict[str, str], min_share: float,
               found: tuple[str, str, str | None, float], own: tuple[float, float] | None = None) -> list[Finding]:
    ranks = waits.ranks
    others = [p for p in waits.wait_ns if p != s]
    caused = float(np.mean([made_wait.get(p, 0.0) for p in others])) if others else 0.0
    step = float(np.mean([waits.step_ns[p] for p in others])) if others else 0.0
    share = lost / step if step else 0.0
    if share < min_share:
        return []
    evidence = [f"{label(s, ranks)} arrived last at {waits.last[s]} of {waits.shared} collectives of the steady "
                f"steps; the other {len(others)} rank{'s' if len(others) > 1 else ''} wait{'' if len(others) > 1 else 's'}"
                f" {fmt_ns(caused)} per step for it"]
    evidence += [f"{label(p, ranks)} waits {fmt_ns(made_wait.get(p, 0.0))} per step for it" for p in sorted(others)[:7]]
    if own is not None:
        host, kernel = own
        work = [f"{fmt_ns(host)} of host time before its first launch and in its DataLoader"] if host else []
        work += [f"{fmt_ns(kernel)} of compute its collectives sat queued behind"] if kernel else []
        evidence.append(f"its own work per step beyond the other ranks': {' and '.join(work)}; the saving, "
                        f"{fmt_ns(lost)} per step ({share:.0%} of their step of {fmt_ns(step)}), is the waits it causes "
                        "beyond those each other rank causes (launch lag, noise), at most that work")
    cause, fix, part, extra = found
    if part is not None:
        mine = means.get(s, {}).get(part, 0.0)
        theirs = float(np.mean([means[p].get(part, 0.0) for p in others if p in means] or [0.0]))
        evidence.append(f"why: {cause}: {labels.get(part, part)} takes {fmt_ns(mine)} per step on "
                        f"{label(s, ranks)} against {fmt_ns(theirs)} on the others (+{fmt_ns(max(extra, mine - theirs))})")
        fix = f"{fix}. The others then stop waiting; this saves up to {fmt_ns(lost)} per step on every other rank."
    else:
        cause = "its own breakdown shows no part longer than the others' (steps not recorded on it)"
        fix = "Profile that rank's step (--trace torch,cpu) and compare it with the others'."
    return [Finding("straggler", f"Rank {ranks.get(s, s)} is the straggler: the others wait for it", lost, share,
                    evidence, f"{label(s, ranks)}: {cause}", fix,
                    data=data_dict(straggler_pid=s, straggler_rank=ranks.get(s), lost_ns=lost, cause_part=part,
                                   waits={str(p): made_wait.get(p, 0.0) for p in others}))]


def balance_saving(excess: Excess, heavy: list[int], ranks: int) -> float:
    """What an even split saves per step: the heavy ranks' step is set by their compute, which an
    even split brings down to the mean over all ``ranks``; the excess of the heavy ranks over the rest
    shrinks by the light ranks' share of the ranks: ``excess x light / ranks`` (two of four ranks
    running 39.5 ms more compute per step: 19.8 ms, where evening a 15:1 split measured 22.6-23.0 ms)."""
    light = ranks - len(heavy)
    if not heavy or light <= 0:
        return 0.0
    return float(np.mean([excess.kernel.get(p, 0.0) for p in heavy])) * light / ranks


def _uneven(waits: RankWaits, heavy: list[int], step: float, excess: Excess) -> list[Finding]:
    """Several ranks run longer compute than the rest (uneven shards): one imbalance finding naming
    them, saving what an even split would (:func:`balance_saving`)."""
    ranks = waits.ranks
    lost = balance_saving(excess, heavy, len(waits.wait_ns))
    waited = float(np.mean([waits.wait_ns[p] for p in waits.wait_ns if p not in heavy] or [0.0]))
    names = ", ".join(label(p, ranks) for p in sorted(heavy))
    evidence = [f"{label(p, ranks)} runs compute kernels longer than the other ranks in most steps; where its "
                f"collectives sat queued behind them, by {fmt_ns(excess.kernel.get(p, 0.0))} per step (median)"
                for p in sorted(heavy)]
    evidence.append(f"the other ranks wait {fmt_ns(waited)} per step in collectives; an even split brings every "
                    f"rank's compute to the mean, {fmt_ns(lost)} per step less on the heavy ranks, which set the pace")
    fix = ("Give every rank the same work: split tensor-parallel layers evenly (heads and hidden units divisible by "
           "the group size), the same batch size and sequence lengths on every data-parallel rank.")
    return [Finding("load_imbalance", f"Uneven work: ranks {', '.join(str(ranks.get(p, p)) for p in sorted(heavy))} "
                    "compute longer per step and the others wait", lost, lost / step if step else 0.0, evidence,
                    names, fix, data=data_dict(heavy_ranks=[ranks.get(p) for p in sorted(heavy)], wait_ns=waited, balance_ns=lost))]


def _cause(s: int, others: list[int], means: dict[int, dict[str, float]],
           labels: dict[str, str], parts: tuple[str, ...] | None = None) -> tuple[str, str, str | None, float]:
    """The part of the straggler's step longest beyond the others' mean (among ``parts``, default
    all): (cause, fix, part, excess ns)."""
    if s not in means or not any(p in means for p in others):
        return "", "", None, 0.0
    best, excess = None, 0.0
    for part in (labels if parts is None else parts):
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


def _imbalance(waits: RankWaits, min_share: float, bound: float | None = None) -> list[Finding]:
    waited = total = float(np.mean(list(waits.wait_ns.values())))
    if bound is not None:
        total = min(total, bound)
    step = float(np.mean(list(waits.step_ns.values())))
    share = total / step if step else 0.0
    if share < min_share or not waits.shared:
        return []
    ranks = waits.ranks
    spread = ", ".join(f"{label(p, ranks)} {waits.last[p] / waits.shared:.0%}"
                       for p in sorted(waits.last, key=lambda p: -waits.last[p])[:6])
    evidence = [f"the last rank to arrive at a collective changes: arrived last at {spread} of them",
                f"each rank waits {fmt_ns(waited)} per step on average"
                + (f"; the extra work of the rank slowest in each step accounts for {fmt_ns(total)} of it "
                   f"({share:.0%} of the step)" if bound is not None else f" ({share:.0%} of the step)")]
    fix = ("Balance the work per step across ranks: batches of equal size and sequence length (a length-grouped "
           "sampler), the same data pipeline speed everywhere; where the variation is inherent, fewer "
           "synchronizations per step (gradient accumulation with DDP's no_sync()) let it average out.")
    return [Finding("load_imbalance", "The ranks take turns being slowest: each waits for the others", total, share,
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
