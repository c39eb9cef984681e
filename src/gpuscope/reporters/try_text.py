"""``gpuscope try``'s output: each fix with its estimated and measured gain, as text or JSON."""

from __future__ import annotations

import json
import shlex
from typing import Any

from ..experiment.measure import FixResult, TryResult, timed_step
from ..safe_text import terminal
from ..units import duration


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{share * 100:.0f}%"


def _gain(f: FixResult) -> str:
    g = f.gain
    if g is None:
        return "-"
    if g.low is None or g.high is None:
        return f"{_pct(g.median)} (1 round: no interval)"
    return f"{_pct(g.median)} (95% interval {_pct(g.low)} to {_pct(g.high)}, {g.rounds} rounds)"


def _numbers(f: FixResult) -> str:
    a = f.agreement
    if a is None or a.agrees is None:
        return terminal(a.note) if a is not None else "not compared"
    word = "agree" if a.agrees else "DIFFER"
    text = f"{a.note} {word}: largest relative difference {a.difference:.2g}, tolerance {a.tolerance:g}"
    if a.what == "losses":
        pairs = ", ".join(f"{x:.5g}/{y:.5g}" for x, y in zip(a.fixed, a.written))
        text += f" (with the fix / as written: {pairs})"
    return text


def _fix_block(f: FixResult, base_ns: float | None) -> list[str]:
    fix, finding = f.planned.fix, f.planned.finding
    answers = (f"answers {finding.rule}: {terminal(finding.title)}" if finding is not None
               else "named with --fix")
    out = [f"{fix.name}: {fix.title}", f"  {answers}"
           + (" (changes numerics)" if fix.changes_numerics else "")]
    if f.status == "crashed":
        how = ", ".join(x for x in (f.ending.replace("was ", ""), f"round {f.crashed_round}" if f.crashed_round else "")
                        if x)
        out.append(f"  CRASHED the program ({how}): {terminal(f.detail)}" if how
                   else f"  CRASHED the program: {terminal(f.detail)}")
        return out
    if f.status == "not applied":
        out.append(f"  not applied: {terminal(f.detail)}")
        return out
    out.append(f"  applied: {terminal(f.detail)}")
    if f.dynamo:
        out.append("  torch.compile: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in f.dynamo.items()))
    if f.status == "no steps":
        out.append(f"  not measured: {terminal(f.detail)}")
        return out
    verdict = f" -> {f.verdict}" if f.verdict else ""
    out.append(f"  estimated gain {_pct(f.planned.estimate)}, measured {_gain(f)}{verdict}")
    if base_ns and f.step_ns:
        out.append(f"  step {duration(base_ns)} as written, {duration(f.step_ns)} with the fix")
    out.append(f"  numbers: {_numbers(f)}")
    return out


def render_text(result: TryResult) -> str:
    """The result in lines for a terminal."""
    p = result.program
    b = result.budget
    lines = [f"gpuscope try: {terminal(shlex.join(p.argv))}",
             f"  in {terminal(p.cwd)}; {result.rounds} round{'s' if result.rounds != 1 else ''}, the program as "
             f"written and each fix interleaved, collection off, step marks kept; each run stopped at "
             f"{b.steps} steps or at the first step past {b.time_s:g} s; steps timed after {result.warmup} of warm-up"]
    if result.baseline_error:
        lines.append(f"the program as written FAILED: {terminal(result.baseline_error)}")
    elif result.step_ns is not None:
        what = {"torch": "optimizer steps", "gpuscope": "gpuscope.step() marks",
                "module": "calls of the outermost module"}.get(result.step_source, "steps")
        lines.append(f"as written: {duration(result.step_ns)} per step ({what})")
    else:
        lines.append("as written: no steps timed (the program marks none, or ran fewer than the warm-up)")
    lines.append("")
    if not result.fixes:
        lines.append("No fix that gpuscope can apply answers the top findings.")
    for f in result.fixes:
        lines += _fix_block(f, result.step_ns)
        lines.append("")
    if result.needs_edit:
        lines.append("Not tried (needs a code change):")
        for finding in result.needs_edit:
            lines.append(f"  {finding.rule} ({_pct(finding.share)} estimated): {terminal(finding.title)}; "
                         f"at {terminal(finding.location)}")
        lines.append("")
    if result.unconfirmed:
        lines.append(f"Unconfirmed: {', '.join(f.planned.fix.name for f in result.unconfirmed)} (a crash, no gain, "
                     f"or an estimate more than {_pct(result.tolerance)} outside its interval)")
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
