"""The fixes measured: the program as written and with each fix, interleaved over rounds, untraced.

Round ``r`` runs every variant once, the order turned by one place each round (``A B C``, ``B C A``,
...), so that no variant always runs first on a cold machine or last on a warm one. A fix that made
the program fail is not run again; once the program as written fails, no round follows. A run's step time
is the median of its steps after the warm-up; a fix's gain comes from the per-round ratios of its
step to the step as written (:mod:`.interval`), and is judged against the diagnosis's estimate.
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..analysis.diagnosis.finding import Finding
from .fixes import Planned
from .interval import Gain, gain_from_ratios
from .numerics import Agreement, compare
from .runs import Budget, Outcome, Program, run, window_step

AS_WRITTEN = "as_written"
MIN_TIMED_STEPS = 2
DEFAULT_TOLERANCE = 0.10  # how far (share of the step) an estimate may lie outside the measured interval


@dataclass
class FixResult:
    """One fix, tried."""

    planned: Planned
    status: str  # "measured", "crashed", "not applied", "no steps"
    gain: Gain | None = None
    agreement: Agreement | None = None
    step_ns: float | None = None  # the median step with the fix, over its runs
    detail: str = ""  # what the patch did, or the error line, or why nothing was measured
    dynamo: dict[str, int] | None = None
    verdict: str = ""  # "confirmed", "not a gain", "estimate outside the interval", "" (no verdict)
    ending: str = ""  # how the program ended with the fix, when it crashed ("exited with code 1")
    crashed_round: int | None = None

    @property
    def unconfirmed(self) -> bool:
        """Whether ``--fail-if-unconfirmed`` counts this fix against the program: it crashed the
        program, made no gain, or its estimate lies outside the measured interval."""
        return self.status == "crashed" or (self.status == "measured" and self.verdict not in ("confirmed", ""))

    def as_dict(self) -> dict[str, Any]:
        """Plain data of the result."""
        f = self.planned.finding
        return {**self.planned.fix.as_dict(), "settings": self.planned.settings,
                "finding": None if f is None else {"rule": f.rule, "title": f.title, "location": f.location},
                "estimated_gain": None if self.planned.estimate is None else round(self.planned.estimate, 4),
                "status": self.status, "measured_gain": None if self.gain is None else self.gain.as_dict(),
                "step_ns": None if self.step_ns is None else int(self.step_ns), "verdict": self.verdict,
                "detail": self.detail, "numerics": None if self.agreement is None else self.agreement.as_dict(),
                "dynamo": self.dynamo, "ending": self.ending or None, "crashed_round": self.crashed_round}


@dataclass
class TryResult:
    """Every fix tried on one program, and the findings that need an edit."""

    program: Program
    rounds: int
    budget: Budget
    warmup: int
    tolerance: float
    fixes: list[FixResult]
    needs_edit: list[Finding]
    step_ns: float | None = None  # the median step as written
    step_source: str = ""
    baseline_error: str | None = None  # the program as written failed: nothing could be measured
    report: str = ""  # the report the findings came from
    top_findings: list[str] = field(default_factory=list)  # the rules of the top findings, as ranked
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def unconfirmed(self) -> list[FixResult]:
        """The fixes whose measurement does not bear out their estimate (or is not a gain)."""
        return [f for f in self.fixes if f.unconfirmed]


def timed_step(outcome: Outcome, warmup: int) -> float | None:
    """A run's step after its warm-up steps (None: too few steps, or the run failed): the mean over
    the window that waited for the device at both ends where the run kept one, else the median of
    the mark-to-mark times."""
    steps = outcome.steps_ns[warmup:]
    if outcome.failed or len(steps) < MIN_TIMED_STEPS:
        return None
    window = window_step(outcome.results)
    return window if window is not None else float(statistics.median(steps))


def measure(program: Program, planned: list[Planned], rounds: int, budget: Budget, warmup: int,
            tolerance: float = DEFAULT_TOLERANCE, on_run: Callable[[Outcome], None] = lambda o: None,
            workdir: Path | None = None) -> TryResult:
    """Run the program as written and with each planned fix, interleaved over ``rounds``."""
    variants: list[tuple[str, Planned | None]] = [(AS_WRITTEN, None), *((p.fix.name, p) for p in planned)]
    outcomes: dict[str, list[Outcome]] = {name: [] for name, _ in variants}
    with tempfile.TemporaryDirectory(prefix="gpuscope-try-", dir=workdir) as tmp:
        for r in range(rounds):
            turn = r % len(variants)
            for name, p in variants[turn:] + variants[:turn]:
                if any(o.failed for o in outcomes[name]):
                    continue  # a crash repeats: the time goes to the others
                fixes = [p.fix] if p is not None else []
                settings = [{"patch": p.fix.patch, "settings": p.settings}] if p is not None and p.fix.patch else []
                o = run(program, name, r + 1, fixes, settings, budget, Path(tmp), warmup=warmup)
                outcomes[name].append(o)
                on_run(o)
            if any(o.failed for o in outcomes[AS_WRITTEN]):
                break  # nothing to compare with
    base = outcomes[AS_WRITTEN]
    result = TryResult(program, rounds, budget, warmup, tolerance, [], [],
                       outcomes=[o for name, _ in variants for o in outcomes[name]])
    base_steps = [timed_step(o, warmup) for o in base]
    failed = next((o for o in base if o.failed), None)
    if failed is not None:
        result.baseline_error = failed.error or "the program failed"
    timed = [s for s in base_steps if s is not None]
    result.step_ns = statistics.median(timed) if timed else None
    result.step_source = next((o.source for o in base if o.source), "")
    written = [o.results for o in base if not o.failed]
    for p in planned:
        result.fixes.append(_judge(p, outcomes[p.fix.name], base_steps, written, warmup, tolerance))
    return result


def _judge(p: Planned, runs: list[Outcome], base_steps: list[float | None], written: list[dict[str, Any]],
           warmup: int, tolerance: float) -> FixResult:
    crashed = next((o for o in runs if o.failed), None)
    applied = {}
    for o in runs:
        applied.update(o.results.get("applied") or {})
    dynamo = next((o.results.get("dynamo") for o in runs if o.results.get("dynamo")), None)
    if crashed is not None:
        return FixResult(p, "crashed", detail=crashed.error or "the program failed", dynamo=dynamo,
                         ending=crashed.ending, crashed_round=crashed.round)
    said = applied.get(p.fix.patch or "", "") if p.fix.patch else p.fix.how
    if p.fix.patch and (not said or said.startswith("not applied")):
        errors = [e for o in runs for e in o.results.get("errors") or []]
        why = said or (errors[0] if errors else "the program never reached what it patches "
                       "(no DataLoader, or no module with parameters called)")
        return FixResult(p, "not applied", detail=why, dynamo=dynamo)
    steps = [timed_step(o, warmup) for o in runs]
    ratios = [s / b for s, b in zip(steps, base_steps) if s is not None and b is not None and b > 0 and s > 0]
    agreement = compare(runs[0].results, written, p.fix.precision) if runs else None
    timed = [s for s in steps if s is not None]
    if not ratios:
        return FixResult(p, "no steps", agreement=agreement, detail=f"fewer than {MIN_TIMED_STEPS} steps past "
                         f"the {warmup} of warm-up in a run (raise --steps or lower --warmup)", dynamo=dynamo)
    gain = gain_from_ratios(ratios)
    if not gain.is_gain:
        verdict = "not a gain"
    elif p.estimate is not None and gain.excludes(p.estimate, tolerance):
        verdict = "estimate outside the interval"
    else:
        verdict = "confirmed"
    return FixResult(p, "measured", gain, agreement, statistics.median(timed), said, dynamo, verdict)
