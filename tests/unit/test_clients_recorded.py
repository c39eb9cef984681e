"""The diagnosis against what fixes measured, on programs built from the libraries users run
(``tests/workloads/clients/``).

``clients.measured.json`` holds every candidate fix of each client program timed untraced
(interleaved rounds in one process, on an H200); ``client_*`` fixtures are those programs as
written, recorded there with the default collectors and Python samples. A program passes when the
top finding names the fix that measured the largest gain and estimates it within ±30%
(bench/diagnosis_compare.py). The ones the analysis still gets wrong are listed with the reason,
so that a change that fixes or breaks one shows here. Programs measured without a fixture kept
are checked for their measurement only.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from bench_module import load_bench

from gpuscope.analysis.diagnosis import diagnose
from gpuscope.trace.report import Report

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
MEASURED = json.loads((FIXTURES / "clients.measured.json").read_text())["programs"]
RECORDED = sorted(p for p in MEASURED if (FIXTURES / f"client_{p}.gpuscope.gz").exists())

# program -> why the analysis misses it (kept honest: the test fails when one starts passing)
KNOWN_MISSES: dict[str, str] = {
    "eager_norm_chain": "the top finding names torch.compile (unfused_elementwise) but estimates 40% where it "
                        "measured 69%: the fusion model prices the elementwise and normalization chains at the "
                        "memory roof, not what compile also fuses around the matrix products",
    "hf_bert_infer": "launch_bound ranks first at 59% and a CUDA graph through torch.compile(mode='reduce-overhead') "
                     "measured best (27%, an H100): the right fix, its estimate 2.2x: the overhead probe's "
                     "iterations with collection off took 8.95 ms against 4.93 ms untraced, so the step without "
                     "the profiler is taken as 10.4 ms",
}
# where the fix that measured most stands among each known miss's findings: first (its size missed),
# below another, or not found
RIGHT_FIX_AT = {"eager_norm_chain": "first", "hf_bert_infer": "first"}

compare_mod = load_bench("diagnosis_compare")


def _row(f) -> dict:  # type: ignore[no-untyped-def]
    return {"rule": f.rule, "title": f.title, "share": f.share, "advisory": f.advisory, "one_time": f.one_time,
            "work_changing": f.work_changing}


@pytest.mark.parametrize("program", RECORDED)
def test_top_finding_is_the_fix_that_measured_most(program: str, recorded: Callable[[str], Path]) -> None:
    info = MEASURED[program]
    with Report.open(recorded(f"client_{program}")) as report:
        diag = diagnose(report)
    findings = [_row(f) for f in diag.findings]
    verdict = compare_mod.compare(info["variants"], findings, info["nothing_to_fix"], info["one_time"])
    if program in KNOWN_MISSES:
        assert not verdict.get("pass"), f"{program} now passes: take it off KNOWN_MISSES ({verdict.get('why')})"
        variants = info["variants"]
        best = min((v for n, v in variants.items() if n != "as_written" and v.get("median_s")), key=lambda v: v["median_s"])
        at = [i for i, f in enumerate(findings) if f["rule"] in best["rules"]]
        where = "first" if at and at[0] == 0 else "below" if at else "not found"
        assert where == RIGHT_FIX_AT[program]
    else:
        assert verdict.get("pass"), f"{program}: {verdict.get('why')}"
    steady = [f for f in diag.findings if not (f.one_time or f.advisory or f.work_changing)]
    assert sum(f.share for f in steady) <= 1.0 + 1e-9


@pytest.mark.parametrize("program", sorted(MEASURED))
def test_each_measured_program_has_a_fix_that_saves_something(program: str) -> None:
    """The measurements themselves: every client program kept here has a fix that measured a gain
    of at least 10% (the table in bench/RESULTS.md quotes them)."""
    variants = MEASURED[program]["variants"]
    base = variants["as_written"]["median_s"]
    gains = {name: 1 - v["median_s"] / base for name, v in variants.items() if name != "as_written" and v.get("median_s")}
    assert max(gains.values()) >= 0.10, gains
