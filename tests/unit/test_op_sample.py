"""The sample windows of ``--trace torch-shapes`` as a state machine, driven by hand (no torch).

A fake recorder stands in for torch_ops.TorchOps: ``op(new)`` is one operator, recorded while a
window is open (``new``: its signature was not seen before), passed through and counted while
waiting, and not seen at all otherwise, as the handler does.
"""

from __future__ import annotations

import pytest

from gpuscope.capture.python.op_sample import FINISHED, RECORDING, RESTING, WAITING, OpSample, SamplePolicy


class Recorder:
    """Calls the sample as the operator recorder's handler does; counts what each operator cost."""

    def __init__(self, policy: SamplePolicy) -> None:
        self.t = 0
        self.recorded = 0
        self.passed = 0  # operators that reached the handler without being recorded
        self.rows: list[tuple[int, int | None, int, str]] = []
        self.sample = OpSample(policy, lambda: self.t, lambda: self.recorded, lambda *row: self.rows.append(row))

    def op(self, new: bool = False) -> None:
        self.t += 10
        s = self.sample
        if s.state == WAITING and s.capture:
            self.passed += 1
            if not s.waited_op():
                return
        if s.state != RECORDING or not s.capture:
            return
        if new:
            s.new_signature()
        self.recorded += 1
        if self.recorded >= s.limit:
            s.at_limit()

    def step(self) -> None:
        self.t += 10
        self.sample.step_mark(self.t)

    def closed(self) -> list[tuple[int, int | None, int, str]]:
        return [r for r in self.rows if r[1] is not None]


def iteration(rec: Recorder, ops: int, first: bool = False) -> None:
    """One loop iteration: ``ops`` operators, all new in the first iteration."""
    for _ in range(ops):
        rec.op(new=first)


def test_with_steps_a_window_records_two_whole_steps_after_the_first() -> None:
    rec = Recorder(SamplePolicy(skip_ops=10**6, later_s=0))
    iteration(rec, 500, first=True)  # set-up
    for n in range(1, 7):
        iteration(rec, 40, first=n == 1)
        rec.step()
    assert rec.sample.state == RESTING
    (window,) = rec.closed()
    assert window[2] == rec.recorded == 80  # steps 2 and 3, whole
    assert window[3] == "end of step 1 to end of step 3"
    assert rec.rows[0] == (window[0], None, 0, "end of step 1")  # sent when it opened, without an end
    assert rec.passed == 540  # the set-up and step 1 passed through; nothing reached the recorder after


def test_without_steps_a_window_closes_once_the_operators_repeat() -> None:
    rec = Recorder(SamplePolicy(skip_ops=100, min_ops=50, later_s=0))
    iteration(rec, 100, first=True)  # set-up: the 100th operator opens the window
    iteration(rec, 70, first=True)  # the loop's first iteration: 70 new signatures
    for _ in range(10):
        iteration(rec, 70)
    (window,) = rec.closed()
    # the last new signature was the window's 71st operator (index 70): 2 x 71 operators in all
    assert window[2] == rec.recorded == 142 and window[3] == "after 100 operators to operators repeating"
    assert rec.sample.state == RESTING and rec.passed == 100


def test_without_steps_a_window_also_opens_after_skip_s() -> None:
    rec = Recorder(SamplePolicy(skip_ops=10**6, skip_s=0, min_ops=5, later_s=0))
    iteration(rec, 3)
    assert rec.sample.state == RECORDING and rec.rows[0][3] == "after 0 s"
    rec.step()  # step marks take over: windows open and close at them, never by time
    assert rec.sample.open_time > 10**18


def test_a_window_never_records_more_than_its_budget() -> None:
    rec = Recorder(SamplePolicy(skip_ops=1, max_ops=300, later_s=0))
    for _ in range(1000):
        rec.op(new=True)  # the shapes never repeat
    (window,) = rec.closed()
    assert window[2] == rec.recorded == 300 and window[3].endswith("to the budget of 300 operators")


def test_steps_that_begin_after_a_window_of_set_up_get_a_window_of_their_own() -> None:
    rec = Recorder(SamplePolicy(skip_ops=10, min_ops=20, later_s=0))
    iteration(rec, 200)  # a set-up that repeats itself (layer after layer): the window sees only it
    assert rec.sample.state == RESTING and rec.recorded == 20
    for n in range(1, 5):
        iteration(rec, 30, first=n == 1)
        rec.step()
    first, second = rec.closed()
    assert second[3] == "end of step 1 (steps began after the first sample) to end of step 3"
    assert second[2] == 60 and rec.sample.state == RESTING


def test_a_later_sample_opens_after_later_s() -> None:
    rec = Recorder(SamplePolicy(skip_ops=5, min_ops=10, later_s=0.01, windows=2))
    iteration(rec, 30)
    assert rec.sample.state == RESTING and rec.sample.timer is not None
    rec.sample.timer.join(5)
    assert rec.sample.state == WAITING  # opens at the next operator (no steps in this run)
    iteration(rec, 30)
    assert [r[3] for r in rec.closed()] == ["after 5 operators to operators repeating",
                                            "later sample to operators repeating"]
    assert rec.sample.state == FINISHED  # two windows in all


def test_the_capture_range_bounds_the_windows() -> None:
    rec = Recorder(SamplePolicy(skip_ops=5, min_ops=100, later_s=0))
    rec.sample.set_capture(False)
    iteration(rec, 50)  # outside the capture window: neither counted nor recorded
    assert rec.sample.waited == 0 and rec.recorded == 0
    rec.sample.set_capture(True)
    iteration(rec, 10)
    rec.sample.set_capture(False)  # cut short with too little recorded: the next capture window has another
    assert rec.sample.state == WAITING and rec.closed()[0][3] == "after 5 operators to end of the capture window"
    rec.sample.set_capture(True)
    iteration(rec, 200)
    assert rec.sample.state == RESTING and len(rec.closed()) == 2


def test_the_process_end_closes_an_open_window() -> None:
    rec = Recorder(SamplePolicy(skip_ops=1, later_s=0))
    iteration(rec, 20, first=True)
    rec.sample.finish()
    assert rec.sample.state == FINISHED and rec.closed()[0][3] == "after 1 operator to process end"
    assert rec.sample.summary()["windows"] == 1


def test_policy_overrides_and_their_errors() -> None:
    assert SamplePolicy.parse("skip_ops=10, later_s=0.5") == SamplePolicy(skip_ops=10, later_s=0.5)
    assert SamplePolicy.parse(None) == SamplePolicy() and SamplePolicy.parse("") == SamplePolicy()
    with pytest.raises(ValueError, match="unknown setting 'skip'"):
        SamplePolicy.parse("skip=3")
    with pytest.raises(ValueError, match="max_ops needs a number"):
        SamplePolicy.parse("max_ops=lots")
    with pytest.raises(ValueError, match="can not be negative"):
        SamplePolicy.parse("steps=-1")
