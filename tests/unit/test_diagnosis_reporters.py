"""``gpuscope analyze``'s outputs on one recorded report against golden files, and what every
output must carry.

Set GPUSCOPE_UPDATE_GOLDEN=1 to rewrite the golden files after a deliberate change; review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

import pytest

from conftest import GOLDEN
from gpuscope.analysis.diagnosis import Diagnosis, diagnose
from gpuscope.analysis.diagnosis.breakdown import PARTS
from gpuscope.reporters import diagnosis_formats
from gpuscope.reporters.findings_table import render_short
from gpuscope.trace.report import Report

SUFFIX = {"table": "txt", "json": "json", "markdown": "md"}


@pytest.fixture
def mlp(recorded: Callable[[str], Path]) -> Diagnosis:
    with Report.open(recorded("mlp_default")) as report:
        return diagnose(report)


@pytest.mark.parametrize("fmt", sorted(SUFFIX))
def test_output_matches_golden(fmt: str, mlp: Diagnosis) -> None:
    text = diagnosis_formats()[fmt](mlp)
    golden = GOLDEN / f"mlp_default.analyze.{SUFFIX[fmt]}"
    if os.environ.get("GPUSCOPE_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()


@pytest.mark.parametrize("fmt", sorted(SUFFIX))
def test_every_output_carries_the_ranked_findings(fmt: str, mlp: Diagnosis) -> None:
    text = diagnosis_formats()[fmt](mlp)
    positions = [text.index(f.rule) for f in mlp.findings]
    assert positions == sorted(positions)
    words = " ".join(text.split())  # the table's notes wrap at its width
    for s in mlp.skipped:
        assert s.reason in words


def test_json_carries_integer_nanoseconds_that_add_up(mlp: Diagnosis) -> None:
    doc = json.loads(diagnosis_formats()["json"](mlp))
    (p,) = doc["processes"]
    for step in p["steps"]:
        assert sum(step[k] for k in PARTS) == step["duration_ns"]
    first = doc["findings"][0]
    assert first["rule"] == "launch_bound" and isinstance(first["saving_ns"], int)
    assert 0 < first["share"] < 1 and first["fix"] and first["evidence"]


def test_short_form_for_the_end_of_profile(mlp: Diagnosis, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "1000")
    text = render_short(mlp)
    lines = text.splitlines()
    assert lines[0].startswith("Step time (step 2.4 ms, process 767): GPU busy 28%; idle: launch 42%, cpu 31%")
    assert len(lines) == 1 + 2 * 3 and lines[1].startswith("  1. Launch-bound")
    monkeypatch.setenv("COLUMNS", "80")  # the same words, wrapped to the terminal
    narrow = render_short(mlp)
    assert max(len(line) for line in narrow.splitlines()) <= 80 < max(len(line) for line in lines)
    assert narrow.split() == text.split()


def test_profile_says_a_failing_diagnosis_in_one_line(recorded: Callable[[str], Path],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuscope.run import summary as profile

    def broken(report: Report) -> None:
        raise RuntimeError("boom")

    with Report.open(recorded("mlp_default")) as report:
        steps, text = profile._diagnosis(report)
        assert text.startswith("Step time (step 2.4 ms") and steps == (
            "4 steps found from ranges named 'step' (no step marks were recorded): 4 recorded (1 warm-up)")
        monkeypatch.setattr("gpuscope.analysis.diagnosis.diagnose", broken)
        steps, text = profile._diagnosis(report)
        assert steps is None
    assert text.startswith("gpuscope: the diagnosis failed (RuntimeError: boom); try: gpuscope analyze ")
    assert text.count("\n") == 1
