"""``gpuscope profile --steps 10-20`` captures the kernels of exactly those steps.

The check is tests/device/capture_truth.py's ``check_steps``, as check_capture_range.py runs it on
the GPU machine: step_sum lists steps 10 to 20, each with the kernel count and kernel names of the
same step in a full run of the program, and no kernel lies outside the capture window.

- on the recording: tests/device/workloads/capture_steps.py profiled with ``--steps 10-20``
  (``capture_steps.gpuscope.gz``) and the full run's kernels per step (``capture_steps.facts.json``),
  both from ``tests/device/run_all.sh capture`` (``$OUT/capture/``);
- on hand-made runs of 30 steps, trimmed by the report writer to a window, so that the check
  itself is tested, and seen to fail when a step, a kernel or a window is wrong.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable

import duckdb
import pytest
from conftest import FIXTURES
from report_builder import ReportBuilder

from gpuscope.trace.report import Report

sys.path.insert(0, str(Path(__file__).parents[1] / "device"))
from capture_truth import StepKernels, check_steps, from_facts, step_kernels, to_facts  # noqa: E402

FIRST, LAST = 10, 20
RECORDED = FIXTURES / "capture_steps.gpuscope.gz"
FACTS = FIXTURES / "capture_steps.facts.json"


@pytest.mark.skipif(not RECORDED.exists(), reason=(
    "tests/fixtures/capture_steps.gpuscope.gz is not recorded yet: run `bash tests/device/run_all.sh capture` "
    "on a GPU machine and copy $OUT/capture/capture_steps.gpuscope.gz and capture_steps.facts.json here"))
def test_recorded_steps_10_to_20_hold_exactly_the_kernels_of_those_steps(recorded: Callable[[str], Path]) -> None:
    facts = json.loads(FACTS.read_text())
    truth = from_facts(facts)
    assert facts["capture"] == f"--steps {FIRST}-{LAST}"
    assert sorted(truth.counts) == list(range(1, 31))  # the full run: 30 steps
    with Report.open(recorded("capture_steps")) as r:
        assert r.meta["capture_range"]["description"] == f"steps {FIRST} to {LAST}"
        result = check_steps(r, truth, FIRST, LAST)
    assert result["ok"], "\n".join(result["problems"])
    assert result["steps_seen"] == list(range(FIRST, LAST + 1))
    assert all(captured == full for captured, full in result["kernels_per_step"].values())
    assert result["names_differ"] == [] and result["outside_windows"] == 0
    assert result["kernels"] == result["expected_kernels"] > 0


# -- hand-made runs ----------------------------------------------------------------------------

STEPS = 30
STEP_NS = 10_000  # step k is launched in ((k-1) * STEP_NS, k * STEP_NS); its mark at k * STEP_NS


def _names(step: int) -> list[str]:
    """The kernels a step launches: the same each step, and one more in the first."""
    return ["init"] * (step == 1) + ["gemm", "relu", "gemm", "relu", "gemm", "sgd"]


def _run(path: Path, window: tuple[int, int] | None = None,
         changed: dict[int, list[str]] | None = None) -> Path:
    """Write a run of STEPS steps; with ``window`` (marks) limited to the steps between those marks,
    as ``--steps`` limits one; ``changed`` replaces the kernels of some steps."""
    b = ReportBuilder(path)
    for step in range(1, STEPS + 1):
        t0 = (step - 1) * STEP_NS
        for i, name in enumerate((changed or {}).get(step, _names(step))):
            launch = t0 + 100 + 200 * i
            b.kernel(name, launch + 50, launch + 150, queued=launch)
        b.mark("step", step * STEP_NS, 1)  # PyTorch's mark at the end of optimizer.step()
    if window is not None:
        b.writer.set_meta(capture_range={"limited": True, "description": f"steps {FIRST} to {LAST}",
                                         "spec": {"first_step": FIRST, "last_step": LAST}})
        b.writer.con.execute("INSERT INTO capture_window VALUES (?, ?, ?, ?)",
                             [b.pid, window[0] * STEP_NS, window[1] * STEP_NS, f"step {FIRST} to step {LAST}"])
    b.open().close()  # the writer trims the report to the window
    return path


@pytest.fixture(scope="module")
def truth(tmp_path_factory: pytest.TempPathFactory) -> StepKernels:
    """The kernels per step of the hand-made run recorded whole."""
    with Report.open(_run(tmp_path_factory.mktemp("full") / "full.gpuscope")) as full:
        return step_kernels(full)


def _check(path: Path, truth: StepKernels) -> dict[str, Any]:
    with Report.open(path) as r:
        return check_steps(r, truth, FIRST, LAST)


def test_a_right_capture_passes_and_its_facts_survive_json(tmp_path: Path, truth: StepKernels) -> None:
    assert truth.counts == {1: 7, **{s: 6 for s in range(2, STEPS + 1)}}
    assert truth.names[1]["init"] == 1 and truth.names[12] == {"gemm": 3, "relu": 2, "sgd": 1}
    facts = json.loads(json.dumps(to_facts(truth, capture="--steps 10-20")))
    assert facts["capture"] == "--steps 10-20" and facts["kernel_names"] == ["gemm", "init", "relu", "sgd"]
    assert from_facts(facts) == truth

    result = _check(_run(tmp_path / "steps.gpuscope", window=(FIRST - 1, LAST)), truth)
    assert result["ok"], result["problems"]
    assert result["steps_seen"] == list(range(FIRST, LAST + 1))
    assert result["kernels_per_step"] == {s: [6, 6] for s in range(FIRST, LAST + 1)}
    assert result["kernels"] == result["expected_kernels"] == 66
    assert (result["windows"], result["outside_windows"]) == (1, 0)
    assert result["trimmed"]["kernel"] == 7 + 6 * (STEPS - 1) - 66  # all but steps 10-20 were cut


def _stray_kernel(path: Path) -> Path:
    """A kernel of step 25 that trimming let through (added after the report was written)."""
    con = duckdb.connect(str(path))
    launch = 24 * STEP_NS + 100
    con.execute("INSERT INTO kernel (start_ns, end_ns, queued_ns, pid, device_id, context_id, stream_id, "
                "correlation_id, config_id) VALUES (?, ?, ?, 100, 0, 1, 7, 9999, 1)",  # config 1: gemm
                [launch + 50, launch + 150, launch])
    con.close()
    return path


@pytest.mark.parametrize(("window", "changed", "stray", "problems"), [
    ((FIRST - 2, LAST), None, False,
     ["step_sum lists steps [9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20], not 10 to 20",
      "the report's kernels differ from those of steps 10-20 of the full run: extra gemm x3, relu x2, sgd x1"]),
    ((FIRST - 1, LAST - 1), None, False,
     ["step_sum lists steps [10, 11, 12, 13, 14, 15, 16, 17, 18, 19], not 10 to 20",
      "step 20: kernel names differ from the full run's: missing gemm x3, relu x2, sgd x1"]),
    ((FIRST - 1, LAST), {15: ["gemm", "relu", "gemm", "gemm", "sgd"]}, False,
     ["step 15: 5 kernels, the full run 6", "step 15: kernel names differ from the full run's: missing relu x1"]),
    ((FIRST - 1, LAST), {12: ["gemm", "relu", "gemm_tf32", "relu", "gemm", "sgd"]}, False,
     ["step 12: kernel names differ from the full run's: missing gemm x1; extra gemm_tf32 x1"]),
    ((FIRST - 1, LAST), None, True,
     ["1 of the report's 67 kernels belong to no listed step",
      "the report's kernels differ from those of steps 10-20 of the full run: extra gemm x1",
      "1 kernels were launched outside every capture window"]),
], ids=["a step too early", "a step too few", "a kernel missing", "a kernel renamed", "a kernel outside"])
def test_a_wrong_capture_fails_saying_what_is_wrong(
        tmp_path: Path, truth: StepKernels, window: tuple[int, int], changed: dict[int, list[str]] | None,
        stray: bool, problems: list[str]) -> None:
    path = _run(tmp_path / "steps.gpuscope", window=window, changed=changed)
    result = _check(_stray_kernel(path) if stray else path, truth)
    assert not result["ok"]
    assert result["problems"] == problems
