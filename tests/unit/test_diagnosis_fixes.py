"""Findings as fixes, on simulated runs: what a CUDA graph removes (PyTorch's own code between
launches, not the program's), loops of matmuls paced by their launches, elementwise chains a fused
kernel would replace."""

from __future__ import annotations

from pathlib import Path

import pytest
from diagnosis_sim import Sim

from gpuscope.analysis.diagnosis import Diagnosis, Finding, diagnose

US = 1_000
MS = 1_000_000
EW = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>"
GEMM = "cutlass_80_simt_sgemm_128x32_8x5_nn_align1"


def _run(path: Path, body, steps: int = 8) -> Diagnosis:  # type: ignore[no-untyped-def]
    sim = Sim(path)
    for _ in range(steps + 1):
        body(sim)
        sim.step()
    with sim.open() as report:
        return diagnose(report)


def _rule(diag: Diagnosis, rule: str) -> Finding | None:
    return next((f for f in diag.findings if f.rule == rule), None)


def _step_ns(diag: Diagnosis) -> float:
    return diag.processes[0].mean_parts()["duration_ns"]


def test_elementwise_chain_fused(tmp_path: Path) -> None:
    def body(sim: Sim) -> None:
        for _ in range(6):
            sim.kernel(EW, 100 * US, launch_cost=5 * US)  # queued far ahead of the GPU
        sim.cpu(50 * US)

    diag = _run(tmp_path / "r.gpuscope", body)
    f = _rule(diag, "unfused_elementwise")
    assert f is not None and diag.findings[0] is f
    # one chain per step (not one across steps): the chain less its longest pass, 5 x 100 µs
    assert f.data["chains_per_step"] == pytest.approx(1.0)
    assert f.saving_ns == pytest.approx(5 * 100 * US, rel=0.03)


def test_short_elementwise_kernels_are_no_chain(tmp_path: Path) -> None:
    def body(sim: Sim) -> None:
        for _ in range(6):
            sim.kernel(EW, 3 * US, launch_cost=5 * US)

    assert _rule(_run(tmp_path / "r.gpuscope", body), "unfused_elementwise") is None


def test_gemm_loop_paced_by_launches_though_each_fills_the_gpu(tmp_path: Path) -> None:
    """128 thread blocks on 132 SMs each, but 25 µs of host between 5 µs kernels: batching pays."""
    def body(sim: Sim) -> None:
        for _ in range(32):
            sim.kernel(GEMM, 5 * US, launch_cost=25 * US, blocks=128)
        sim.cpu(200 * US)

    f = _rule(_run(tmp_path / "r.gpuscope", body), "small_gemms")
    assert f is not None and f.data["launches_per_step"] == 32
    # the loop's span (31 launch intervals and the last kernel) less one batched multiply
    assert f.saving_ns == pytest.approx(31 * 25 * US + 5 * US - 32 * 5 * US * 128 / 132, rel=0.02)


def test_gemms_that_fill_the_gpu_back_to_back_are_no_loop(tmp_path: Path) -> None:
    def body(sim: Sim) -> None:
        for _ in range(32):
            sim.kernel(GEMM, 50 * US, launch_cost=5 * US, blocks=128)
        sim.cpu(200 * US)

    assert _rule(_run(tmp_path / "r.gpuscope", body), "small_gemms") is None


def _with_gaps(in_framework: bool):  # type: ignore[no-untyped-def]
    def body(sim: Sim) -> None:
        start = sim.host
        for i in range(20):
            sim.kernel("relu", 3 * US, launch_cost=10 * US)
            if i % 5 == 4:
                sim.cpu(300 * US)  # 300 µs between two launches, four times a step
        if in_framework:  # the gaps lie inside a module's forward: PyTorch's own code
            sim.range("Net", start, sim.host, category="forward")
        sim.cpu(50 * US)
    return body


def test_cuda_graph_takes_pytorchs_own_code_between_launches(tmp_path: Path) -> None:
    diag = _run(tmp_path / "r.gpuscope", _with_gaps(True))
    graph = _rule(diag, "launch_bound")
    assert graph is not None and diag.findings[0] is graph
    own = _rule(diag, "hot_line")  # only the program's 50 µs at the end of each step
    assert own is None or own.saving_ns == pytest.approx(50 * US, rel=0.05)
    # after a replay the step keeps its GPU work and about 1 µs per kernel
    step = _step_ns(diag)
    parts = diag.processes[0].mean_parts()
    busy = sum(v for k, v in parts.items() if k.startswith("busy_"))
    assert graph.saving_ns == pytest.approx(step - busy - 20 * 1 * US - 50 * US, rel=0.05)


def test_the_programs_own_work_at_a_fixed_place_is_not_the_graphs(tmp_path: Path) -> None:
    diag = _run(tmp_path / "r.gpuscope", _with_gaps(False))
    own = _rule(diag, "hot_line")
    assert own is not None and own.saving_ns == pytest.approx(4 * 300 * US, rel=0.05)
    graph = _rule(diag, "launch_bound")
    assert graph is None or graph.saving_ns < own.saving_ns
    # the fixes' savings never add up to more than the step
    assert sum(f.saving_ns for f in diag.findings if not f.work_changing) <= _step_ns(diag)


def test_kernels_a_graph_already_replays_keep_their_gaps(tmp_path: Path) -> None:
    """launch_bound's saving leaves about 1 µs a kernel for a replay; kernels that a CUDA graph
    already launched (XLA's command buffers) keep theirs in the recording, so nothing is taken off
    for them, and the fix named is fewer, larger replays rather than a graph."""
    plain = _rule(_run(tmp_path / "plain.gpuscope", _with_gaps(True)), "launch_bound")
    sim = Sim(tmp_path / "graphed.gpuscope")
    body = _with_gaps(True)
    for _ in range(9):
        body(sim)
        sim.step()
    for (table, _columns), rows in sim._rows.items():  # as the writer stores kernels a graph launched
        if table == "kernel":
            sim._rows[(table, _columns + ("graph_id",))] = [r + (5,) for r in rows]
            del sim._rows[(table, _columns)]
            break
    with sim.open() as report:
        graphed = _rule(diagnose(report), "launch_bound")
    assert plain is not None and graphed is not None
    assert graphed.saving_ns == pytest.approx(plain.saving_ns + 20 * 1 * US, rel=0.01)
    assert "between CUDA graph replays" in graphed.title and "capture the step" not in graphed.title
    assert "capture the step in a CUDA graph" in plain.title
