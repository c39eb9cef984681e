"""bench/cpu_overhead.py's arithmetic on hand-made runs: the overhead probe's cost against the real cost of
a recorded step, per run and summarized over rounds, and the command line of a mode run by another tree."""

from __future__ import annotations

import pytest
from bench_module import load_bench

bench = load_bench("cpu_overhead")


def _run(rnd: int, mode: str, loop_s: float, step_s: float, probe: tuple[float, float] | None = None) -> dict:
    run = {"round": rnd, "workload": "sgd4", "mode": mode, "loop_s": loop_s, "total_s": loop_s + 2,
           "loop_cpu_s": loop_s, "total_cpu_s": loop_s + 2, "median_step_s": step_s}
    if probe is not None:
        off, on = probe
        run.update(estimate_ns=100_000_000, probe_ratio=on / off, probe_off_s=off, probe_on_s=on)
    return run


def test_the_probe_against_the_real_cost_of_a_step() -> None:
    untraced = _run(0, "untraced", 0.5, 0.000500)
    check = bench.probe_check(_run(0, "default", 0.6, 0.000600, probe=(0.000550, 0.000660)), untraced)
    assert check["probe"] == pytest.approx(0.20)  # 660 / 550
    assert check["real"] == pytest.approx(0.32)  # 660 / 500
    assert check["quotient"] == pytest.approx(0.20 / 0.32)
    assert check["off_over_untraced"] == pytest.approx(1.10)  # the probe's steps were 10% slower than untraced
    # no real cost (the traced steps as fast as untraced): no quotient; no probe in the run: no check
    assert bench.probe_check(_run(0, "default", 0.5, 0.0005, probe=(0.0005, 0.0005)), untraced)["quotient"] is None
    assert bench.probe_check(_run(0, "torch", 0.6, 0.0006), untraced) is None


def test_the_summary_keeps_each_runs_check_and_their_spread() -> None:
    runs = [_run(0, "untraced", 0.5, 0.000500), _run(1, "untraced", 0.4, 0.000400),
            _run(0, "default", 0.6, 0.000600, probe=(0.000500, 0.000600)),
            _run(1, "default", 0.6, 0.000600, probe=(0.000500, 0.000550))]
    (row,) = [s for s in bench.summarize(runs, ["sgd4"], ["untraced", "default"]) if s["mode"] == "default"]
    assert [c["real"] for c in row["probe_runs"]] == pytest.approx([0.2, 0.375])
    assert [c["quotient"] for c in row["probe_runs"]] == pytest.approx([1.0, 0.1 / 0.375])
    median, low, high = row["quotient"]
    assert (low, high) == pytest.approx((0.1 / 0.375, 1.0)) and median == pytest.approx((1.0 + 0.1 / 0.375) / 2)
    assert row["cpu_ratio_min"] == pytest.approx(1.2) and row["cpu_ratio_max"] == pytest.approx(1.5)
    table = bench.probe_markdown([row])
    assert "| sgd4 | default | +20%, +10% | +20%, +38% | 1.00, 0.27 |" in table


def test_a_base_mode_runs_the_same_collectors_from_another_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(bench.BASE_ENV, "/elsewhere/src")
    argv, env, report = bench.command("default-off-base", "sgd4", "out.json", "scratch")
    assert env == {"PYTHONPATH": "/elsewhere/src"} and report == "scratch/sgd4-default-off-base.gpuscope"
    assert argv[2:8] == ["gpuscope", "profile", "-o", "scratch/sgd4-default-off-base", "--force-overwrite", "--steps"]
    argv, env, report = bench.command("untraced", "sgd4", "out.json", "scratch")
    assert report is None and env == {} and argv[-2:] == ["sgd4", "out.json"]


def test_a_gpu_mode_at_base_runs_another_tree_and_keeps_its_report_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = load_bench("overhead")
    monkeypatch.setenv("OVERHEAD_BASE_PYTHONPATH", "/elsewhere/src")
    argv, env = gpu.command("gpuscope@base", "mlp", "/t/timing.json", "/scratch")
    mine, own_env = gpu.command("gpuscope", "mlp", "/t/timing.json", "/scratch")
    assert env["PYTHONPATH"] == "/elsewhere/src" and "PYTHONPATH" not in own_env
    assert argv[1:3] == ["-m", "gpuscope"] and "/scratch/mlp-gpuscope@base" in argv
    assert [a for a in argv if a != "/scratch/mlp-gpuscope@base"] == [a for a in mine if a != "/scratch/mlp-gpuscope"]
    argv, env = gpu.command("ab-+torch-ranges@base", "mlp", "/t/timing.json", "/scratch")
    assert "cuda,nvtx,torch" in argv and env["PYTHONPATH"] == "/elsewhere/src"
