"""The diagnosis against what fixes measured, on programs it was not built around.

Each ``program_*`` fixture is one program of ``tests/workloads/`` as written, recorded on an H100
with the default collectors and Python samples; ``programs.measured.json`` holds every candidate
fix of each program timed untraced (interleaved rounds in one process). A program passes when the
top finding names the fix that measured the largest gain and estimates it within ±30%, or, where
nothing measured more than 5%, when no finding claims more than 5% (bench/diagnosis_compare.py).
The programs the analysis still gets wrong are listed with the reason, so that a change that fixes
or breaks one shows here.
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
MEASURED = json.loads((ROOT / "tests" / "fixtures" / "programs.measured.json").read_text())["programs"]

# program -> why the analysis misses it (kept honest: the test fails when one starts passing)
KNOWN_MISSES: dict[str, str] = {}


compare_mod = load_bench("diagnosis_compare")


def _row(f) -> dict:  # type: ignore[no-untyped-def]
    return {"rule": f.rule, "title": f.title, "share": f.share, "advisory": f.advisory, "one_time": f.one_time,
            "work_changing": f.work_changing}


@pytest.mark.parametrize("program", sorted(MEASURED))
def test_top_finding_is_the_fix_that_measured_most(program: str, recorded: Callable[[str], Path]) -> None:
    info = MEASURED[program]
    with Report.open(recorded(f"program_{program}")) as report:
        diag = diagnose(report)
    findings = [_row(f) for f in diag.findings]
    timed = any(v.get("round_s") for v in info["variants"].values())
    verdict = compare_mod.compare(info["variants"], findings, info["nothing_to_fix"], info["one_time"]) if timed else {}
    passed = bool(verdict.get("pass"))
    if program in KNOWN_MISSES:
        assert not passed, f"{program} now passes: take it off KNOWN_MISSES ({verdict.get('why')})"
    else:
        assert passed, f"{program}: {verdict.get('why')}"
    # savings of the fixes that keep the work never add up to more than the step
    steady = [f for f in diag.findings if not (f.one_time or f.advisory or f.work_changing)]
    assert sum(f.share for f in steady) <= 1.0 + 1e-9
    # a location is the program's code, never gpuscope's or a library's
    for f in diag.findings:
        assert "site-packages" not in f.location and "/gpuscope/" not in f.location


def test_programs_without_marks_get_steps(recorded: Callable[[str], Path]) -> None:
    """Programs that mark no step (no optimizer, no gpuscope.step()) are analysed per iteration."""
    for program in ("bmm_loop", "big_gemms_bf16", "infer_cnn_small", "python_tokenize", "elementwise_chain"):
        with Report.open(recorded(f"program_{program}")) as report:
            diag = diagnose(report)
        (p,) = diag.processes
        assert p.has_steps and len(p.steady) >= 50, program
        assert diag.step_source.startswith("repeating pattern of"), program
