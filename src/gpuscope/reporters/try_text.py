"""``gpuscope try``'s output: each fix with its estimated and measured gain, as text or JSON."""

from __future__ import annotations

import json
import shlex
from typing import Any

from ..analysis.diagnosis.finding import Finding
from ..experiment.measure import FixResult, TryResult, timed_step
from ..safe_text import terminal
from ..units import duration


STEP_WORDS = {"torch": "optimizer steps", "gpuscope": "gpuscope.step() marks",
              "module": "calls of the outermost module"}


def pct(share: float | None) -> str:
    """A share of the step as a whole percentage ("-": none)."""
    return "-" if share is None else f"{share * 100:.0f}%"


def gain_text(f: FixResult) -> str:
    """The measured gain: its median, 95% interval and rounds ("-": not measured)."""
    g = f.gain
    if g is None:
        return "-"
    if g.low is None or g.high is None:
        return f"{pct(g.median)} (1 round: no interval)"
    return f"{pct(g.median)} (95% interval {pct(g.low)} to {pct(g.high)}, {g.rounds} rounds)"


def numbers_text(f: FixResult) -> str:
    """Whether the program's numbers still agreed with the fix, and by how much."""
    a = f.agreement
    if a is None or a.agrees is None:
        return terminal(a.note) if a is not None else "not compared"
    word = "agree" if a.agrees else "DIFFER"
    text = f"{terminal(a.note)} {word}: largest relative difference {a.difference:.2g}, tolerance {a.tolerance:g}"
    if a.what == "losses":
        pairs = ", ".join(f"{x:.5g}/{y:.5g}" for x, y in zip(a.fixed, a.written))
        text += f" (with the fix / as written: {pairs})"
    return text


def answers_text(f: FixResult) -> str:
    """The finding the fix answers ("named with --fix" where none)."""
    finding = f.planned.finding
    return f"answers {terminal(finding.rule)}: {terminal(finding.title)}" if finding is not None else "named with --fix"


def crash_text(f: FixResult) -> str:
    """How a fix crashed the program: how it ended, the round, and the program's error line."""
    how = ", ".join(x for x in (f.ending.replace("was ", ""), f"round {f.crashed_round}" if f.crashed_round else "")
                    if x)
    return (f"CRASHED the program ({terminal(how)}): {terminal(f.detail)}" if how
            else f"CRASHED the program: {terminal(f.detail)}")


def compile_text(f: FixResult) -> str | None:
    """What torch.compile did in the runs with the fix (None: it did not run)."""
    if not f.dynamo:
        return None
    return "torch.compile: " + ", ".join(f"{terminal(k).replace('_', ' ')} {v}" for k, v in f.dynamo.items())


def program_line(result: TryResult) -> str:
    """The program tried, as a shell would run it."""
    return terminal(shlex.join(result.program.argv))


def timing_line(result: TryResult) -> str:
    """Where the program ran, the rounds, and how its steps were timed."""
    b = result.budget
    return (f"in {terminal(result.program.cwd)}; {result.rounds} round{'s' if result.rounds != 1 else ''}, the program "
            f"as written and each fix interleaved, collection off, step marks kept; each run stopped at "
            f"{b.steps} steps or at the first step past {b.time_s:g} s; steps timed after {result.warmup} of warm-up")


def baseline_line(result: TryResult) -> str:
    """The program as written: its step, or how it failed."""
    if result.baseline_error:
        return f"the program as written FAILED: {terminal(result.baseline_error)}"
    if result.step_ns is not None:
        what = STEP_WORDS.get(result.step_source, "steps")
        return f"as written: {duration(result.step_ns)} per step ({what})"
    return "as written: no steps timed (the program marks none, or ran fewer than the warm-up)"


def not_tried_line(finding: Finding) -> str:
    """A top finding that needs a code change: its rule, estimate, title and place."""
    return (f"{terminal(finding.rule)} ({pct(finding.share)} estimated): {terminal(finding.title)}; "
            f"at {terminal(finding.location)}")


def unconfirmed_line(result: TryResult) -> str | None:
    """The fixes that did not bear out their estimate (None: none)."""
    if not result.unconfirmed:
        return None
    return (f"Unconfirmed: {', '.join(terminal(f.planned.fix.name) for f in result.unconfirmed)} (a crash, no gain, "
            f"or an estimate more than {pct(result.tolerance)} outside its interval)")


NO_FIX = "No fix that gpuscope can apply answers the top findings."
NOT_TRIED = "Not tried (needs a code change):"


def _fix_block(f: FixResult, base_ns: float | None) -> list[str]:
    fix = f.planned.fix
    out = [f"{terminal(fix.name)}: {terminal(fix.title)}",
           f"  {answers_text(f)}" + (" (changes numerics)" if fix.changes_numerics else "")]
    if f.status == "crashed":
        out.append(f"  {crash_text(f)}")
        return out
    if f.status == "not applied":
        out.append(f"  not applied: {terminal(f.detail)}")
        return out
    if f.status == "no steps":  # the detail says why: what was applied is not known
        out.append(f"  not measured: {terminal(f.detail)}")
        return out
    out.append(f"  applied: {terminal(f.detail)}")
    compiled = compile_text(f)
    if compiled:
        out.append(f"  {compiled}")
    verdict = f" -> {f.verdict}" if f.verdict else ""
    out.append(f"  estimated gain {pct(f.planned.estimate)}, measured {gain_text(f)}{verdict}")
    if base_ns and f.step_ns:
        out.append(f"  step {duration(base_ns)} as written, {duration(f.step_ns)} with the fix")
    out.append(f"  numbers: {numbers_text(f)}")
    return out


def render_text(result: TryResult) -> str:
    """The result in lines for a terminal."""
    lines = [f"gpuscope try: {program_line(result)}", f"  {timing_line(result)}", baseline_line(result), ""]
    if not result.fixes:
        lines.append(NO_FIX)
    for f in result.fixes:
        lines += _fix_block(f, result.step_ns)
        lines.append("")
    if result.needs_edit:
        lines.append(NOT_TRIED)
        lines += [f"  {not_tried_line(finding)}" for finding in result.needs_edit]
        lines.append("")
    unconfirmed = unconfirmed_line(result)
    if unconfirmed:
        lines.append(unconfirmed)
    return "\n".join(lines).rstrip() + "\n"


def _int(v: float | None) -> int | None:
    return None if v is None else int(v)


def as_data(result: TryResult) -> dict[str, Any]:
    """The result as plain data (the JSON output)."""
    p = result.program
    return {
        "command": p.argv, "cwd": p.cwd, "report": result.report, "rounds": result.rounds,
        "budget": {"steps": result.budget.steps, "time_s": result.budget.time_s}, "warmup_steps": result.warmup,
        "tolerance": result.tolerance, "step_ns": None if result.step_ns is None else int(result.step_ns),
        "step_source": result.step_source, "baseline_error": result.baseline_error,
        "top_findings": result.top_findings, "fixes": [f.as_dict() for f in result.fixes],
        "not_tried": [{"rule": f.rule, "title": f.title, "location": f.location, "estimated_gain": round(f.share, 4),
                       "why": "needs a code change"} for f in result.needs_edit],
        "unconfirmed": [f.planned.fix.name for f in result.unconfirmed],
        "runs": [{"variant": o.variant, "round": o.round, "exit_code": o.exit_code, "wall_s": round(o.wall_s, 3),
                  "steps": len(o.steps_ns), "step_ns": _int(timed_step(o, result.warmup)), "stopped": o.stopped,
                  "error": o.error, "applied": o.results.get("applied") or {}} for o in result.outcomes],
    }


def render_json(result: TryResult) -> str:
    """The result as JSON text."""
    return json.dumps(as_data(result), indent=2) + "\n"
