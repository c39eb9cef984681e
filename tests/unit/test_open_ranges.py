"""Ranges left open (pushes never popped, ends never recorded) span every later launch: the range
paths of ``gpuscope report``'s file and of a clicked slice stay short, and the timeline's lanes are
assigned without scanning every open range for each slice."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from report_builder import ReportBuilder

from gpuscope.analysis.timeline.details import PATH_INNER, PATH_OUTER, details
from gpuscope.analysis.timeline.file_details import gpu_details
from gpuscope.analysis.timeline.tracks import _lanes_of, build_index

OPEN = 60
LAUNCHES = 30


def _report(path: Path) -> Path:
    b = ReportBuilder(path)
    for k in range(OPEN):  # nested, never ended
        b.range(f"open{k}", 100 + k, None, 1, source="nvtx")
    for i in range(LAUNCHES):
        t = 100_000 + i * 10_000
        b.range("step", t - 100, t + 100, 1, source="nvtx")  # closed, innermost at the launch
        b.kernel("k", t + 5_000, t + 6_000, tid=1, launch=t)
    b.open().close()
    return path


def test_deep_paths_show_their_ends_and_how_many_lie_between(tmp_path: Path) -> None:
    from gpuscope.trace.report import Report

    depth = OPEN + 1
    expected = " > ".join([f"open{k}" for k in range(PATH_OUTER)] + [f"({depth - PATH_OUTER - PATH_INNER:,} more)"]
                          + [f"open{k}" for k in range(depth - PATH_INNER, OPEN)] + ["step"])
    with Report.open(_report(tmp_path / "open.gpuscope")) as report:
        index = build_index(report)
        gpu_lanes = [lane.id for lane in index.lanes if index.tracks[lane.track].stream is not None]
        found = gpu_details(report, index, gpu_lanes)
        paths = {k: dict((f[0], f[1]) for f in fields)["Range path"] for k, (fields, _) in found.items()}
        assert len(paths) == LAUNCHES and set(paths.values()) == {expected}
        lane, i = next(iter(paths))
        one = details(report, index, lane, i)
        assert one is not None and dict((f[0], f[1]) for f in one["fields"])["Range path"] == expected


def test_shallow_paths_are_whole(tmp_path: Path) -> None:
    from gpuscope.trace.report import Report

    b = ReportBuilder(tmp_path / "shallow.gpuscope")
    b.range("outer", 0, 50_000, 1, source="nvtx")
    b.range("inner", 1_000, 9_000, 1, source="nvtx")
    b.range("touching", 9_000, 20_000, 1, source="nvtx")
    b.kernel("a", 6_000, 7_000, tid=1, launch=5_000)
    b.kernel("b", 10_000, 11_000, tid=1, launch=9_000)  # at the end of one range and the start of the next
    b.kernel("c", 60_000, 61_000, tid=1, launch=55_000)  # in none
    with b.open() as report:
        index = build_index(report)
        gpu_lanes = [lane.id for lane in index.lanes if index.tracks[lane.track].stream is not None]
        found = gpu_details(report, index, gpu_lanes)
        paths = sorted(dict((f[0], f[1]) for f in fields).get("Range path") or "" for fields, _ in found.values())
    assert paths == ["", "outer > inner", "outer > inner > touching"]


def test_lanes_are_first_fit_without_a_scan_per_slice() -> None:
    rng = np.random.default_rng(5)
    start = np.sort(rng.integers(0, 10_000, 3_000))
    end = start + rng.integers(0, 500, 3_000)
    got = _lanes_of(start, end)
    free: list[int] = []  # the definition: the lowest lane whose last slice ended at or before the start
    for s, e, lane in zip(start.tolist(), end.tolist(), got.tolist()):
        want = next((k for k, last in enumerate(free) if last <= s), len(free))
        assert lane == want
        if want == len(free):
            free.append(e)
        else:
            free[want] = e
    import gpuscope.analysis.timeline.tracks as tracks

    batch = tracks._LANE_BATCH
    try:  # the times taken a few at a time give the same lanes
        for tracks._LANE_BATCH in (1, 7, 1000):
            assert np.array_equal(_lanes_of(start, end), got)
    finally:
        tracks._LANE_BATCH = batch
    n = 30_000  # nested and never ended: a scan of the lanes per slice takes minutes here
    began = time.perf_counter()
    deep = _lanes_of(np.arange(n, dtype=np.int64), np.full(n, 10 * n, dtype=np.int64))
    assert time.perf_counter() - began < 5 and deep.tolist() == list(range(n))
