"""Steps found in sampled Python stacks: a loop the sampler resolves gives its iterations, a loop that
turns many times between two samples gives none (its stacks repeat only as an alias of the sampler)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from conftest import unpack_fixture

from gpuscope.analysis.steps.from_pattern import _find, pattern_steps
from gpuscope.trace.report import Report

STACKS = "sampled Python stacks"


def _sampled(lines: list[tuple[int, float]], turns: int, interval_ms: float, seed: int) -> pd.DataFrame:
    """The visits :func:`_sample_tokens` makes of a loop of ``lines`` (stack, milliseconds), each
    line's time varied by up to 10% each turn, sampled every ``interval_ms`` give or take 10%: one
    row per run of samples that saw the same stack (``pid``, ``token``, ``launch_ns``, ``start_ns``,
    ``samples``)."""
    rng = np.random.default_rng(seed)
    ms = np.array([t for _, t in lines] * turns) * rng.uniform(0.9, 1.1, len(lines) * turns)
    ends = np.cumsum(ms * 1e6)
    at = np.cumsum(interval_ms * 1e6 * rng.uniform(0.9, 1.1, int(ends[-1] / (interval_ms * 1e6))))
    at = at[at < ends[-1]]
    stack = np.array([s for s, _ in lines] * turns)[np.searchsorted(ends, at, "right")]
    first = np.flatnonzero(np.append(True, stack[1:] != stack[:-1]))
    samples = np.diff(np.append(first, len(stack)))
    ns = at[first].astype(np.int64)
    return pd.DataFrame({"pid": 1, "token": stack[first], "launch_ns": ns, "start_ns": ns, "samples": samples})


def test_a_loop_slower_than_the_sampler_gets_its_iterations() -> None:
    """30 ms of loading, 50 ms of compute and a 5 ms line between (one or two samples a turn),
    sampled every 4 ms: 80 turns of 85 ms."""
    visits = _sampled([(0, 30.0), (1, 50.0), (2, 5.0)], turns=80, interval_ms=4.0, seed=3)
    aliased: dict[int, tuple[int, int, int]] = {}
    found = _find(visits, STACKS, aliased)
    assert 1 in found and not aliased
    pattern, frame = found[1]
    lengths = np.diff(frame["launch_ns"].to_numpy()[pattern.starts]) / 1e6
    assert len(pattern.starts) >= 60 and 75 < float(np.median(lengths)) < 95


def test_a_loop_faster_than_the_sampler_gets_no_iterations() -> None:
    """A 0.5 ms loop (0.45 ms in one line, 0.05 ms in another) sampled every 4.1 ms: whatever its
    stacks seem to repeat is the beat of the sampler against the loop: the sum a single sample each
    time, the comprehension held for one sample in one turn and dozens in another."""
    visits = _sampled([(3, 0.45), (2, 0.05)], turns=40_000, interval_ms=4.1, seed=3)
    aliased: dict[int, tuple[int, int, int]] = {}
    assert _find(visits, STACKS, aliased) == {}
    least, median, most = aliased[1]
    assert least <= 2 and most > 4 * max(median, 1)


def test_the_recorded_loop_of_small_matmuls_is_not_stepped_by_the_samplers_alias(tmp_path: Path) -> None:
    """A loop of ~0.5 ms turns (8 small matmuls in a comprehension, then a sum), sampled at ~165 of
    250 samples a second on a busy 2-core machine: its sampled stacks alternate one-sample visits of
    the sum with runs of the comprehension of 1 to hundreds of samples, which repeated often enough to
    read as steps of 1.0-2.3 s. Those are refused, with the reason; the recorded operators are a window
    of the run, which gives no steps either (the diagnosis of the whole capture as one step:
    tests/unit/test_cpu_diagnosis.py)."""
    with Report.open(unpack_fixture("cpu_matmul_loop_stepped_by_stacks", tmp_path)) as report:
        found = pattern_steps(report)
    assert len(found.frame) == 0
    assert "sampled Python stacks repeat only as an alias of the sampler" in found.detail
    assert "whole capture counts as one step" in found.detail


def test_the_diagnosis_says_why_the_run_has_no_steps(tmp_path: Path) -> None:
    """The note that covers a run without steps carries the step finder's reason, once."""
    from gpuscope.analysis.diagnosis import diagnose

    with Report.open(unpack_fixture("cpu_matmul_loop_stepped_by_stacks", tmp_path)) as report:
        diag = diagnose(report)
        notes = [diag.scope_note(p) for p in diag.processes]  # type: ignore[attr-defined]
    (note,) = notes
    assert note.startswith(f"Process {diag.processes[0].pid}: no steps, so the run after start-up counts as one window")
    assert "Why no steps: no step marks, and the 42 sampled Python stacks repeat only as an alias of the sampler" in note
    assert "the whole capture counts as one step" not in note and diag.step_source == "no steps"
