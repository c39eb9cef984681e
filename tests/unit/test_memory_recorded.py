"""`--trace memory` on an H100, recorded (tests/device/check_memory.py): the report's numbers against
what the program itself measured with torch.cuda (the .truth.json beside each fixture)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from gpuscope.analysis.diagnosis import diagnose
from gpuscope.analysis.memory.summaries import memory_sum
from gpuscope.trace.report import Report

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _rows(report: Report) -> list[dict[str, object]]:
    return memory_sum(report).records()


def test_peak_and_the_planted_activation_match_torch(recorded: Callable[[str], Path]) -> None:
    truth = json.loads((FIXTURES / "memory_planted.truth.json").read_text())
    with Report.open(recorded("memory_planted")) as report:
        rows = _rows(report)
    peak = [r["Bytes"] for r in rows if r["Section"] == "peak allocated" and r["Device"] == "gpu0"]
    assert peak == [truth["max_memory_allocated"]]  # torch.cuda.max_memory_allocated(), to the byte
    layer = [r["Bytes"] for r in rows if r["Section"] == "layer" and r["Name"] == truth["planted_layer"]]
    assert layer and abs(layer[0] - truth["planted_bytes"]) <= 0.01 * truth["planted_bytes"]


def test_out_of_memory_state_and_finding(recorded: Callable[[str], Path]) -> None:
    truth = json.loads((FIXTURES / "memory_oom.truth.json").read_text())
    with Report.open(recorded("memory_oom")) as report:
        rows = _rows(report)
        findings = diagnose(report).findings
    requested = [r["Bytes"] for r in rows if r["Section"] == "out of memory: requested"]
    assert len(requested) == 1 and requested[0] >= truth["requested_bytes"]
    live = [[r["Name"], r["Bytes"]] for r in rows if r["Section"] == "live at out of memory"]
    assert live[:2] == truth["live"]
    assert any(f.rule == "out_of_memory" for f in findings)
