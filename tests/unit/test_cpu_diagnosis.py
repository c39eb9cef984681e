"""The CPU-side diagnosis on reports recorded without a GPU (tests/workloads/cpu, recorded by
bench/diagnosis_cpu.py with the default collectors of a machine without a GPU): the planted
problem's rule comes first, at the program's own line; the parts of every step add up to it; no
location is in gpuscope or a library; the balanced program has nothing above 5%."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import unpack_fixture

from gpuscope.analysis.diagnosis import diagnose
from gpuscope.analysis.diagnosis.cpu_breakdown import CPU_PARTS, CpuBreakdown
from gpuscope.analysis.diagnosis.cpu_context import CpuContext
from gpuscope.analysis.diagnosis.cpu_diagnosis import CpuDiagnosis
from gpuscope.analysis.diagnosis.rules.hot_line import op_repeats
from gpuscope.reporters import diagnosis_formats
from gpuscope.reporters.findings_table import render_short
from gpuscope.trace.report import Report

WORKLOADS = Path(__file__).resolve().parents[1] / "workloads" / "cpu"
PROGRAMS = ("dataloader_starved", "infer_hot_line", "one_thread", "balanced")
NOTHING = 0.05


def _line_of(program: str, marker: str) -> str:
    """``program.py:N``: the line of the workload that carries ``marker`` in a comment."""
    lines = (WORKLOADS / f"{program}.py").read_text().splitlines()
    return f"{program}.py:{next(i for i, text in enumerate(lines, 1) if marker in text)}"


@pytest.fixture(scope="module")
def diagnoses(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, CpuDiagnosis]]:
    out = {}
    directory = tmp_path_factory.mktemp("cpu")
    for name in PROGRAMS:
        with Report.open(unpack_fixture(f"cpu_{name}", directory)) as report:
            diag = diagnose(report)
        assert isinstance(diag, CpuDiagnosis)
        out[name] = diag
    yield out


def _actionable(diag: CpuDiagnosis) -> list:  # type: ignore[type-arg]
    return [f for f in diag.findings if not f.advisory]


@pytest.mark.parametrize("program, rule, marker", [
    ("dataloader_starved", "data_loader", "the per-sample Python that costs"),
    ("infer_hot_line", "hot_line", "the hot line"),
])
def test_the_planted_problem_comes_first_at_its_line(diagnoses: dict[str, CpuDiagnosis], program: str, rule: str,
                                                     marker: str) -> None:
    top = _actionable(diagnoses[program])[0]
    assert top.rule == rule
    assert _line_of(program, marker) in top.location
    assert top.share > NOTHING


def test_the_data_loader_finding_recommends_workers(diagnoses: dict[str, CpuDiagnosis]) -> None:
    top = _actionable(diagnoses["dataloader_starved"])[0]
    assert top.data["in_process"] and top.data["workers"] >= 1
    assert f"num_workers={top.data['workers']}" in top.fix
    assert top.saving_ns <= top.data["wait_ns"]


def test_one_thread_on_two_cores_leaves_a_core_idle(diagnoses: dict[str, CpuDiagnosis]) -> None:
    """Recorded with one core free: the operators' time, at 80% of a perfect speedup on it."""
    top = _actionable(diagnoses["one_thread"])[0]
    assert top.rule == "cpu_idle_cores" and "one_thread.py:" in top.location
    assert top.data["cores"] == 2 and top.data["used_cores"] < 1.3 and top.data["other_cores"] < 0.5
    assert "torch.set_num_threads(" in top.fix and 0.2 < top.share < 0.5


@pytest.mark.parametrize("program", PROGRAMS)
def test_parts_add_up_to_every_step(diagnoses: dict[str, CpuDiagnosis], program: str) -> None:
    (p,) = diagnoses[program].processes
    assert isinstance(p, CpuBreakdown) and len(p.steps)
    assert (p.steps[list(CPU_PARTS)].sum(axis=1) == p.steps["duration_ns"]).all()
    assert (p.steps[list(CPU_PARTS)] >= 0).all().all()
    mean = p.mean_parts()
    assert sum(mean[k] for k in CPU_PARTS) == pytest.approx(mean["duration_ns"])


@pytest.mark.parametrize("program", PROGRAMS)
def test_locations_are_the_programs_code(diagnoses: dict[str, CpuDiagnosis], program: str) -> None:
    for f in diagnoses[program].findings:
        assert "site-packages" not in f.location and "<frozen" not in f.location, f
        assert "gpuscope/capture" not in f.location and "gpuscope/analysis" not in f.location, f
        assert f.location.split(":")[0].endswith(".py") or f.advisory, f


def test_the_balanced_program_has_nothing_to_fix(diagnoses: dict[str, CpuDiagnosis]) -> None:
    assert all(f.share < NOTHING for f in _actionable(diagnoses["balanced"]))


def test_steps_come_from_the_optimizer_and_start_up_is_left_out(diagnoses: dict[str, CpuDiagnosis]) -> None:
    diag = diagnoses["dataloader_starved"]
    doc = json.loads(diagnosis_formats()["json"](diag))
    assert doc["analysis"] == "cpu" and doc["parts"] == list(CPU_PARTS)
    assert doc["step_source"] == "PyTorch's marks at the end of optimizer.step()"
    (p,) = doc["processes"]
    assert p["has_steps"] and p["steady_steps"] >= 10
    assert p["mean_ns"]["cpu_data"] > 0 and p["mean_ns"]["cpu_backward"] > 0
    # start-up is a note with its size, not a finding: no step can save it
    assert not [f for f in diag.findings if f.rule == "startup"]
    assert p["startup"]["startup_ns"] > 0
    assert any("start-up before the first step" in n for n in diag.notes)


@pytest.mark.parametrize("fmt", ["table", "json", "markdown"])
def test_every_format_shows_the_cpu_breakdown_and_findings(diagnoses: dict[str, CpuDiagnosis], fmt: str) -> None:
    text = diagnosis_formats()[fmt](diagnoses["dataloader_starved"])
    assert "data_loader" in text
    # the GPU rules not checked: named one by one in json, one line in the text formats
    assert ("host_sync" in text) if fmt == "json" else ("GPU rules" in text and "not checked" in text)
    assert ("Data loading" in text) if fmt != "json" else ('"cpu_data"' in text)


def test_the_profile_summary_shows_the_cpu_breakdown(diagnoses: dict[str, CpuDiagnosis]) -> None:
    text = render_short(diagnoses["dataloader_starved"])
    assert text.startswith("CPU step time (step ") and "data " in text
    assert "1. The loop waits for its DataLoader" in text


def test_a_comprehension_of_plain_python_is_the_lines_own_python(diagnoses: dict[str, CpuDiagnosis]) -> None:
    """The argmax picked in Python over the logits calls no operator per item: its line is blamed for
    its own Python, not for per-item library calls."""
    top = _actionable(diagnoses["infer_hot_line"])[0]
    assert not top.data["per_item"] and "per-element Python" in top.fix


# Recorded by bench/diagnosis_cpu.py with the defaults of a machine without a GPU (torch-shapes: the
# operators of short sample windows only), programs without step marks among them.
ORDINARY = ("infer_transformer", "train_small", "preprocess_loop", "one_thread_shapes")


@pytest.fixture(scope="module")
def ordinary(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, CpuDiagnosis]]:
    out = {}
    directory = tmp_path_factory.mktemp("ordinary")
    for name in ORDINARY:
        with Report.open(unpack_fixture(f"cpu_{name}", directory)) as report:
            diag = diagnose(report)
        assert isinstance(diag, CpuDiagnosis)
        out[name] = diag
    yield out


@pytest.mark.parametrize("program", ["infer_transformer", "train_small"])
def test_ordinary_loops_with_nothing_to_fix_have_no_finding(ordinary: dict[str, CpuDiagnosis], program: str) -> None:
    """Measured: no candidate fix gains 5% (bench/RESULTS.md); start-up is a note."""
    diag = ordinary[program]
    assert all(f.share < NOTHING for f in _actionable(diag)), diag.findings
    assert not [f for f in diag.findings if f.rule == "startup"]
    assert any("start-up before the first step" in n for n in diag.notes)


def test_an_inference_loop_without_marks_is_stepped_by_its_model_calls(ordinary: dict[str, CpuDiagnosis]) -> None:
    diag = ordinary["infer_transformer"]
    assert "each top-level call of TinyLM" in diag.step_source and "infer_transformer.py:" in diag.step_source
    (p,) = diag.processes
    assert p.has_steps and len(p.steady) >= 100


def test_python_preprocessing_is_found_at_the_loops_line(ordinary: dict[str, CpuDiagnosis]) -> None:
    top = _actionable(ordinary["preprocess_loop"])[0]
    assert top.rule == "hot_line" and _line_of("preprocess_loop", "normalize(s) for s in") in top.location
    assert top.share > 0.5 and not top.data["per_item"]


def test_idle_cores_counts_the_sampled_operators_per_recorded_step(ordinary: dict[str, CpuDiagnosis]) -> None:
    """With torch-shapes the operators of a few steps are recorded: their time is per recorded step,
    not spread over every step (measured: two threads 38% faster)."""
    top = _actionable(ordinary["one_thread_shapes"])[0]
    assert top.rule == "cpu_idle_cores" and 0.2 < top.share < 0.5


def test_loading_that_waits_is_hidden_by_a_worker_even_on_a_busy_machine(tmp_path: Path) -> None:
    """tests/workloads/cpu/try_dataloader.py, recorded on the 2-core machine with about one core busy
    with other programs: its Dataset sleeps (a file read), so its DataLoader calls ran on a core a few
    percent of their time, and one worker hides nearly all of the wait instead of taking turns with
    the loop for the one free core (`gpuscope try` measured 52% saved there)."""
    with Report.open(unpack_fixture("cpu_try_dataloader", tmp_path)) as report:
        diag = diagnose(report)
    top = _actionable(diag)[0]
    assert top.rule == "data_loader" and top.data["other_cores"] > 0.5
    assert top.data["loader_on_cpu"] < 0.2 and top.data["workers"] == 1
    assert top.saving_ns >= 0.8 * top.data["wait_ns"]
    assert any("ran on a core" in e and "without taking cores" in e for e in top.evidence)


def test_recordings_without_the_loaders_cpu_time_count_the_wait_as_cpu_work(diagnoses: dict[str, CpuDiagnosis]) -> None:
    top = _actionable(diagnoses["dataloader_starved"])[0]
    assert top.data["loader_on_cpu"] is None and not any("ran on a core" in e for e in top.evidence)


def test_per_item_calls_are_counted_in_a_loop_faster_than_the_sampler(tmp_path: Path) -> None:
    """A loop of 8 small matmuls per stack with no step marks, recorded on a busy CPU: its turns are
    far shorter than the sampling interval, so its sampled stacks repeat only as an alias of the
    sampler and give no steps (tests/unit/test_step_aliasing.py); the whole capture is one step. The
    recorded operators still count the 8 calls per stack (the window skips the set-up on its own),
    so the line is per-item calls, not the loop's own Python."""
    with Report.open(unpack_fixture("cpu_matmul_loop_stepped_by_stacks", tmp_path)) as report:
        diag = diagnose(report)
        p = CpuContext(report).processes[0]
    assert isinstance(diag, CpuDiagnosis) and diag.step_source == "no steps"
    assert len(p.ops) >= 100
    assert op_repeats(p) == pytest.approx(8, abs=0.2)
    top = _actionable(diag)[0]
    assert top.rule == "hot_line" and top.data["per_item"], top
    assert "mm.py:7 <listcomp>" in top.location and "about 8 calls" in " ".join(top.evidence)
