"""The pair-free range computations (analysis/ops/enclosed.py, analysis/ops/nesting.py) against a plain
pair-by-pair evaluation of their definitions, on random reports: nested and overlapping ranges on
several threads of two processes (some never ended, some with no operation inside), operations
outside every range and operations whose thread is unknown. Batches and pyramid blocks are made
tiny so that every batch boundary and pyramid level is crossed."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from report_builder import ReportBuilder

from gpuscope.analysis.ops import enclosed, nesting
from gpuscope.analysis.ops.attribution import FOREVER, innermost
from gpuscope.trace.report import Report

PIDS = (100, 200)


@pytest.fixture(autouse=True)
def _tiny_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(enclosed, "CHUNK", 5)
    monkeypatch.setattr(nesting, "CHUNK", 4)
    monkeypatch.setattr(nesting, "BLOCK", 2)


def _random_report(path: Path, seed: int) -> tuple[Report, dict, dict]:
    """A random report; returns it with its ranges ``name: (pid, tid, start, end, category)`` and
    operations ``name: (pid, tid or None, launch, gpu start, gpu end)``."""
    rnd = random.Random(seed)
    b = ReportBuilder(path)
    ranges = {}
    for i in range(rnd.randint(1, 40)):
        pid, tid = rnd.choice(PIDS), rnd.choice([1, 2, 3])
        start = rnd.randint(0, 1000)
        end = None if rnd.random() < 0.05 else start + rnd.choice([0, rnd.randint(0, 40), rnd.randint(0, 400)])
        name, category = f"m{rnd.randint(0, 4)}", rnd.choice(["forward", "backward"])
        b.range(name, start, end, tid, source="torch", category=category, pid=pid)
        ranges[i] = (pid, tid, start, end, name, category)
    ops = {}
    for i in range(rnd.randint(0, 60)):
        pid, t = rnd.choice(PIDS), rnd.randint(1, 1400)
        start = rnd.randint(2000, 9000)  # GPU times in no relation to the launch order
        end = start + rnd.randint(0, 500)
        tid = rnd.choice([1, 2, 3, 4]) if rnd.random() < 0.6 else None
        if tid is not None:
            b.kernel(f"k{i}", start, end, tid=tid, launch=t, pid=pid)
        else:
            b.kernel(f"k{i}", start, end, queued=t, pid=pid)
        ops[f"k{i}"] = (pid, tid, t, start, end)
    return b.open(), ranges, ops


def _inside(op: tuple, rng: tuple, same_thread: bool) -> bool:
    pid, tid, t, _, _ = op
    rpid, rtid, s, e, _, _ = rng
    if pid != rpid or (same_thread and tid is not None and tid != rtid):
        return False
    return s <= t <= (FOREVER if e is None else e)


def _rids(report: Report) -> dict[int, int]:
    """Range index in creation order -> its ``rid`` (ranges numbered by process, thread, start, id)."""
    return {int(i) - 1: int(rid) for i, rid in report.sql(
        "SELECT id, row_number() OVER (ORDER BY pid, tid, start_ns, id) FROM nvtx_range WHERE kind = 'range'")}


@pytest.mark.parametrize("seed", range(14))
def test_projection_matches_the_pairs(tmp_path: Path, seed: int) -> None:
    report, ranges, ops = _random_report(tmp_path / "r.gpuscope", seed)
    with report:
        for same_thread in (True, False):
            for sources, categories in ((None, None), (("torch",), ("forward",))):
                got = {rid: (n, first, last) for rid, n, first, last in report.sql(
                    f"SELECT * FROM {enclosed.projection_table(report, sources, categories, same_thread)}")}
                rid_of = _rids(report)
                want = {}
                for i, rng in ranges.items():
                    if categories and rng[5] not in categories:
                        continue
                    inside = [op for op in ops.values() if _inside(op, rng, same_thread)]
                    if inside:
                        want[rid_of[i]] = (len(inside), min(o[3] for o in inside), max(o[4] for o in inside))
                assert got == want


@pytest.mark.parametrize("seed", range(14))
def test_union_gpu_time_counts_each_operation_once(tmp_path: Path, seed: int) -> None:
    report, ranges, ops = _random_report(tmp_path / "r.gpuscope", 50 + seed)
    with report:
        frame = enclosed.union_gpu_time(report, ("torch",), ("forward", "backward"))
        names = dict(report.sql("SELECT id, value FROM string"))
        got = {(names[n], c): int(t) for n, c, t in frame.itertuples(index=False) if t}
    want: dict[tuple[str, str], int] = {}
    for key in {(r[4], r[5]) for r in ranges.values()}:
        members = [r for r in ranges.values() if (r[4], r[5]) == key]
        inside = [op for op in ops.values() if any(_inside(op, r, True) for r in members)]
        if sum(o[4] - o[3] for o in inside):
            want[key] = sum(o[4] - o[3] for o in inside)
    assert got == want


@pytest.mark.parametrize("seed", range(14))
def test_innermost_matches_the_definition_across_pyramid_levels(tmp_path: Path, seed: int) -> None:
    report, ranges, ops = _random_report(tmp_path / "r.gpuscope", 100 + seed)
    with report:
        rid_of = _rids(report)
        frame = innermost(report).dropna(subset=["range_id"])
        got = dict(zip(frame["name"], frame["range_id"].astype(int)))
    want = {}
    for name, op in ops.items():
        inside = [i for i, r in ranges.items() if _inside(op, r, True)]
        if inside:  # the last started; of equal starts the shorter, then the later listed
            best = max(inside, key=lambda i: (ranges[i][2], -(FOREVER if ranges[i][3] is None else ranges[i][3]),
                                              rid_of[i]))
            want[name] = rid_of[best]
    assert got == want


@pytest.mark.parametrize("seed", range(8))
def test_last_at_least_matches_a_scan(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nesting, "BLOCK", [2, 3, 32][seed % 3])
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 50, size=int(rng.integers(1, 3000)))
    b = rng.integers(-1, len(values), size=500)
    c = rng.integers(0, 55, size=500)
    got = nesting.last_at_least(nesting.pyramid(values), b, c)
    want = [max((i for i in range(q + 1) if values[i] >= t), default=-1) for q, t in zip(b, c)]
    assert got.tolist() == want
