"""Module ranges in some steps only (capture/python/module_steps.py): the policy, the gate the
PyTorch hooks follow at each step's end, and the layer table reading only the steps that have them
(analysis/ranges/module_steps.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rank_reports import add_rank
from report_builder import ReportBuilder

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
from range_rows import recorded_rows  # noqa: E402
from gpuscope.analysis.ranges.layers import layer_sum
from gpuscope.analysis.ranges.module_steps import module_steps, ranged_step_counts
from gpuscope.analysis.distributed.layers import layer_times
from gpuscope.analysis.steps.source import step_source
from gpuscope.capture.python.module_steps import DEFAULT, ModuleSteps, StepGate, from_env
from gpuscope.capture.python.ranges import RangeRecorder
from gpuscope.capture.python.torch_hooks import TorchHooks

torch = pytest.importorskip("torch")


def test_the_policy_records_the_first_steps_then_one_in_every() -> None:
    p = ModuleSteps(first=3, every=4)
    assert [n for n in range(16) if p.records(n)] == [0, 1, 2, 3, 7, 11, 15]
    assert all(DEFAULT.records(n) for n in range(50)) and DEFAULT.all


@pytest.mark.parametrize(("text", "expected"), [
    ("all", ModuleSteps(0, 1)), ("sample", ModuleSteps(20, 10)), ("first=5,every=3", ModuleSteps(5, 3)),
    ("every=7", ModuleSteps(20, 7)), (" FIRST=2 ", ModuleSteps(2, 10)), ("every=0", ModuleSteps(20, 1)),
])
def test_the_policy_is_read_from_its_text(text: str, expected: ModuleSteps) -> None:
    assert ModuleSteps.parse(text) == expected


def test_a_wrong_setting_is_said_and_the_default_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    said: list[tuple[str, str]] = []
    monkeypatch.setenv("GPUSCOPE_MODULE_STEPS", "every=often")
    assert from_env(lambda level, message: said.append((level, message))) == DEFAULT
    assert said and said[0][0] == "warning" and "GPUSCOPE_MODULE_STEPS" in said[0][1]
    monkeypatch.setenv("GPUSCOPE_MODULE_STEPS", "first=1,every=2")
    assert from_env(lambda level, message: None) == ModuleSteps(1, 2)


def test_the_gate_counts_the_steps_that_recorded() -> None:
    gate = StepGate(ModuleSteps(first=2, every=3))
    ons = [gate.step_ended(n) for n in range(1, 9)]  # after steps 0..7: does step n record?
    assert ons == [True, True, False, False, True, False, False, True]  # steps 1, 2, 5 and 8 record
    assert gate.counts()["module_steps"] == 8 and gate.counts()["module_steps_recorded"] == 4  # steps 0, 1, 2, 5
    gate.step_ended(1)  # a better step source starts the count again: its first steps record
    assert gate.on


def _hooked(monkeypatch: pytest.MonkeyPatch, policy: ModuleSteps) -> TorchHooks:
    hooks = TorchHooks(RangeRecorder(), lambda level, message: None, backward=False)
    hooks._torch = torch
    hooks.gate = StepGate(policy)
    hooks.r.step_marked = True
    monkeypatch.setattr(torch.nn.Module, "__call__", hooks._module_call(torch.nn.Module.__call__))
    return hooks


def _forward_ranges(hooks: TorchHooks) -> list[Any]:
    return [row for row in recorded_rows(hooks.r) if row[6] == "range" and row[8] == "forward"]


def test_module_calls_pass_straight_through_in_steps_without_ranges(monkeypatch: pytest.MonkeyPatch) -> None:
    hooks = _hooked(monkeypatch, ModuleSteps(first=1, every=3))
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    per_step = []
    for n in range(7):
        model(torch.ones(2, 4))
        per_step.append(len(_forward_ranges(hooks)))
        hooks.step_ended(n + 1)
    assert per_step == [3, 3, 0, 0, 3, 0, 0]  # steps 0, 1 and 4: the model and its two layers
    assert hooks.counts["module_steps"] == 7 and hooks.counts["module_steps_recorded"] == 3


def _ranges_by_category(hooks: TorchHooks) -> dict[str, list[str]]:
    """The module ranges recorded since the last call, their names by category (taken once)."""
    out: dict[str, list[str]] = {"forward": [], "model": []}
    for row in recorded_rows(hooks.r):
        if row[6] == "range" and row[8] in out:
            out[row[8]].append(row[5])
    return out


def test_a_step_without_module_ranges_keeps_its_outermost_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """In a step whose layers are not recorded, the model's own call is one range of category
    ``model`` (the host's time in PyTorch's code, which the diagnosis reads in every step); the
    calls inside it are not ranges."""
    hooks = _hooked(monkeypatch, ModuleSteps(first=1, every=3))
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    forward, outer = [], []
    for n in range(7):
        model(torch.ones(2, 4))
        got = _ranges_by_category(hooks)
        forward.append(len(got["forward"]))
        outer.append(got["model"])
        hooks.step_ended(n + 1)
    assert forward == [3, 3, 0, 0, 3, 0, 0]
    assert outer == [[], [], ["Sequential"], ["Sequential"], [], ["Sequential"], ["Sequential"]]


def test_without_step_marks_the_outermost_calls_still_count_the_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """An inference loop that marks no steps: each outermost call ends a step (an iteration mark),
    in steps with module ranges and in those without, so the gate opens again on time."""
    hooks = _hooked(monkeypatch, ModuleSteps(first=2, every=4))
    hooks.r.step_marked = False
    ended: list[int] = []

    def on_step(source: str, t: int) -> None:
        ended.append(t)
        hooks.step_ended(len(ended))

    hooks.r.on_step = on_step
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Sequential(torch.nn.ReLU()))
    forward, outer = [], []
    for _ in range(8):
        model(torch.ones(2, 4))
        got = _ranges_by_category(hooks)
        forward.append(len(got["forward"]))
        outer.append(len(got["model"]))
    assert len(ended) == 8  # one iteration per outermost call, recorded or not
    assert forward == [4, 4, 4, 0, 0, 0, 4, 0]  # steps 0, 1, 2 and 6: the model and its three modules
    assert outer == [0, 0, 0, 1, 1, 1, 0, 1]


def test_a_call_open_when_the_gate_closes_still_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """A step mark inside a module call (gpuscope.step() in a forward) closes the gate: the calls
    already open end their ranges, the ones started after it pass through."""
    hooks = _hooked(monkeypatch, ModuleSteps(first=1, every=5))

    class Marks(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.before, self.after = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)

        def forward(self, x: Any) -> Any:
            x = self.before(x)
            hooks.step_ended(2)  # step 2 records nothing
            return self.after(x)

    Marks()(torch.ones(2))
    rows = _forward_ranges(hooks)
    assert sorted(row[5] for row in rows) == ["Marks", "Marks.before"] and all(row[1] is not None for row in rows)


def _sampled_run(path: Path, recorded: int, steps: int) -> Any:
    """Three steps (marks at 1000, 2000, 3000): module ranges in the first and the third only."""
    b = ReportBuilder(path)
    b.range("M", 100, 400, 1, category="forward")
    b.kernel("a", 500, 800, tid=1, launch=200)
    b.mark("step", 1000, 1)
    b.kernel("b", 1500, 1900, tid=1, launch=1200)  # a step without module ranges
    b.mark("step", 2000, 1)
    b.range("M", 2100, 2400, 1, category="forward")
    b.kernel("c", 2500, 2600, tid=1, launch=2200)
    b.mark("step", 3000, 1)
    counts = {"module_steps": steps, "module_steps_recorded": recorded, "module_steps_first": 1,
              "module_steps_every": 2}
    b.writer.con.execute("INSERT INTO collector VALUES (100, 'ranges', 2, 0, 0, 0, ?)", [json.dumps(counts)])
    return b.open()


def test_the_layer_table_reads_the_steps_with_module_ranges(tmp_path: Path) -> None:
    with _sampled_run(tmp_path / "s.gpuscope", recorded=2, steps=3) as report:
        said = module_steps(report)
        table = layer_sum(report)
    assert said is not None and said.sampled and (said.recorded, said.steps) == (2, 3)
    rows = {r["Name"]: r for r in table.records()}
    assert set(rows) == {"M"} and rows["M"]["GPU Self"] == 300 + 100 and rows["M"]["Share"] == pytest.approx(100.0)
    assert any("recorded in 2 of 3 steps" in note for note in table.notes)


def test_where_every_step_recorded_every_operation_counts(tmp_path: Path) -> None:
    with _sampled_run(tmp_path / "a.gpuscope", recorded=3, steps=3) as report:
        rows = {r["Name"]: r for r in layer_sum(report).records()}
    assert rows["(not in a module)"]["GPU Self"] == 400 and rows["M"]["GPU Self"] == 400


def test_per_step_layer_times_of_ranks_divide_by_the_steps_with_module_ranges(tmp_path: Path) -> None:
    """Two ranks, four steps of 1000 ns each; module ranges (and the 300 ns kernel in them) in steps 0
    and 2 only, an optimizer range in every step: the module's time per step is over the two steps
    that recorded it, the optimizer's CPU time over all four."""
    b = ReportBuilder(tmp_path / "r.gpuscope")
    for rank, pid in enumerate((100, 101)):
        add_rank(b, pid, rank, 2)
        for step in range(4):
            t = step * 1000
            if step in (0, 2):
                b.range("M", t + 100, t + 400, 1, category="forward", pid=pid)
                b.kernel("k", t + 500, t + 800, tid=1, launch=t + 200, pid=pid)
            b.range("SGD.step", t + 850, t + 900, 1, category="optimizer", pid=pid)
            b.range("step", t + 1000, t + 1000, 1, category="step", kind="mark", pid=pid)
        counts = {"module_steps": 4, "module_steps_recorded": 2, "module_steps_first": 1, "module_steps_every": 2}
        b.writer.con.execute("INSERT INTO collector VALUES (?, 'ranges', 2, 0, 0, 0, ?)", [pid, json.dumps(counts)])
    with b.open() as report:
        counted = ranged_step_counts(report, step_source(report))
        times = layer_times(report)
    assert counted is not None and counted.to_dict() == {100: 2, 101: 2}
    got = {(r.rank, r.name, r.time): r.time_ns for r in times.itertuples()}
    assert got[(0, "M", "gpu")] == pytest.approx(300) and got[(1, "M", "cpu")] == pytest.approx(300)
    assert got[(0, "SGD.step", "cpu")] == pytest.approx(50)



def test_the_layer_table_leaves_out_outermost_call_ranges_only(tmp_path: Path) -> None:
    """A step without layers keeps its model's outermost call (category ``model``): not a row of its own
    in layer_sum; a PyTorch range without a category still is one."""
    b = ReportBuilder(tmp_path / "m.gpuscope")
    b.range("M", 100, 400, 1, category="forward")
    b.range("custom", 420, 450, 1)  # no category
    b.mark("step", 1000, 1)
    b.range("M", 1100, 1400, 1, category="model")
    b.mark("step", 2000, 1)
    with b.open() as report:
        names = {r["Name"] for r in layer_sum(report).records()}
    assert "custom" in names and "M" in names
    with b.open() as report:
        kinds = {r["Name"]: r.get("Kind") for r in layer_sum(report).records()}
    assert "model" not in kinds.values()
