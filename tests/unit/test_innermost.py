"""The innermost range at an instant, by sweep (analysis/ops/innermost.py), against the range join it
replaces: of the ranges that contain the instant (both ends included), the one that started last,
the later id on a tie; nested or not, ended or open."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from gpuscope.analysis.ops.attribution import FOREVER
from gpuscope.analysis.ops.innermost import segments


def _brute(ranges: pd.DataFrame, pid: int, tid: int, t: int) -> int:
    inside = ranges[(ranges.pid == pid) & (ranges.tid == tid) & (ranges.start_ns <= t) & (t <= ranges.end_eff)]
    if inside.empty:
        return -1
    return int(inside.sort_values(["start_ns", "rid"]).iloc[-1].rid)


def _lookup(segs: pd.DataFrame, pid: int, tid: int, t: int) -> int:
    s = segs[(segs.pid == pid) & (segs.tid == tid) & (segs.from_ns <= t)]
    return -1 if s.empty else int(s.iloc[-1].rid)


@pytest.mark.parametrize("seed", range(6))
def test_sweep_matches_the_range_join(seed: int) -> None:
    rng = random.Random(seed)
    rows = []
    for rid in range(1, 60):
        start = rng.randrange(0, 200)
        end = FOREVER if rng.random() < 0.05 else start + rng.randrange(0, 60)
        rows.append((rid, rng.choice([1, 2]), rng.choice([10, 11]), start, end))
    ranges = pd.DataFrame(rows, columns=["rid", "pid", "tid", "start_ns", "end_eff"])
    segs = segments(ranges).sort_values(["pid", "tid", "from_ns"])
    for pid in (1, 2):
        for tid in (10, 11):
            for t in range(-1, 280):
                assert _lookup(segs, pid, tid, t) == _brute(ranges, pid, tid, t), (pid, tid, t)


def test_no_ranges() -> None:
    empty = pd.DataFrame({c: np.array([], dtype=np.int64) for c in ["rid", "pid", "tid", "start_ns", "end_eff"]})
    assert segments(empty).empty
