"""gpuscope try's measurement with the runs stood in for: the order of the runs over rounds, a fix that
crashes (not run again, reported with its error line and how the program ended, counted by
--fail-if-unconfirmed), a program that fails as written, and the DataLoader fix's cut of PyTorch's
threads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuscope.capture import trial as inprocess
from gpuscope.experiment import fixes, measure
from gpuscope.experiment.runs import Budget, Outcome, Program
from gpuscope.reporters.try_text import as_data, render_text

PROGRAM = Program(["python", "train.py"], "/tmp", {})
MS = 1_000_000


class FakeRuns:
    """Stands in for runs.run: each variant's step time, and the variants that fail."""

    def __init__(self, step_ms: dict[str, float], failing: dict[str, tuple[int, str]] | None = None) -> None:
        self.step_ms = step_ms
        self.failing = failing or {}  # variant -> (exit code, last stderr line)
        self.calls: list[tuple[int, str]] = []

    def __call__(self, program: Program, variant: str, round_: int, fix_list: list[Any], settings: list[Any],
                 budget: Budget, workdir: Path, losses: int = 5, warmup: int = 0) -> Outcome:
        self.calls.append((round_, variant))
        if variant in self.failing:
            code, line = self.failing[variant]
            return Outcome(variant, round_, code, 1.0, error=line)
        steps = [int(self.step_ms[variant] * MS)] * (budget.steps - 1)
        applied = {p["patch"]: "done" for p in settings}
        return Outcome(variant, round_, 0, 1.0, steps, "torch", "steps",
                       results={"applied": applied, "losses": [1.0, 0.9]})


def _measure(monkeypatch: pytest.MonkeyPatch, runs: FakeRuns, names: list[str], rounds: int) -> measure.TryResult:
    monkeypatch.setattr(measure, "run", runs)
    plan = fixes.plan([], 3, names)
    return measure.measure(PROGRAM, plan.tried, rounds, Budget(8, 60), 2, 0.1)


def test_rounds_turn_the_order_by_one_place(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = FakeRuns({"as_written": 40, "compile": 20, "tf32": 30})
    result = _measure(monkeypatch, runs, ["compile", "tf32"], 3)
    assert runs.calls == [(1, "as_written"), (1, "compile"), (1, "tf32"),
                          (2, "compile"), (2, "tf32"), (2, "as_written"),
                          (3, "tf32"), (3, "as_written"), (3, "compile")]
    gains = {f.planned.fix.name: f.gain.median for f in result.fixes if f.gain is not None}
    assert gains == {"compile": pytest.approx(0.5), "tf32": pytest.approx(0.25)}
    assert result.step_ns == 40 * MS and not result.unconfirmed  # no estimates: every gain is confirmed


def test_a_fix_that_crashes_is_not_run_again_and_is_unconfirmed(monkeypatch: pytest.MonkeyPatch) -> None:
    error = "RuntimeError: view size is not compatible with input tensor's size and stride"
    runs = FakeRuns({"as_written": 40, "compile": 20}, {"channels_last": (1, error)})
    result = _measure(monkeypatch, runs, ["channels_last", "compile"], 3)
    assert [c for c in runs.calls if c[1] == "channels_last"] == [(1, "channels_last")]
    assert sum(1 for c in runs.calls if c[1] == "compile") == 3  # the others keep their rounds
    crashed = result.fixes[0]
    assert crashed.status == "crashed" and crashed.detail == error
    assert crashed.ending == "exited with code 1" and crashed.crashed_round == 1
    assert [f.planned.fix.name for f in result.unconfirmed] == ["channels_last"]
    text = render_text(result)
    assert f"  CRASHED the program (exited with code 1, round 1): {error}" in text.splitlines(), text
    assert "Unconfirmed: channels_last (a crash" in text
    data = as_data(result)
    assert data["unconfirmed"] == ["channels_last"] and data["fixes"][0]["ending"] == "exited with code 1"


def test_a_fix_killed_by_a_signal_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = FakeRuns({"as_written": 40}, {"compile": (-11, "")})
    result = _measure(monkeypatch, runs, ["compile"], 2)
    f = result.fixes[0]
    assert f.status == "crashed" and f.ending == "was killed by SIGSEGV"
    assert "CRASHED the program (killed by SIGSEGV, round 1)" in render_text(result)


def test_no_round_follows_a_failure_of_the_program_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = FakeRuns({"compile": 20}, {"as_written": (2, "FileNotFoundError: data.csv")})
    result = _measure(monkeypatch, runs, ["compile"], 3)
    assert runs.calls == [(1, "as_written"), (1, "compile")]
    assert result.baseline_error == "FileNotFoundError: data.csv"
    assert "the program as written FAILED: FileNotFoundError: data.csv" in render_text(result)


class FakeTorch:
    def __init__(self, threads: int) -> None:
        self.threads = threads

    def get_num_threads(self) -> int:
        return self.threads

    def set_num_threads(self, n: int) -> None:
        self.threads = n


@pytest.mark.parametrize(("cores", "threads", "workers", "after", "said"), [
    (2, 2, 1, 1, "torch.set_num_threads(1) (was 2; 2 cores)"),  # the busy 2-core machine
    (4, 4, 8, 1, "torch.set_num_threads(1) (was 4; 4 cores)"),  # more workers than cores: one thread kept
    (16, 8, 4, 8, None),  # room for both: left as it is
    (8, 1, 7, 1, None),  # already one thread
])
def test_dataloader_fix_fits_pytorchs_threads_to_the_cores_the_workers_leave(
        monkeypatch: pytest.MonkeyPatch, cores: int, threads: int, workers: int, after: int, said: str | None) -> None:
    monkeypatch.setattr(inprocess, "_cores", lambda: cores)
    torch = FakeTorch(threads)
    assert inprocess._fit_threads(torch, workers) == ([said] if said else [])
    assert torch.threads == after


HOLD_PROGRAM = """
import json, sys
import torch
from gpuscope.capture import trial as inprocess
t = inprocess.Trial.__new__(inprocess.Trial)
t.patches, t.applied, t.held = set(sys.argv[1].split(",")), {}, {}
inprocess._global_switches(t, torch)
torch.backends.cuda.matmul.allow_tf32 = False      # the program's own settings, after the fix went in
torch.backends.cudnn.benchmark = False
torch.set_float32_matmul_precision("highest")
inprocess._global_switches(t, torch)                # the fix applied again at the top module's first call
print(json.dumps({"tf32": torch.backends.cuda.matmul.allow_tf32, "precision": torch.get_float32_matmul_precision(),
                  "benchmark": torch.backends.cudnn.benchmark, "applied": t.applied, "held": t.held}))
"""


@pytest.mark.parametrize("patches", ["tf32,cudnn_benchmark", "cudnn_benchmark"])
def test_a_switch_the_program_turns_back_off_is_held_on_and_said(tmp_path: Path, patches: str) -> None:
    import json
    import subprocess
    import sys

    pytest.importorskip("torch")
    script = tmp_path / "prog.py"
    script.write_text(HOLD_PROGRAM)
    out = subprocess.run([sys.executable, str(script), patches], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["benchmark"] is True
    assert got["held"]["cudnn_benchmark"] == [1, "prog.py:9"]
    assert got["applied"]["cudnn_benchmark"].endswith("held on: the program switched it back 1 time(s), first at prog.py:9")
    if "tf32" in patches:
        assert (got["tf32"], got["precision"]) == (True, "high")
        assert got["held"]["tf32"] == [2, "prog.py:8"]  # allow_tf32 = False, then precision "highest"
    else:  # a switch not tried is the program's to set
        assert (got["tf32"], got["precision"], "tf32" in got["held"]) == (False, "highest", False)


def test_the_timed_window_waits_for_the_device_at_both_ends(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A program that never waits for the device: its marks come as fast as it launches, and only the
    window closed by a wait for the device holds the device's time of the steps."""
    clock = iter(range(0, 10**12, 1000))
    drained: list[int] = []

    def drain() -> int:  # the device finishes its queue: 50 us more for each step queued ahead of it
        drained.append(1)
        return 5_000_000 + 50_000 * len(t.marks.get("module", []))

    monkeypatch.setattr(inprocess, "_drained", drain)
    t = inprocess.Trial({"steps": 8, "warmup": 2, "out": str(tmp_path / "r.json")})
    with pytest.raises(SystemExit):
        for _ in range(8):
            t.step_mark("module", next(clock))
    assert len(drained) == 2  # once after the warm-up, once at the end
    assert t.window == {"source": "module", "first": 3, "start_ns": 5_150_000, "end_ns": 5_400_000, "steps": 5}
    import json
    results = json.loads((tmp_path / "r.json").read_text())
    from gpuscope.experiment.runs import window_step
    assert window_step(results) == 50_000
    # the measure prefers the window to the marks' 1 us host intervals
    o = Outcome("as_written", 1, 0, 1.0, [1000] * 7, "module", "steps", results=results)
    assert measure.timed_step(o, 2) == 50_000
    o.results = {}
    assert measure.timed_step(o, 2) == 1000


def test_a_better_source_of_marks_opens_the_window_again(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(inprocess, "_drained", lambda: 7)
    t = inprocess.Trial({"steps": 0, "warmup": 1, "out": str(tmp_path / "r.json")})
    for i in range(3):
        t.step_mark("module", i)
    assert t.window is not None and t.window["source"] == "module"
    t.step_mark("torch", 10)  # the optimizer's first step: not yet past its warm-up
    assert t.window["source"] == "module"
    t.step_mark("torch", 11)
    assert (t.window["source"], t.window["first"]) == ("torch", 2)


def test_the_compiled_top_module_is_called_whatever_its_truth() -> None:
    """torch.compile's wrapper answers bool() with len() of the model, which a model without
    __len__ raises on (seen with a GPT recompiled with mode='reduce-overhead' on a GPU)."""
    from gpuscope.capture.trial import Trial

    class NoLen:
        calls = 0

        def __len__(self) -> int:
            raise TypeError("GPT does not support len()")

        def __call__(self, x: int) -> int:
            NoLen.calls += 1
            return x + 1

    trial = Trial({"out": "unused"})
    trial._target = NoLen()
    assert trial.call_top(None, lambda module, x: -1, object(), (1,), {}) == 2 and NoLen.calls == 1
    assert trial.last_output == 2
