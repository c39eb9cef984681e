"""bench/overhead.py's arithmetic on hand-made runs: the end-of-run line's estimate against the whole
program's slowdown and against the steps' part of it, per round, summarized over rounds."""

from __future__ import annotations

import pytest
from bench_module import load_bench

bench = load_bench("overhead")


def _run(rnd: int, mode: str, mean_step_s: float, program_s: float, estimate_s: float | None = None) -> dict:
    run = {"round": rnd, "workload": "mlp", "mode": mode, "mean_step_s": mean_step_s, "median_step_s": mean_step_s,
           "steps": 100, "program_s": program_s, "max_rss_kb": 1024}
    if estimate_s is not None:
        run["estimate_ns"] = int(estimate_s * 1e9)
    return run


def test_the_line_against_the_whole_slowdown_and_the_steps_part() -> None:
    runs = [_run(0, "untraced", 0.002, 5.0), _run(0, "gpuscope", 0.0025, 6.0, estimate_s=0.04),
            _run(1, "untraced", 0.002, 5.5), _run(1, "gpuscope", 0.0023, 5.4, estimate_s=0.03)]
    (untraced, traced) = bench.summarize(runs, ["mlp"], ["untraced", "gpuscope"])
    assert "steps_slowdown_s" not in untraced
    # the whole program: +1.0 s and -0.1 s (a faster traced run), median 0.45 s against an estimate of 0.035 s
    assert traced["slowdown_s"] == pytest.approx(0.45)
    assert traced["estimate_over_slowdown"] == pytest.approx(0.035 / 0.45)
    # the steps: 100 steps of 0.5 ms and of 0.3 ms more: 0.05 s and 0.03 s; the line's 0.04 and 0.03 over them
    assert traced["steps_slowdown_s"] == pytest.approx(0.04)
    assert traced["estimate_over_steps_slowdown"] == pytest.approx((0.8 + 1.0) / 2)
    assert traced["estimate_over_steps_slowdown_range"] == pytest.approx([0.8, 1.0])
    assert "| 0.90 (0.80 - 1.00) |" in bench.markdown([traced])


def test_rounds_whose_steps_were_not_slower_have_no_quotient() -> None:
    runs = [_run(0, "untraced", 0.002, 5.0), _run(0, "gpuscope", 0.0019, 5.0, estimate_s=0.01)]
    (_, traced) = bench.summarize(runs, ["mlp"], ["untraced", "gpuscope"])
    assert traced["estimate_over_steps_slowdown"] is None
    assert traced["estimate_over_slowdown"] is None  # no slowdown of the program either
