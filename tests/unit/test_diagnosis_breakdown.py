"""The step-time breakdown: exact parts on a simulated run, and parts that add up on recorded runs."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from diagnosis_sim import WAKE, Sim
from gpuscope.analysis.diagnosis import diagnose
from gpuscope.analysis.diagnosis.breakdown import PARTS
from gpuscope.analysis.diagnosis.context import Context
from gpuscope.trace.report import Report

US = 1_000
SYNC_LINE = ("/home/user/project/train.py", 42, "train_step")


def _run_with_every_cause(path: Path, steps: int = 5) -> Report:
    """Per step: 500 µs in the DataLoader, kernel A (1 ms), a pinned copy (100 µs) behind it, 300 µs
    of Python, kernel B (400 µs), a stream synchronization, 1 ms of Python, the step mark."""
    sim = Sim(path)
    sim.kernel("init", 10 * US)
    sim.cpu(20_000 * US)  # the first step is long: warm-up
    for _ in range(steps):
        sim.loader(500 * US)
        sim.kernel("A", 1_000 * US)
        sim.copy("HtoD", 1 << 20, 100 * US)
        sim.cpu(300 * US)
        sim.kernel("B", 400 * US)
        sim.sync(SYNC_LINE)
        sim.cpu(1_000 * US)
        sim.step()
    return sim.open()


def test_parts_of_a_simulated_step_are_exact(tmp_path: Path) -> None:
    with _run_with_every_cause(tmp_path / "r.gpuscope") as report:
        (p,) = Context(report).processes
    steps = p.breakdown.steps
    assert steps["warmup"].tolist() == [True, False, False, False, False]
    # a steady step: launches take 5 µs each and the GPU starts work 4 µs after its launch. The host
    # reaches the sync at 815 µs; A runs 504-1504, the copy to 1604, B to 2004; the host returns
    # WAKE later and runs 1 ms of Python.
    gpu_done = 500 + 4 + 1_000 + 100 + 400
    step = gpu_done + WAKE // US + 1_000
    expected = {
        "busy_unknown": 1_400 * US,  # A and B
        "idle_transfer": 100 * US,  # the copy ran while no kernel did
        "idle_data": 500 * US,  # the DataLoader wait
        "idle_sync": (step - 2_000) * US,  # the rest: the queue ran dry inside the sync (4 µs of it at the step's start)
    }
    for _, row in p.breakdown.steady.iterrows():
        assert row["duration_ns"] == step * US
        assert {k: row[k] for k in PARTS if row[k]} == expected
    # the warm-up step's idle time is warm-up whatever the host did
    first = steps.iloc[0]
    assert first["idle_warmup"] > 20_000 * US and first["idle_cpu"] == 0
    assert sum(first[k] for k in PARTS) == first["duration_ns"]


def test_pieces_name_their_culprits(tmp_path: Path) -> None:
    with _run_with_every_cause(tmp_path / "r.gpuscope") as report:
        (p,) = Context(report).processes
        idle = p.steady_idle
        calls = p.timeline.calls
    # one call per synchronization: the sync_site row and CUPTI's sync row of the same call are one
    assert len(calls) == 5 and set(calls["source"]) == {"site"}
    assert set(idle.loc[idle["cause"] == "idle_sync", "culprit"]) == {"call"}
    assert set(idle.loc[idle["cause"] == "idle_data", "culprit"]) == {"loader"}
    copies = idle[idle["cause"] == "idle_transfer"]
    assert set(copies["culprit"]) == {"copy"}
    assert set(copies["ref"]) <= set(p.timeline.ops.loc[p.timeline.ops["kind"] == "memcpy", "op_id"])


def test_launch_overhead_and_cpu_work(tmp_path: Path) -> None:
    """Back-to-back launches slower than their kernels are launch overhead; a long stretch without
    launches is CPU work."""
    sim = Sim(tmp_path / "r.gpuscope")
    for _ in range(4):
        for _ in range(50):
            sim.kernel("tiny", 2 * US, launch_cost=20 * US)
        sim.cpu(2_000 * US)
        sim.step()
    with sim.open() as report:
        (p,) = Context(report).processes
        mean = p.breakdown.mean_parts()
    # 50 launches 20 µs apart: the GPU waits 18 µs between kernels, 49 times; then 2 ms of Python
    assert mean["busy_unknown"] == pytest.approx(50 * 2 * US)
    assert mean["idle_launch"] == pytest.approx(49 * 18 * US, abs=5 * US)
    assert mean["idle_cpu"] == pytest.approx(2_000 * US + 20 * US - 2 * US + 4 * US, abs=5 * US)


def test_a_gpu_running_behind_the_host_stretches_the_steps(tmp_path: Path) -> None:
    """The host marks steps long before the GPU runs them: steps end when the GPU is done."""
    sim = Sim(tmp_path / "r.gpuscope")
    for _ in range(4):
        sim.kernel("gemm", 3_000 * US)
        sim.step()
    with sim.open() as report:
        (p,) = Context(report).processes
    durations = p.breakdown.steps["duration_ns"].tolist()
    assert durations[1:] == [3_000 * US] * 3
    assert p.breakdown.mean_parts()["busy_unknown"] == 3_000 * US


FIXTURES = ["mlp_default", "mlp_api", "gpt_eager", "gpt_compiled", "crash_kill", "event_regions", "nvtx_sources"]


@pytest.mark.parametrize("name", FIXTURES)
def test_parts_add_up_on_recorded_runs(name: str, recorded: Callable[[str], Path]) -> None:
    with Report.open(recorded(name)) as report:
        diag = diagnose(report)
    assert diag.processes
    for p in diag.processes:
        steps = p.steps
        assert (steps[list(PARTS)] >= 0).all().all()
        assert (steps[list(PARTS)].sum(axis=1) == steps["duration_ns"]).all()
        mean = p.mean_parts()
        assert sum(mean[k] for k in PARTS) == pytest.approx(mean["duration_ns"], rel=1e-9)
    table = diag.breakdown_table()
    shares = [r[3] for r in table.rows if r[1] != "Step (total)"]
    assert sum(shares) == pytest.approx(100.0, abs=0.01 * len(shares))


def test_recorded_launch_bound_mlp(recorded: Callable[[str], Path]) -> None:
    """The MLP of tests/device/workloads/mlp.py: ~61 short kernels a step, the GPU busy under a third."""
    with Report.open(recorded("mlp_default")) as report:
        (p,) = diagnose(report).processes
    mean = p.mean_parts()
    busy = mean["busy_unknown"] / mean["duration_ns"]
    assert 0.2 < busy < 0.35
    assert mean["idle_launch"] > mean["idle_sync"] + mean["idle_data"] + mean["idle_transfer"]
    assert len(p.steps) == 4 and p.steps["warmup"].tolist() == [True, False, False, False]


def test_the_range_that_launched_most_operations_weighs_them_and_names_the_category(tmp_path: Path) -> None:
    """Summed in the report's database, not one Python object per operation: the innermost range at
    each operation's launch, by count or by weight; operations launched outside every range count
    for nothing."""
    from gpuscope.analysis.ops.attribution import ops_table
    from report_builder import torch_training

    with torch_training(tmp_path / "t.gpuscope") as report:
        ops = report.df(f"SELECT o.op_id, n.value AS name, o.launch_ns FROM {ops_table(report)} o "
                        "JOIN string n ON n.id = o.name_id ORDER BY o.launch_ns")
        ctx = Context(report)

        def ids(*launches: int) -> list[int]:
            return [int(ops.loc[ops["launch_ns"] == t, "op_id"].iloc[0]) for t in launches]

        gemms = ids(4000, 8000, 33000)  # Net.enc.fc, Net.head, Net.head (a range that never ended)
        assert ctx.top_launch_range(gemms) == "Net.head (forward)"
        assert ctx.top_launch_range(np.array(gemms), np.array([10.0, 1.0, 1.0])) == "Net.enc.fc (forward)"
        assert ctx.top_launch_range(ids(500, 41000)) is None  # before and after every range
        assert ctx.top_launch_range(ids(500, 22000)) == "SGD.step (optimizer)"
        assert ctx.top_launch_range([]) is None


@pytest.mark.parametrize("name", ["diagnosis_sync_item", "diagnosis_pageable_copy"])
def test_pieces_classified_in_batches_give_the_same_breakdown(name: str, recorded: Callable[[str], Path],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The pieces of time are classified a batch at a time: batches of a few pieces give the parts,
    idle pieces and operation times that one batch of all of them gives."""
    import pandas as pd

    from gpuscope.analysis.diagnosis import breakdown

    def parts(chunk: int) -> list[tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]]:
        monkeypatch.setattr(breakdown, "CHUNK", chunk)
        with Report.open(path) as report:
            return [(p.breakdown.steps, p.breakdown.idle, p.breakdown.ops) for p in Context(report, 0.01).processes]

    path = recorded(name)
    whole, batched = parts(1 << 30), parts(97)
    assert len(whole) == len(batched) >= 1
    assert len(whole[0][1]) > 97 * 3  # several batches of idle pieces
    for one, many in zip(whole, batched):
        for a, b in zip(one, many):
            pd.testing.assert_frame_equal(a, b, check_exact=True)


@pytest.mark.parametrize("seed", range(3))
def test_cut_points_and_piece_times_worked_in_place_are_numpys(seed: int) -> None:
    """The distinct cut points moved to the front of their array a batch at a time, and the pieces'
    times written over them, are ``np.unique`` and the two gathers, whatever the batch."""
    from gpuscope.analysis.diagnosis.breakdown import _piece_times
    from gpuscope.analysis.diagnosis.sorted_arrays import sorted_unique as _sorted_unique

    rng = np.random.default_rng(seed)
    for n, high in ((1, 5), (2, 2), (500, 40), (5000, 10**12)):
        values = rng.integers(0, high, n)
        for step in (1, 3, 64, 1 << 20):
            cuts = _sorted_unique(values.copy(), step)
            assert np.array_equal(cuts, np.unique(values)) and cuts.dtype == values.dtype
            for share in (0.0, 0.3, 1.0):
                at = np.flatnonzero(rng.random(max(len(cuts) - 1, 0)) < share).astype(np.int32)
                want = (cuts[at], cuts[at + 1])
                starts, ends = _piece_times(cuts.copy(), at.copy(), step)
                assert np.array_equal(starts, want[0]) and np.array_equal(ends, want[1])
    # positions out of order (never made so): the two gathers
    starts, ends = _piece_times(np.arange(10, dtype=np.int64) * 3, np.array([3, 1, 2]))
    assert starts.tolist() == [9, 3, 6] and ends.tolist() == [12, 6, 9]
