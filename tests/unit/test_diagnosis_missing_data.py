"""Reports that lack what some rules need: each of those rules says why in one line, the others run."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from diagnosis_sim import Sim
from report_builder import ReportBuilder
from gpuscope.analysis.diagnosis import diagnose
from gpuscope.reporters import diagnosis_formats
from gpuscope.trace.report import Report


def _skipped(diag) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {s.rule: s.reason for s in diag.skipped}


def test_a_cpu_only_report(tmp_path: Path) -> None:
    """Without GPU operations the CPU side is diagnosed; the GPU rules say why they did not run."""
    b = ReportBuilder(tmp_path / "cpu.gpuscope")
    b.range("Net", 1_000, 5_000, 1, category="forward")
    with b.open(not_recorded={"cuda": "no NVIDIA GPU driver was found"}) as report:
        diag = diagnose(report)
    (p,) = diag.processes
    assert not p.has_steps and p.mean_parts()["cpu_forward"] == p.mean_parts()["duration_ns"] == 4_000
    assert diag.step_source == "no steps"
    reasons = _skipped(diag)
    assert len(reasons) >= 12
    for reason in reasons.values():
        assert "\n" not in reason
    assert reasons["host_sync"].startswith("no GPU operations in this report")
    assert reasons["hot_line"].startswith("no Python stack samples")
    assert any("whole" in n or "one window" in n for n in diag.breakdown_table().notes)
    for fmt, render in diagnosis_formats().items():
        text = render(diag)
        if fmt == "json":  # each rule with its reason
            assert "host_sync" in text and "no GPU operations in this report" in text, fmt
        else:  # the GPU rules in one line
            assert "GPU rules" in text and "no GPU operations recorded" in text, fmt


def test_without_steps_the_capture_is_one_step(recorded: Callable[[str], Path]) -> None:
    """A program without marks whose launches do not repeat (a handful of GEMMs and convolutions)."""
    with Report.open(recorded("gemm_conv")) as report:
        diag = diagnose(report)
    (p,) = diag.processes
    assert not p.has_steps and p.steps["step"].tolist() == ["all"]
    assert _skipped(diag)["startup"].startswith("no steps in this report")
    assert all(not f.one_time for f in diag.findings)
    assert "whole capture" in " ".join(diag.breakdown_table().notes)
    assert "do not repeat at least 4 times" in diag.step_source
    assert any("set-up before its first GPU launch took 3.280 s" in n for n in diag.notes)


def test_without_torch_cpu_samples_nvml_or_roofline(recorded: Callable[[str], Path]) -> None:
    with Report.open(recorded("mlp_default")) as report:
        diag = diagnose(report)
    reasons = _skipped(diag)
    assert reasons["data_loader"].startswith("no PyTorch ranges in this report")
    assert "nvml" in reasons["gpu_memory"]
    assert "roofline" in reasons["below_roofline"]
    assert {"launch_bound", "hot_line", "no_tensor_cores"} <= {f.rule for f in diag.findings}
    cpu = next(f for f in diag.findings if f.rule == "hot_line")
    assert any("--trace cpu" in e for e in cpu.evidence)
    assert any("no bound class" in n for n in diag.notes)


def test_without_sync_sites_the_line_is_unknown(tmp_path: Path) -> None:
    """CUPTI's sync records alone (reports from before sync sites): the finding, without its line."""
    sim = Sim(tmp_path / "r.gpuscope")
    for _ in range(5):
        for _ in range(10):
            sim.kernel("work", 400_000)
        sim.sync(("/home/user/project/train.py", 42, "step"), site=False)
        sim.cpu(3_000_000)
        sim.step()
    with sim.open() as report:
        diag = diagnose(report)
    sync = diag.findings[0]
    assert sync.rule == "host_sync" and sync.location == "(line not recorded)"
    assert any("no sync_site rows" in e for e in sync.evidence)


def test_a_sync_after_the_gpu_went_idle_costs_nothing(recorded: Callable[[str], Path]) -> None:
    """The GPT loop synchronizes every step, but its host is the slower side: the GPU is idle before
    each torch.cuda.synchronize(), so no queue drains and there is nothing to gain."""
    with Report.open(recorded("gpt_eager")) as report:
        diag = diagnose(report)
    assert diag.processes[0].mean_parts()["idle_sync"] < 0.002 * diag.processes[0].mean_parts()["duration_ns"]
    assert not [f for f in diag.findings if f.rule == "host_sync"]


def test_a_failing_roofline_is_said_and_the_rest_runs(recorded: Callable[[str], Path],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(report: Report, *args: object) -> None:
        raise RuntimeError("no ceilings for this GPU")

    monkeypatch.setattr("gpuscope.analysis.roofline.points.kernel_points", broken)
    with Report.open(recorded("mlp_default")) as report:
        diag = diagnose(report)
    assert "RuntimeError: no ceilings for this GPU" in _skipped(diag)["below_roofline"]
    assert any("no ceilings for this GPU" in n for n in diag.notes)
    assert diag.findings[0].rule == "launch_bound"
