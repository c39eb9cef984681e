"""The diagnosis against what fixes measured, on programs built from the libraries users run
(``tests/workloads/clients/``).

``clients.measured.json`` holds every candidate fix of each client program timed untraced
(interleaved rounds in one process; the device per program); ``client_*`` fixtures are those
programs as written, recorded there with the default collectors, operator shapes and Python
samples (the larger recordings cut to a few dozen steady steps, with the first steps' operators,
after checking that the cut keeps analyze's ranking and its shares within a point). A program
passes when the top finding names the fix that measured the largest gain and estimates it within
±30% (bench/diagnosis_compare.py); where no fix measured more than 5%, when no finding of the main
ranking is above 5%. The ones the analysis still gets wrong are listed with the reason, so that a
change that fixes or breaks one shows here. Programs measured without a fixture kept are checked
for their measurement only. Programs measured with medians only (no per-round times kept) are
compared by the recorded gain.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
    "torch_transformer_lm_fp32": "no_tensor_cores ranks first at 49% where TF32 measured 14.5% (5 rounds on an H200, "
                                 "0% to 27%; 13% alone on an H100): TF32 shortens the GPU's work, but the step only "
                                 "until the host sets the pace. Replaying the recorded steps with those kernels 4x "
                                 "faster saves 0.1% (analysis/diagnosis/host_pace.py): the recorded host took 23.3 ms "
                                 "a step, 23.8 ms in the probe's steps with collection off, where the program alone "
                                 "takes 20.8 ms and its GPU 20.2 ms. Traced three times more, each run timing itself, "
                                 "its processes took 21.1-23.6 ms a step, the recorded steps matching each run's own "
                                 "timer: the traced process's host pace moves from run to run. Neither number lands within 30% of the measured gain; a bound by the host's "
                                 "recorded waits cut a planted GPU-bound float32 GEMM loop from 73% to 5%",
}
# misses seen on recordings too large to keep here (diagnosed on the full recordings; the results
# table in bench/results/diagnosis_clients.md has them): program -> why
UNKEPT_MISSES: dict[str, str] = {
}
# where the fix that measured most stands among each known miss's findings: first (its size missed),
# below another, not found; "nothing measured": no fix measured more than 5%, and a finding is above 5%
RIGHT_FIX_AT = {"torch_transformer_lm_fp32": "first"}

compare_mod = load_bench("diagnosis_compare")


def _row(f) -> dict:  # type: ignore[no-untyped-def]
    return {"rule": f.rule, "title": f.title, "share": f.share, "advisory": f.advisory, "one_time": f.one_time,
            "work_changing": f.work_changing}


def _variants(info: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The variants as the comparison reads them: per-round times where they were kept, else one round
    made from the recorded gain per sample (the medians-only programs)."""
    out = {}
    for name, v in info["variants"].items():
        if v.get("round_s"):
            out[name] = v
        elif v.get("as_written"):
            out[name] = {**v, "round_s": [1.0], "samples_per_iteration": 1}
        else:
            out[name] = {**v, "round_s": [(1 - v["gain"]) * v.get("samples_per_iteration", 1)]}
    return out


def _gains(info: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {fx["name"]: fx for fx in compare_mod.fix_gains(_variants(info))}


def _nothing_measured(info: dict[str, Any]) -> bool:
    """Whether no fix ranked with the others measured more than 5% (then nothing above 5% is the target)."""
    ranked = [fx["gain"] for fx in _gains(info).values() if not fx["work_changing"]]
    return not ranked or max(ranked) <= compare_mod.NOTHING


@pytest.mark.parametrize("program", RECORDED)
def test_top_finding_is_the_fix_that_measured_most(program: str, recorded: Callable[[str], Path]) -> None:
    info = MEASURED[program]
    with Report.open(recorded(f"client_{program}")) as report:
        diag = diagnose(report)
    findings = [_row(f) for f in diag.findings]
    nothing = info["nothing_to_fix"] or _nothing_measured(info)
    verdict = compare_mod.compare(_variants(info), findings, nothing, info["one_time"])
    if program in KNOWN_MISSES:
        assert not verdict.get("pass"), f"{program} now passes: take it off KNOWN_MISSES ({verdict.get('why')})"
        if verdict.get("expect_nothing"):
            where = "nothing measured"
        else:
            best = max((fx for fx in _gains(info).values() if not fx["work_changing"]), key=lambda fx: fx["gain"])
            at = [i for i, f in enumerate(compare_mod.main_ranking(findings, info["one_time"])) if f["rule"] in best["rules"]]
            where = "first" if at and at[0] == 0 else "below" if at else "not found"
        assert where == RIGHT_FIX_AT[program], verdict.get("why")
    else:
        assert verdict.get("pass"), f"{program}: {verdict.get('why')}"
    steady = [f for f in diag.findings if not (f.one_time or f.advisory or f.work_changing)]
    assert sum(f.share for f in steady) <= 1.0 + 1e-9


def test_known_misses_are_recorded_programs() -> None:
    """A miss named here is checked above: its program is measured and its recording kept."""
    assert set(KNOWN_MISSES) == set(RIGHT_FIX_AT)
    assert set(KNOWN_MISSES) <= set(RECORDED)
    assert set(UNKEPT_MISSES) <= set(MEASURED) - set(RECORDED)  # with a recording kept, they move to KNOWN_MISSES


@pytest.mark.parametrize("program", sorted(MEASURED))
def test_each_measured_program_has_a_fix_that_saves_something(program: str) -> None:
    """The measurements themselves: every client program kept here has a fix that measured a gain
    of at least 10%, or none above 5% (then the diagnosis is to find nothing above 5%; the table in
    bench/results/diagnosis_clients.md quotes them)."""
    gains = {name: fx["gain"] for name, fx in _gains(MEASURED[program]).items()}
    assert gains
    assert max(gains.values()) >= 0.10 or _nothing_measured(MEASURED[program]), gains


@pytest.mark.parametrize(("program", "waits"), [("compiled_graph_break", 4.0), ("nanogpt_compiled", 0.0)])
def test_launch_bound_counts_the_waits_inside_the_step(program: str, waits: float,
                                                        recorded: Callable[[str], Path]) -> None:
    """The graph-break program reads a GPU value on the host after each of its 4 blocks, with the rest
    of the step launched after each read; the compiled GPT's step reads nothing in its middle. The
    first's finding names the line and asks for the work between the waits to be captured; the
    second's, the whole step."""
    with Report.open(recorded(f"client_{program}")) as report:
        launch = next(f for f in diagnose(report).findings if f.rule == "launch_bound")
    assert launch.data["mid_step_waits_per_step"] == pytest.approx(waits, abs=0.1)
    assert ("between the step's waits" in launch.title) == (waits > 0)
    assert any("compiled_graph_break.py:51" in e and "holds only the work between" in e
               for e in launch.evidence) == (waits > 0)

