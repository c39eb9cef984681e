"""Each diagnosis rule on a simulated run with its problem planted: the rule's finding comes first,
with the saving the planted problem costs, its location and its evidence."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from diagnosis_sim import Sim
from gpuscope.analysis.diagnosis import Diagnosis, Finding, diagnose
from gpuscope.analysis.diagnosis.rules import RULES, rule_names
from gpuscope.analysis.diagnosis.rule import GPU

US = 1_000
MS = 1_000_000
TRAIN = ("/home/user/project/train.py", 42, "train_step")


def _top(diag: Diagnosis) -> Finding:
    assert diag.findings, "no findings"
    return diag.findings[0]


def _only(diag: Diagnosis, rule: str) -> Finding:
    found = [f for f in diag.findings if f.rule == rule]
    assert len(found) == 1, [f.title for f in diag.findings]
    return found[0]


def _run(path: Path, body, steps: int = 6, **sim_args) -> Diagnosis:  # type: ignore[no-untyped-def]
    """Simulate a warm-up step, then ``steps`` steps of ``body``."""
    sim = Sim(path, **sim_args)
    warmup(sim, body)
    for _ in range(steps):
        body(sim)
        sim.step()
    with sim.open() as report:
        return diagnose(report)


def warmup(sim: Sim, body) -> None:  # type: ignore[no-untyped-def]
    """A long first step that ends as the others do, so that the steady steps all look alike."""
    sim.kernel("init", 10 * US)
    sim.cpu(100 * MS)
    body(sim)
    sim.step()


def test_every_rule_has_a_name_a_description_and_its_data() -> None:
    names = rule_names()
    assert len(names) == len(set(names)) >= 12
    for rule in RULES:
        assert rule.description and rule.sides
        if GPU in rule.sides:  # on the GPU side a rule needs GPU operations first (straggler: ranks, its own check)
            assert rule.name == "straggler" or rule.needs_on(GPU)[0] == "gpu", rule.name


def test_host_sync_reading_a_value_each_step(tmp_path: Path) -> None:
    """4 ms of GPU work, .item() at train.py:42, then 3 ms of Python: removing the read saves the 3 ms."""
    def body(sim: Sim) -> None:
        for _ in range(10):
            sim.kernel("work", 400 * US)
        sim.item(TRAIN)
        sim.cpu(3 * MS, at=("/home/user/project/log.py", 7, "log"))

    top = _top(_run(tmp_path / "r.gpuscope", body))
    assert top.rule == "host_sync"
    assert top.location == "/home/user/project/train.py:42 train_step"
    assert top.saving_ns == pytest.approx(3 * MS, rel=0.02)
    assert top.data["kind"] == "read" and ".item()" in top.fix or "accumulate" in top.fix
    assert "1.0 calls per step" in top.evidence[0]


def test_host_sync_saving_is_capped_by_the_wait(tmp_path: Path) -> None:
    """When the host would be the bottleneck anyway, the sync saves only the time the host waited."""
    def body(sim: Sim) -> None:
        sim.cpu(1 * MS)
        for _ in range(10):
            sim.kernel("work", 200 * US)
        sim.sync(TRAIN)
        sim.cpu(2 * MS)

    diag = _run(tmp_path / "r.gpuscope", body)
    sync = _only(diag, "host_sync")
    # the host waits from 1.05 ms to ~3 ms: 1.95 ms; the drained GPU idles 3 ms
    assert sync.saving_ns == pytest.approx(1.96 * MS, rel=0.02)
    assert sync.data["idle_ns"] == pytest.approx(3.0 * MS, rel=0.02)


def test_hot_line_names_the_python_lines(tmp_path: Path) -> None:
    def body(sim: Sim) -> None:
        sim.cpu(3 * MS, at=("/home/user/project/prep.py", 12, "preprocess"))
        for _ in range(10):
            sim.kernel("work", 100 * US)

    diag = _run(tmp_path / "r.gpuscope", body)
    top = _top(diag)
    assert top.rule == "hot_line"
    assert top.location == "/home/user/project/prep.py:12 preprocess"
    # the host needs 3.05 ms a step, the GPU 1 ms
    assert top.saving_ns == pytest.approx(2.05 * MS, rel=0.03)
    assert any("/home/user/project/prep.py:12 preprocess (100%)" in e for e in top.evidence)
    assert not [f for f in diag.findings if f.rule in ("host_sync", "launch_bound")]


def test_launch_bound_tiny_kernels(tmp_path: Path) -> None:
    def body(sim: Sim) -> None:
        for _ in range(200):
            sim.kernel("add", 3 * US, launch_cost=15 * US)

    top = _top(_run(tmp_path / "r.gpuscope", body))
    assert top.rule == "launch_bound"
    assert top.data["kernels_per_step"] == 200
    # 199 gaps of 12 µs, less 1 µs per kernel that a graph keeps
    assert top.saving_ns == pytest.approx(199 * 12 * US - 200 * US, rel=0.05)
    assert "CUDA graph" in top.fix


def test_launch_bound_names_the_waits_in_the_middle_of_the_step(tmp_path: Path) -> None:
    """Tiny kernels with an .item() after each quarter of them: the step cannot be one graph as it is,
    so the finding says so (its fix, the same text whatever the waits, says what to do then); the
    saving is the same launch gaps."""
    def body(sim: Sim) -> None:
        for _ in range(4):
            for _ in range(50):
                sim.kernel("add", 3 * US, launch_cost=15 * US)
            sim.item(TRAIN)

    launch = _only(_run(tmp_path / "r.gpuscope", body), "launch_bound")
    assert launch.data["mid_step_waits_per_step"] == pytest.approx(3.0)  # the fourth ends the step's launches
    assert "between the step's waits" in launch.title
    assert any("3.0 times per step" in e and "train.py:42" in e for e in launch.evidence)
    assert "keep the values read on the host on the GPU" in launch.fix


def test_launch_bound_with_a_wait_at_the_end_of_the_step_is_one_graph(tmp_path: Path) -> None:
    """The loss read after the step's last launch leaves the work before it capturable whole."""
    def body(sim: Sim) -> None:
        for _ in range(200):
            sim.kernel("add", 3 * US, launch_cost=15 * US)
        sim.item(TRAIN)

    launch = _only(_run(tmp_path / "r.gpuscope", body), "launch_bound")
    assert launch.data["mid_step_waits_per_step"] == 0
    assert "capture the step in a CUDA graph" in launch.title
    assert not any("times per step with work launched after it" in e for e in launch.evidence)


def test_data_loader_in_the_main_thread(tmp_path: Path) -> None:
    def body(sim: Sim) -> None:
        sim.loader(6 * MS, at=("/home/user/project/dataset.py", 30, "__getitem__"))
        for _ in range(10):
            sim.kernel("work", 200 * US)

    top = _top(_run(tmp_path / "r.gpuscope", body))
    assert top.rule == "data_loader"
    assert top.location == "/home/user/project/dataset.py:30 __getitem__"
    # the previous step's 2 ms of kernels run during the wait
    assert top.saving_ns == pytest.approx(4.0 * MS, rel=0.02)
    assert "num_workers" in top.fix


def test_data_loader_saving_with_the_workers_the_cores_allow(tmp_path: Path) -> None:
    """On 3 cores, 2 workers load a 6 ms batch in 3 ms a step, 1 ms more than the 2 ms of GPU work."""
    def body(sim: Sim) -> None:
        sim.loader(6 * MS)
        for _ in range(10):
            sim.kernel("work", 200 * US)

    sim = Sim(tmp_path / "r.gpuscope")
    warmup(sim, body)
    for _ in range(6):
        body(sim)
        sim.step()
    sim.cores(3)
    with sim.open() as report:
        f = _only(diagnose(report), "data_loader")
    assert f.data["workers"] == 2
    assert f.saving_ns == pytest.approx(4.0 * MS - (3.0 - 2.05) * MS, rel=0.03)


def test_pageable_copies_before_each_step(tmp_path: Path) -> None:
    """64 MB from pageable memory at 12.8 GB/s, waited for at train.py:30; pinned reaches 50 GB/s on an H100."""
    def body(sim: Sim) -> None:
        sim.copy("HtoD", 64 * 10**6, 5 * MS, pageable=True)
        sim.sync(("/home/user/project/train.py", 30, "to_device"))
        for _ in range(10):
            sim.kernel("work", 300 * US)

    diag = _run(tmp_path / "r.gpuscope", body)
    top = _top(diag)
    assert top.rule == "pageable_copies"
    assert top.location == "/home/user/project/train.py:30 to_device"
    assert top.saving_ns == pytest.approx(5 * MS * (1 - 12.8 / 50), rel=0.03)
    assert "pin_memory" in top.fix and "non_blocking=True" in top.fix
    assert not [f for f in diag.findings if f.rule == "host_sync"]  # the wait is the copy's


def test_sync_copies_waited_for(tmp_path: Path) -> None:
    """An 8 MB device-to-host copy into pinned memory that the host waits for, then 2 ms of Python."""
    def body(sim: Sim) -> None:
        for _ in range(10):
            sim.kernel("work", 300 * US)
        sim.copy("DtoH", 8 * 10**6, 400 * US)
        sim.sync(("/home/user/project/train.py", 50, "fetch"))
        sim.cpu(2 * MS)

    diag = _run(tmp_path / "r.gpuscope", body)
    top = _top(diag)
    assert top.rule == "sync_copies"
    assert top.location == "/home/user/project/train.py:50 fetch"
    assert top.saving_ns == pytest.approx(2 * MS, rel=0.03)
    # the copy's own time, serialized with the kernels of its stream, is stream_overlap's
    assert _only(diag, "stream_overlap").saving_ns == pytest.approx(400 * US, rel=0.03)


def test_sync_copies_of_a_synchronous_call(tmp_path: Path) -> None:
    """A cudaMemcpy (is_async false) keeps the host until it is done."""
    def body(sim: Sim) -> None:
        for _ in range(10):
            sim.kernel("work", 300 * US)
        sim.copy("DtoH", 8 * 10**6, 400 * US, is_async=False)
        sim.cpu(2 * MS)

    top = _top(_run(tmp_path / "r.gpuscope", body))
    assert top.rule == "sync_copies"
    assert "synchronous calls" in top.evidence[0]


def test_stream_overlap_copies_in_line_with_kernels(tmp_path: Path) -> None:
    def body(sim: Sim) -> None:
        sim.copy("HtoD", 4 * 10**6, 500 * US)
        for _ in range(10):
            sim.kernel("work", 200 * US)

    top = _top(_run(tmp_path / "r.gpuscope", body))
    assert top.rule == "stream_overlap"
    assert top.saving_ns == pytest.approx(500 * US, rel=0.02)
    assert top.share == pytest.approx(0.5 / 2.5, rel=0.03)


SGEMM = "ampere_sgemm_128x64_nn"
TF32_GEMM = "sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16_tensorop"


@pytest.mark.parametrize("name, found", [(SGEMM, True), (TF32_GEMM, False)])
def test_no_tensor_cores_for_float32_gemms(tmp_path: Path, name: str, found: bool) -> None:
    def body(sim: Sim) -> None:
        for _ in range(5):
            sim.kernel(name, 2 * MS)
        sim.kernel("void at::native::vectorized_elementwise_kernel<4>", 100 * US)

    diag = _run(tmp_path / "r.gpuscope", body)
    mine = [f for f in diag.findings if f.rule == "no_tensor_cores"]
    if not found:
        assert not mine
        return
    (f,) = mine
    assert f is diag.findings[0]
    assert f.saving_ns == pytest.approx(0.75 * 10 * MS, rel=0.01)  # GPU-bound: every GEMM is critical
    assert "allow_tf32" in f.fix and SGEMM in f.evidence[1]


def test_no_tensor_cores_counts_only_what_the_step_waits_for(tmp_path: Path) -> None:
    """A float32 GEMM followed by 5 ms of Python: making it faster only lengthens the gap."""
    def body(sim: Sim) -> None:
        sim.kernel(SGEMM, 1 * MS)
        sim.cpu(5 * MS)

    diag = _run(tmp_path / "r.gpuscope", body)
    assert not [f for f in diag.findings if f.rule == "no_tensor_cores"]
    assert _top(diag).rule == "hot_line"


SMALL = "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8_stage3_ffma"


def test_small_gemms_in_a_loop(tmp_path: Path) -> None:
    def body(sim: Sim) -> None:
        for _ in range(64):
            sim.kernel(SMALL, 5 * US, launch_cost=8 * US, blocks=4)
        sim.kernel("big", 1 * MS)
        sim.cpu(1 * MS + 10 * US)  # the GPU finishes "big" before the next loop

    diag = _run(tmp_path / "r.gpuscope", body)
    top = _top(diag)
    assert top.rule == "small_gemms"
    assert top.data["launches_per_step"] == 64 and top.data["blocks"] == 4
    # the loop spans 63 launch intervals of 8 µs and the last kernel; one batch ~ 64 x 5 µs x 4/132
    assert top.saving_ns == pytest.approx(63 * 8 * US + 5 * US - 64 * 5 * US * 4 / 132, rel=0.02)
    assert "bmm" in top.fix
    # the loop's launch gaps and float32 GEMMs are not counted again
    assert not [f for f in diag.findings if f.rule in ("launch_bound", "no_tensor_cores")]


def test_below_roofline_with_roofline_points(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    points = pd.DataFrame({
        "name": ["elementwise_add", "gemm"], "kernels": [18, 6], "time_ns": [36 * MS, 6 * MS],
        "flops": [1e9, 1e12], "bytes": [1e10, 1e9], "intensity": [0.1, 1000.0],
        "achieved_flops_per_s": [2.8e10, 1.6e14], "attainable_flops_per_s": [2.8e11, 2e14],
        "efficiency": [0.1, 0.8], "bound": ["memory", "compute"], "tensor_cores": ["n/a", "used"],
        "layer": ["Net.norm", "Net.fc"]})
    monkeypatch.setattr("gpuscope.analysis.roofline.points.kernel_points", lambda report, *a, **k: points)

    def body(sim: Sim) -> None:
        for _ in range(3):
            sim.kernel("elementwise_add", 2 * MS)
        sim.kernel("gemm", 1 * MS)

    diag = _run(tmp_path / "r.gpuscope", body)
    top = _top(diag)
    assert top.rule == "below_roofline" and top.location == "Net.norm"
    assert top.saving_ns == pytest.approx(6 * MS * (1 - 0.1 / 0.6), rel=0.01)
    assert len([f for f in diag.findings if f.rule == "below_roofline"]) == 1  # the GEMM is at 80%
    # the breakdown splits busy time by the bound classes
    mean = diag.processes[0].mean_parts()
    assert mean["busy_memory"] == pytest.approx(6 * MS) and mean["busy_compute"] == pytest.approx(1 * MS)


def test_gpu_memory_mostly_unused(tmp_path: Path) -> None:
    def body(sim: Sim) -> None:
        for _ in range(200):
            sim.kernel("add", 3 * US, launch_cost=15 * US)

    sim = Sim(tmp_path / "r.gpuscope")
    warmup(sim, body)
    for _ in range(6):
        body(sim)
        sim.step()
    sim.memory(10 * 10**9)
    with sim.open() as report:
        diag = diagnose(report)
    mem = _only(diag, "gpu_memory")
    assert mem.data["factor"] == 4  # 80 GB, 10 GB used
    parts = diag.processes[0].mean_parts()
    step, busy = parts["duration_ns"], parts["busy_unknown"]
    # a 4x batch: 4x the GPU work, the same launch overhead (it does not grow), for 4x the samples
    assert mem.work_changing and mem.data["per_sample_share"] == pytest.approx(1 - max(4 * busy, step - busy) / (4 * step), abs=1e-3)
    assert mem.saving_ns == pytest.approx(mem.data["per_sample_share"] * step, rel=1e-3)
    # ranked apart: after the fix that keeps the work, though it saves more per sample
    assert diag.findings[0].rule == "launch_bound" and mem.share > diag.findings[0].share


def test_warmup_of_a_compiled_model(recorded) -> None:  # type: ignore[no-untyped-def]
    from gpuscope.trace.report import Report

    with Report.open(recorded("gpt_compiled")) as report:
        diag = diagnose(report)
    top = _top(diag)
    assert top.rule == "startup" and top.one_time and not top.advisory
    assert top.saving_ns > 17e9 and "Triton" in " ".join(top.evidence)
    assert "TORCHINDUCTOR_CACHE_DIR" in top.fix


def test_warmup_without_compilation_is_listed_last(recorded) -> None:  # type: ignore[no-untyped-def]
    from gpuscope.trace.report import Report

    with Report.open(recorded("gpt_eager")) as report:
        diag = diagnose(report)
    warm = _only(diag, "startup")
    assert warm.advisory and diag.findings[-1] is warm
    assert diag.findings[0].rule in ("hot_line", "launch_bound")


def test_recorded_float32_gemms_of_the_mlp(recorded) -> None:  # type: ignore[no-untyped-def]
    from gpuscope.trace.report import Report

    with Report.open(recorded("mlp_default")) as report:
        diag = diagnose(report)
    f = _only(diag, "no_tensor_cores")
    assert "ffma" in f.evidence[1] and 0.05 < f.share < 0.3
    assert diag.findings[0].rule == "launch_bound"


def test_gpt_layers_are_not_a_gemm_loop(recorded) -> None:  # type: ignore[no-untyped-def]
    """The same GEMM once per transformer block, with the block's work between, cannot be batched."""
    from gpuscope.trace.report import Report

    with Report.open(recorded("gpt_eager")) as report:
        diag = diagnose(report)
    assert not [f for f in diag.findings if f.rule == "small_gemms"]


def test_recorded_idle_is_a_share_of_the_recorded_step(recorded) -> None:  # type: ignore[no-untyped-def]
    """generate's recording (an H200, the overhead probe measured collection's cost): the idle time read
    off the recording is told as a share of the recorded step, never past 100%, while the saving stays
    a share of the step without the profiler."""
    import re

    from gpuscope.trace.report import Report

    with Report.open(recorded("client_hf_gpt2_generate")) as report:
        diag = diagnose(report)
    (p,) = diag.processes
    launch = _only(diag, "launch_bound")
    idle = re.search(r"GPU idle between launches ([\d.]+) ms per step \(([\d.]+)% of the recorded step\)",
                     launch.title)
    assert idle, launch.title
    ms, pct = float(idle.group(1)), float(idle.group(2))
    step_ms = float(p.steps.loc[~p.steps["warmup"], "duration_ns"].mean()) / 1e6
    assert pct < 100 and abs(pct - 100 * ms / step_ms) < 2, (pct, ms, step_ms)
    assert launch.share < 1
