"""Steps replayed with some kernels faster: where the host sets the pace, and where the GPU does."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpuscope.analysis.diagnosis import diagnose
from gpuscope.analysis.diagnosis.host_pace import NONE, _spans, earliest_launch, replay_step
from gpuscope.trace.report import Report

US = 1_000


def _ops(rows: list[tuple[int, int, int, int]]) -> tuple[pd.DataFrame, np.ndarray]:
    """Operations from (correlation id, stream, start µs, end µs), with launches where given below."""
    ops = pd.DataFrame(rows, columns=["correlation_id", "stream_id", "start_ns", "end_ns"])
    ops["start_ns"] *= US
    ops["end_ns"] *= US
    return ops, np.zeros(len(ops), np.int64)


NO_CALLS = pd.DataFrame({"start_ns": [], "end_ns": [], "correlation_id": []}, dtype="int64")


def test_a_gpu_waiting_for_the_hosts_launches_saves_nothing_from_faster_kernels() -> None:
    # ten 100 µs kernels launched every 150 µs: the GPU idles 50 µs before each
    ops, launch = _ops([(i, 7, 150 * i + 5, 150 * i + 105) for i in range(10)])
    launch[:] = np.arange(10) * 150 * US
    end = 1_500 * US
    before = replay_step(ops, launch, np.ones(10), NO_CALLS, 0, end)
    after = replay_step(ops, launch, np.full(10, 0.25), NO_CALLS, 0, end)
    assert before == after == end


def test_a_host_waiting_at_the_end_of_the_step_gets_the_whole_saving() -> None:
    # all ten launched at once; the host then waits in a synchronization until the GPU is done
    ops, launch = _ops([(i, 7, 100 * i + 10, 100 * i + 110) for i in range(10)])
    launch[:] = np.arange(10) * US
    calls = pd.DataFrame({"start_ns": [20 * US], "end_ns": [1_015 * US], "correlation_id": [100]})
    before = replay_step(ops, launch, np.ones(10), calls, 0, 1_020 * US)
    after = replay_step(ops, launch, np.full(10, 0.5), calls, 0, 1_020 * US)
    assert before == pytest.approx(1_020 * US, abs=10 * US)  # the launch latency is not replayed
    assert before - after == pytest.approx(500 * US, abs=2)


def test_a_wait_in_the_middle_moves_the_launches_after_it() -> None:
    # A (400 µs) launched at 0; the host waits for it from 10 to 405 µs, then launches B (400 µs)
    ops, launch = _ops([(1, 7, 2, 402), (3, 7, 410, 810)])
    launch[:] = [0, 408 * US]
    calls = pd.DataFrame({"start_ns": [10 * US], "end_ns": [405 * US], "correlation_id": [2]})
    before = replay_step(ops, launch, np.ones(2), calls, 0, 810 * US)
    after = replay_step(ops, launch, np.array([0.5, 1.0]), calls, 0, 810 * US)
    # A ends 200 µs sooner, so does the wait, and B is launched and ends 200 µs sooner
    assert before == pytest.approx(810 * US, abs=2 * US) and before - after == pytest.approx(200 * US, abs=2)


def test_streams_replay_apart() -> None:
    # two streams, each its own chain of two 100 µs kernels: the faster stream does not end the step
    ops, launch = _ops([(1, 7, 0, 100), (2, 8, 0, 100), (3, 7, 100, 200), (4, 8, 100, 200)])
    calls = pd.DataFrame({"start_ns": [5 * US], "end_ns": [200 * US], "correlation_id": [5]})
    faster = np.array([0.5, 1.0, 0.5, 1.0])
    assert replay_step(ops, launch, faster, calls, 0, 200 * US) == replay_step(ops, launch, np.ones(4), calls, 0,
                                                                                200 * US)
    both = replay_step(ops, launch, np.full(4, 0.5), calls, 0, 200 * US)
    assert both == pytest.approx(100 * US, abs=2)


def test_the_earliest_launch_is_the_last_host_call_by_correlation_id() -> None:
    corr = np.array([10, 20, 30])
    ns = np.array([100, 200, 300])
    assert earliest_launch(corr, ns, np.array([5, 10, 15, 25, 40])).tolist() == [NONE, 100, 100, 200, 300]
    assert earliest_launch(corr[:0], ns[:0], np.array([5])).tolist() == [NONE]


@pytest.mark.parametrize("fixture, paced", [("client_torch_transformer_lm_fp32", True), ("sync_loop", False)])
def test_the_faster_kernel_findings_say_where_the_host_set_the_pace(fixture: str, paced: bool,
                                                                    recorded: Callable[[str], Path]) -> None:
    """The float32 LM's recorded steps launch barely ahead of the GPU (GPU busy 20 of 25 ms, no
    waits): its kernels in TF32 or bf16 end its steps about as late. The planted sync loop waits for
    its GPU at every step: the replay gives what the estimates say, TF32's and bf16's beyond it."""
    with Report.open(recorded(fixture)) as report:
        diag = diagnose(report)
    found = {f.rule: f for f in diag.findings if f.rule in ("no_tensor_cores", "precision")}
    assert set(found) == {"no_tensor_cores", "precision"}
    for f in found.values():
        replayed = f.data["replayed_ns"]
        assert replayed is not None
        line = [e for e in f.evidence if "set the pace" in e]
        if paced:
            assert replayed < 0.05 * f.saving_ns and len(line) == 1, f
        else:
            assert replayed == pytest.approx(f.saving_ns, rel=0.1) and not line, f


def test_the_steps_anchor_spans_are_merged_where_they_overlap() -> None:
    lo, hi = np.array([30, 0, 5, 100]), np.array([40, 10, 20, 120])
    assert _spans(lo, hi) == [(0, 20), (30, 40), (100, 120)]
