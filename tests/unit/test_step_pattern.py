"""Steps of programs that mark none: the repeating launch sequence, on token sequences and on the
recorded workloads (whose 'step' ranges are the truth the pattern is checked against)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from gpuscope.analysis.diagnosis import diagnose
from gpuscope.analysis.steps.pattern import find_pattern
from gpuscope.analysis.steps.source import pattern_steps, step_source, step_windows, steps_table
from gpuscope.analysis.steps.table import step_sum
from gpuscope.trace.report import Report


def _loop(body: list[int], times: int, setup: list[int], gap_at: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Tokens of ``setup`` then ``times`` iterations of ``body``; launches 10 µs apart, 500 µs before
    the ``gap_at``-th token of each iteration."""
    tokens = setup + body * times
    gaps = [10_000] * len(setup) + [500_000 if i == gap_at else 10_000 for i in range(len(body))] * times
    return np.array(tokens), np.cumsum(gaps)


def test_period_phase_and_every_iteration() -> None:
    body = [5, 6, 7, 6, 8, 9, 10]
    tokens, launch = _loop(body, 50, setup=[1, 2, 3, 1, 2], gap_at=2)
    found = find_pattern(tokens, launch)
    assert found is not None and found.period == 7 and found.score == pytest.approx(1.0)
    # iterations start after the host's long gap: at token 2 of the body, 49 full ones after the set-up
    assert found.starts[0] == 5 + 2 and np.all(np.diff(found.starts) == 7)
    assert len(found.starts) == 49


def test_identical_kernels_with_one_copy_per_iteration() -> None:
    """300 launches of three kernels then one copy: the iteration is the 301 tokens, not the 3."""
    body = [1, 2, 3] * 100 + [-2]
    tokens, launch = _loop(body, 20, setup=[])
    found = find_pattern(tokens, launch)
    assert found is not None and found.period == 301 and len(found.starts) >= 19


def test_an_irregular_iteration_is_found_around() -> None:
    """An evaluation pass in the middle (other tokens) does not shift the iterations after it."""
    body = [5, 6, 7, 8]
    tokens, launch = _loop(body, 30, setup=[1], gap_at=0)
    tokens = np.concatenate([tokens[:41], [20, 21, 22], tokens[41:]])
    launch = np.concatenate([launch[:41], launch[40] + np.array([1, 2, 3]), launch[41:] + 3])
    found = find_pattern(tokens, launch)
    assert found is not None and found.period == 4
    assert all(tokens[s] == 5 for s in found.starts)
    assert len(found.starts) == 30


@pytest.mark.parametrize("tokens", [[1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 2, 1, 2, 1], list(range(200))])
def test_no_loop(tokens: list[int]) -> None:
    t = np.array(tokens)
    assert find_pattern(t, np.arange(len(t)) * 1000) is None


@pytest.mark.parametrize("name", ["diagnosis_launch_bound", "diagnosis_sync_item", "diagnosis_small_gemms",
                                  "diagnosis_slow_dataloader", "diagnosis_pageable_copy", "diagnosis_sync_d2h",
                                  "diagnosis_cpu_preprocess", "diagnosis_first_compile", "gpt_eager"])
def test_pattern_matches_the_marked_steps(name: str, recorded: Callable[[str], Path]) -> None:
    """Ignoring the marks, the pattern finds as many steps, as long, as the marks say."""
    with Report.open(recorded(name)) as report:
        marked = step_source(report)
        assert marked.kind in ("range", "torch")
        marks = report.df(f"SELECT start_ns, end_ns FROM {steps_table(report, marked)} ORDER BY start_ns")
        found = pattern_steps(report).frame
    assert len(marks) - 2 <= len(found) <= len(marks)
    median_marks = float(np.median(marks["end_ns"][1:] - marks["start_ns"][1:]))
    median_found = float(np.median(found["end_ns"] - found["start_ns"]))
    assert median_found == pytest.approx(median_marks, rel=0.05)


def test_unmarked_program_gets_steps_and_setup(recorded: Callable[[str], Path]) -> None:
    with Report.open(recorded("crash_kill")) as report:
        source = step_source(report)
        table = step_sum(report)
        diag = diagnose(report)
    assert source.kind == "pattern"
    assert table.notes[0].startswith("Steps: repeating pattern of 3 GPU operations, 356 times")
    assert any("set-up before step 1" in n for n in table.notes)
    (p,) = diag.processes
    assert p.has_steps and len(p.steps) == 356
    assert diag.step_source == source.description
    assert any("set-up before its first step took" in n for n in diag.notes)


@pytest.mark.parametrize("name", ["diagnosis_sync_item", "gpt_eager", "crash_kill"])
def test_step_sum_and_analyze_agree(name: str, recorded: Callable[[str], Path]) -> None:
    """One definition of a step: step_sum's mean of steady steps is the diagnosis's mean step."""
    with Report.open(recorded(name)) as report:
        table = step_sum(report)
        diag = diagnose(report)
        windows = step_windows(report)
    mean = next(r for r in table.records() if r["Step"] == "mean")
    (p,) = diag.processes
    assert p.mean_parts()["duration_ns"] == pytest.approx(mean["Duration"], rel=1e-9)
    assert len(p.steps) == len(windows)


def test_hashes_of_every_k_tokens_wrap_as_unsigned() -> None:
    from gpuscope.analysis.steps.pattern import _hashes

    tokens = np.array([-11, -2, 5, 2**62, -(2**63), 7, 7, -1], dtype=np.int64)
    for k in (1, 3, 8):
        want = []
        for i in range(len(tokens) - k + 1):
            h = 0
            for j in range(k):  # the same sum, modulo 2**64, of the tokens' unsigned bits
                h = (h * 1_000_003 + (int(tokens[i + j]) % 2**64) + j + 1) % 2**64
            want.append(h)
        got = _hashes(tokens, k)
        assert got.dtype == np.uint64 and got.tolist() == want
        assert tokens[0] == -11  # the tokens themselves are not changed
