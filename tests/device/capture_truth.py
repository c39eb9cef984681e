"""The kernels of each step of a run, and whether a report captured with ``--steps FIRST-LAST``
holds exactly the kernels of those steps.

Shared by check_capture_range.py (on the GPU machine, against a full run made just before) and
tests/unit/test_recorded_capture_steps.py (in CI, against the recording it committed), so the
check is written once.

The truth is a full run of the same program: for each step, its kernel count as step_sum lists
it and the multiset of the names of the kernels launched in it. :func:`to_facts` turns it into
the JSON of ``capture_steps.facts.json`` (kernel names interned in one list), :func:`from_facts`
reads it back. The reports hold one process.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from gpuscope.analysis.ops.attribution import ops_table
from gpuscope.analysis.steps.source import op_steps_table, step_source
from gpuscope.analysis.steps.table import step_sum
from gpuscope.trace.report import Report
from gpuscope.trace.trim import capture_limited

# names listed per differing step in a problem sentence; the rest are counted
_NAMES_SHOWN = 3


@dataclass(frozen=True)
class StepKernels:
    """What each step of a run launched: its kernel count (step_sum) and its kernel names."""

    counts: dict[int, int]
    names: dict[int, Counter[str]]

    def names_in(self, first: int, last: int) -> Counter[str]:
        """Return the kernel names of steps ``first`` to ``last`` together."""
        out: Counter[str] = Counter()
        for step in range(first, last + 1):
            out += self.names.get(step, Counter())
        return out


def step_kernels(report: Report) -> StepKernels:
    """Return the steps step_sum lists with their kernel counts, and the kernel names launched in each."""
    counts = {int(r["Step"]): int(r["Kernels"]) for r in step_sum(report).records() if str(r["Step"]).isdigit()}
    names: dict[int, Counter[str]] = {}
    source = step_source(report)
    if source.kind is not None:
        for step, name in report.sql(
                f"""SELECT x.step, s.value FROM {op_steps_table(report, source)} x
                    JOIN {ops_table(report)} o USING (op_id) JOIN string s ON s.id = o.name_id
                    WHERE o.kind = 'kernel'"""):
            names.setdefault(int(step), Counter())[name] += 1
    return StepKernels(counts, names)


def kernel_names(report: Report) -> Counter[str]:
    """Return the names of every kernel in the report (a multiset)."""
    return Counter(name for (name,) in report.sql(
        "SELECT s.value FROM kernel k JOIN kernel_config c ON c.id = k.config_id JOIN string s ON s.id = c.name_id"))


def kernels_outside_windows(report: Report) -> int:
    """Return how many kernels were launched (as the analyses place launches) outside every
    capture window of their process; 0 for a report recorded whole (no windows, not limited)."""
    if not report.count("capture_window") and not capture_limited(report.meta):
        return 0
    return int(report.sql(
        f"""SELECT count(*) FROM {ops_table(report)} o WHERE o.kind = 'kernel' AND NOT EXISTS (
                SELECT 1 FROM capture_window w WHERE w.pid = o.pid AND o.launch_ns >= w.start_ns
                  AND (w.end_ns IS NULL OR o.launch_ns <= w.end_ns))""")[0][0])


def windows(report: Report) -> dict[str, Any]:
    """Return the report's capture windows in short: how many, their reasons, what trimming removed."""
    reasons = sorted({reason for (reason,) in report.sql("SELECT reason FROM capture_window")})
    return {"windows": report.count("capture_window"), "reasons": reasons,
            "trimmed": report.meta.get("capture_trimmed", {})}


def to_facts(truth: StepKernels, **about: Any) -> dict[str, Any]:
    """Return the JSON form of ``truth`` (``about``: what run it came from, kept as given)."""
    names = sorted({n for c in truth.names.values() for n in c})
    index = {n: i for i, n in enumerate(names)}
    steps = {str(s): {"kernels": truth.counts.get(s, 0),
                      "names": {str(index[n]): c for n, c in sorted(truth.names.get(s, Counter()).items())}}
             for s in sorted(set(truth.counts) | set(truth.names))}
    return {**about, "kernel_names": names, "steps": steps}


def dump_facts(facts: dict[str, Any]) -> str:
    """Return ``facts`` as JSON text with one line per kernel name and per step (short diffs)."""
    def block(key: str, items: list[str], close: str) -> str:
        if not items:
            return f' "{key}": {close}'
        return f' "{key}": {close[0]}\n  ' + ",\n  ".join(items) + f"\n {close[1]}"

    head = [f" {json.dumps(k)}: {json.dumps(v)}" for k, v in facts.items() if k not in ("kernel_names", "steps")]
    names = block("kernel_names", [json.dumps(n) for n in facts["kernel_names"]], "[]")
    steps = block("steps", [f"{json.dumps(s)}: {json.dumps(v)}" for s, v in facts["steps"].items()], "{}")
    return "{\n" + ",\n".join([*head, names, steps]) + "\n}\n"


def from_facts(facts: dict[str, Any]) -> StepKernels:
    """Return the :class:`StepKernels` of facts written by :func:`to_facts`."""
    names = facts["kernel_names"]
    counts = {int(s): int(v["kernels"]) for s, v in facts["steps"].items()}
    per_step = {int(s): Counter({names[int(i)]: int(c) for i, c in v["names"].items()})
                for s, v in facts["steps"].items() if v["names"]}
    return StepKernels(counts, per_step)


def _difference(got: Counter[str], want: Counter[str]) -> str:
    """Say in a few words how ``got`` differs from ``want``: names missing and names extra."""
    parts = []
    for label, diff in (("missing", want - got), ("extra", got - want)):
        if diff:
            shown = ", ".join(f"{n[:60]} x{c}" for n, c in diff.most_common(_NAMES_SHOWN))
            more = len(diff) - _NAMES_SHOWN
            parts.append(f"{label} {shown}" + (f" and {more} more names" if more > 0 else ""))
    return "; ".join(parts)


def check_steps(report: Report, truth: StepKernels, first: int, last: int) -> dict[str, Any]:
    """Check that ``report`` (captured with ``--steps first-last``) holds the kernels of exactly
    those steps, as ``truth`` (a full run) has them.

    Return the numbers (``steps_seen``; ``kernels_per_step``: step -> [captured, full run];
    ``names_differ``: the steps whose kernel names differ; ``kernels`` and ``expected_kernels``:
    in the whole report and in the steps of the full run; ``outside_windows``; windows and
    trimmed counts), ``problems`` (one sentence each) and ``ok`` (no problems).
    """
    want = list(range(first, last + 1))
    seen = step_kernels(report)
    names = kernel_names(report)
    expected = truth.names_in(first, last)
    outside = kernels_outside_windows(report)
    shape = windows(report)
    problems = [f"the full run has no step {s}" for s in want if s not in truth.counts]
    if sorted(seen.counts) != want:
        problems.append(f"step_sum lists steps {sorted(seen.counts)}, not {first} to {last}")
    differ = []
    for s in want:
        got, full = seen.counts.get(s), truth.counts.get(s)
        if s in seen.counts and got != full:
            problems.append(f"step {s}: {got} kernels, the full run {full}")
        if seen.names.get(s, Counter()) != truth.names.get(s, Counter()):
            differ.append(s)
            problems.append(f"step {s}: kernel names differ from the full run's: "
                            f"{_difference(seen.names.get(s, Counter()), truth.names.get(s, Counter()))}")
    in_steps = sum(sum(c.values()) for c in seen.names.values())
    if in_steps != sum(names.values()):
        problems.append(f"{sum(names.values()) - in_steps} of the report's {sum(names.values())} kernels "
                        "belong to no listed step")
    if names != expected and not differ:
        problems.append(f"the report's kernels differ from those of steps {first}-{last} of the full run: "
                        f"{_difference(names, expected)}")
    if not shape["windows"]:
        problems.append("the report has no capture window")
    if outside:
        problems.append(f"{outside} kernels were launched outside every capture window")
    return {"ok": not problems, "steps_seen": sorted(seen.counts),
            "kernels_per_step": {s: [seen.counts.get(s), truth.counts.get(s)]
                                 for s in sorted(set(want) | set(seen.counts))},
            "names_differ": differ, "kernels": sum(names.values()), "expected_kernels": sum(expected.values()),
            "outside_windows": outside, **shape, "problems": problems}
