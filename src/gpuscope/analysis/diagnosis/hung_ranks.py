"""Ranks that never reached a collective the others entered: the job's hang (or a rank's death),
named with the rank's last recorded Python stack."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ...trace.report import Report
from ..distributed.groups import UNMATCHED
from ..distributed.collectives import group_key
from ..distributed.ranks import label, rank_of
from .context import data_dict, fmt_ns
from .cpu_frames import frame_text, load_stacks
from .finding import Finding


@dataclass(frozen=True)
class Missed:
    """A rank that never entered a collective that other ranks did."""

    pid: int
    kind: str
    seq: int
    waiting: list[int]  # the processes that entered it
    entered_ns: int  # when the first of them did
    waited_ns: int  # from then to the end of the last of them (or of the recording)
    ended: bool  # whether the missing process reached its exit handlers
    stack: str | None  # its last sampled stack, as ``file:line function``


def missed_collectives(report: Report, coll: pd.DataFrame) -> list[Missed]:
    """For each ranked process with collectives, the first collective (by time) that others entered
    and it never did; ``coll`` as :func:`..distributed.collectives.arrivals` returns it."""
    ranked = set(rank_of(report)) & set(coll["pid"].astype(int))
    if len(ranked) < 2:
        return []
    coll = coll.assign(group_key=group_key(coll))
    keys = ["group_key", "kind", "call"]
    made = coll.groupby(keys)["pid"].agg(lambda s: set(s.astype(int)))
    first = coll.groupby(keys)["start_ns"].min()
    # a rank outside a smaller group misses none of its calls; a group of unknown size, or of every rank, has them all
    members = coll.groupby("group_key")["pid"].agg(lambda s: set(s.astype(int))).to_dict()
    sizes = coll.groupby("group_key")["group_size"].max()
    for g, size in sizes.items():
        if pd.isna(size) or int(size) >= len(ranked):
            members[g] = set(ranked)
    ends = dict(report.sql("SELECT pid, max(end_ns) FROM process GROUP BY pid"))
    # a rank that made any collective call after the others entered the one it seems to miss went on
    # (a hung rank makes no further call), so it did not hang there: the calls were matched wrongly,
    # as where a rank skipped a collective and the numbering shifted, or its records are missing
    last_shared = coll.groupby("pid")["start_ns"].max().to_dict()
    # a rank cannot be said to miss a call the others made while its own collection was off
    windows: dict[int, list[tuple[int, int]]] = {}
    if report.count("capture_window"):
        for p, a, b in report.sql("SELECT pid, start_ns, end_ns FROM capture_window"):
            windows.setdefault(int(p), []).append((int(a), int(b) if b is not None else 2**63 - 1))
    out = []
    for pid in sorted(ranked):
        lacking = [(int(first[key]), key) for key, pids in made.items()
                   if pid not in pids and pids & ranked and pid in members[key[0]]
                   and not str(key[2]).startswith(UNMATCHED)
                   and (pid not in windows or any(a <= first[key] <= b for a, b in windows[pid]))]
        if not lacking:
            continue
        t, (group, kind, call) = min(lacking)
        entered = coll[(coll["group_key"] == group) & (coll["kind"] == kind) & (coll["call"] == call)]
        seq = int(entered["seq"].min())  # its number on the ranks that entered it
        if last_shared.get(pid, -1) > t:
            continue
        waiting = sorted(made[(group, kind, call)] & ranked)
        stop = max((int(ends[p]) for p in waiting if ends.get(p) is not None), default=None)
        if stop is None:
            stop = int(coll.loc[coll["pid"].isin(waiting), "end_ns"].max())
        out.append(Missed(pid, kind, int(seq), waiting, t, max(0, stop - t), ends.get(pid) is not None,
                          _last_stack(report, pid)))
    return out


def _last_stack(report: Report, pid: int) -> str | None:
    row = report.sql("SELECT stack_id FROM cpu_sample WHERE pid = ? AND tid = pid ORDER BY ts_ns DESC LIMIT 1",
                     [pid])
    if not row:
        return None
    info = load_stacks(report, [(pid, int(row[0][0]))]).get((pid, int(row[0][0])))
    frame = None if info is None else (info.user or info.innermost)
    return frame_text(frame) if frame else None


def hung_findings(report: Report, coll: pd.DataFrame, step_ns: float) -> list[Finding]:
    """One finding per rank that never reached a collective the others entered, first in the ranking."""
    ranks = rank_of(report)
    out = []
    for m in missed_collectives(report, coll):
        who = label(m.pid, ranks)
        others = ", ".join(label(p, ranks) for p in m.waiting[:4]) + (" ..." if len(m.waiting) > 4 else "")
        evidence = [f"{others} entered {m.kind} #{m.seq + 1} and waited {fmt_ns(m.waited_ns)} for {who}, which "
                    f"never entered it",
                    f"{who} {'ended' if m.ended else 'was killed or still running when the recording ended'}"]
        if m.stack:
            evidence.append(f"its last recorded stack: {m.stack}")
        fix = ("Find why this rank stopped before the collective (its last stack, its own output): a rank that "
               "takes another branch (a collective inside `if rank == 0`), an exception, a deadlock or a lost "
               "peer; set a timeout in init_process_group (and TORCH_NCCL_ASYNC_ERROR_HANDLING) so that a hang "
               "fails fast.")
        saving = float(m.waited_ns)
        out.append(Finding("hung_rank", f"Rank {ranks.get(m.pid, m.pid)} never reached a collective the "
                           "others waited in", saving, max(1.0, saving / step_ns) if step_ns else 1.0, evidence,
                           f"{who}: {m.stack or 'no stack recorded (--trace cpu records one)'}", fix,
                           data=data_dict(hung_pid=m.pid, hung_rank=ranks.get(m.pid), kind=m.kind, seq=m.seq,
                                          waited_ns=saving, stack=m.stack)))
    return out
