"""What a diagnosis rule returns: a finding with its estimated saving, evidence, location and fix."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

MIN_SHARE = 0.01  # findings that save less than this share of the step are left out


@dataclass
class Finding:
    """One problem found, with what fixing it is estimated to save.

    ``saving_ns`` is the time saved per steady-state step (over the whole capture when the report
    has no steps); ``share`` is that saving over the step time (0-1): by Amdahl's law the step gets
    that much shorter when the fix removes the part the rule measured. A ``one_time`` finding (the
    warm-up) saves ``saving_ns`` once, and its share is of the time of all the steps of the capture.
    An ``advisory`` finding reports an expected cost the program can only work around; it is listed
    after the others whatever its saving. A ``work_changing`` finding changes what the program
    computes (a larger batch): its saving is per sample, as a share of the step's time per sample,
    and it is ranked apart from the fixes that keep the work.
    """

    rule: str
    title: str
    saving_ns: float
    share: float
    evidence: list[str]
    location: str
    fix: str
    pid: int | None = None
    one_time: bool = False
    advisory: bool = False  # nothing in the program to fix (an expected cost): listed after the others
    work_changing: bool = False  # changes the work (batch size): saving per sample, ranked apart
    data: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Return the finding as plain data (integer ns, share rounded to 0.1%)."""
        out = asdict(self)
        out["saving_ns"] = int(round(self.saving_ns))
        out["share"] = round(self.share, 4)
        return out


@dataclass(frozen=True)
class Skipped:
    """A rule that could not run, and the one-line reason (the data it needs was not recorded)."""

    rule: str
    reason: str


def cap_to_step(findings: list[Finding], step_ns: dict[int, float], share: dict[int, Callable[[float], float]],
                min_share: float, fmt: Callable[[float], str]) -> list[Finding]:
    """Cap the savings of each process's fixes so that, taken in order of saving, they never add up
    to more than its step (``step_ns`` by pid; ``share`` turns a saving into its share of the step);
    a finding left under ``min_share`` is dropped. One-time, advisory and work-changing findings are
    not capped (they are not part of the steady step's time), nor those of other processes."""
    left = dict(step_ns)
    out = []
    for f in sorted(findings, key=lambda f: -f.share):
        if f.one_time or f.advisory or f.work_changing or f.pid not in left:
            out.append(f)
            continue
        saving = min(f.saving_ns, max(0.0, left[f.pid]))
        left[f.pid] -= saving
        if saving < f.saving_ns:
            f.evidence.append(f"capped at {fmt(saving)}: the fixes ranked above it already take the rest "
                              "of the step")
            f.saving_ns, f.share = saving, share[f.pid](saving)
        if f.share >= min_share:
            out.append(f)
    return out


# rules whose findings are about one rank against the others: never merged across ranks
PER_RANK_RULES = ("straggler", "hung_rank")


def merge_ranks(findings: list[Finding], ranks: dict[int, int], fmt: Callable[[float], str]) -> list[Finding]:
    """One finding per fix across the ranks of a job: where the same rule finds the same fix on
    several ranks (each rank runs the same program), keep one finding, of the rank it saves least
    on (the job steps at the pace of its slowest rank, so a fix made on every rank shortens the
    job's step by about the smallest of the ranks' savings), with each rank's saving in its
    evidence and in ``data["ranks"]`` (pid → saving in ns). Findings of processes without a rank,
    and those about one rank against the others (stragglers, hung ranks), stay as they are."""
    groups: dict[tuple[object, ...], list[Finding]] = {}
    out: list[Finding] = []
    for f in findings:
        if f.pid not in ranks or f.rule.endswith(PER_RANK_RULES):
            out.append(f)
            continue
        groups.setdefault((f.rule, f.fix, f.one_time, f.advisory, f.work_changing), []).append(f)
    for group in groups.values():
        pids = {f.pid for f in group}
        if len(group) < 2 or len(pids) < len(group):
            out += group
            continue
        keep = min(group, key=lambda f: f.saving_ns)
        each = ", ".join(f"rank {ranks[f.pid]} (pid {f.pid}) ~{fmt(f.saving_ns)}"
                         for f in sorted(group, key=lambda f: ranks[f.pid]))
        keep.evidence.append(f"found on {len(group)} ranks, saving {each} {'once' if keep.one_time else 'per step'}; "
                             "counted at the smallest: "
                             "the job steps at the pace of its slowest rank")
        keep.data = {**keep.data, "ranks": {int(f.pid): float(f.saving_ns) for f in group}}  # type: ignore[arg-type]
        out.append(keep)
    return out
