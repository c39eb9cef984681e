"""The timeline's levels of detail: a zoomed-out window is answered on a grid of power-of-two
buckets, from a pyramid computed once that gives what the slices give (exact busy time and slice
count per bucket, the same dominant name); the pyramid is kept beside the report and read back
only while the report is unchanged; the server reads or builds it and answers from it."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from gpuscope.analysis.timeline import lod as timeline_lod
from gpuscope.analysis.timeline.buckets import buckets, longest
from gpuscope.analysis.timeline.lod import build, grid, levels
from gpuscope.analysis.timeline.tracks import Lane, TimelineIndex, Track, build_index
from gpuscope.analysis.timeline.window import window
from gpuscope.trace import sidecar
from gpuscope.trace.report import Report

ORIGIN = 1_000_000_000


def _index(n: int, seed: int, lanes: int = 2) -> TimelineIndex:
    """An index of ``lanes`` lanes of ``n`` random slices each (gaps and lengths up to 500 ns, a
    long quiet stretch in the middle), from ORIGIN."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(lanes):
        gaps = rng.integers(0, 300, n)
        gaps[n // 2] = 50 * 300 * n // 100  # nothing runs for half as long again as the rest
        durs = rng.integers(1, 500, n)
        start = ORIGIN + np.cumsum(gaps + np.concatenate([[0], durs[:-1]]))
        out.append(Lane(i, 0, i, start.astype(np.int64), (start + durs).astype(np.int64),
                        rng.integers(0, 7, n).astype(np.int32), np.zeros(n, np.int8)))
    end = max(int(ln.end[-1]) for ln in out)
    return TimelineIndex([Track(0, "GPU 0", "Stream 7", "slices", [ln.id for ln in out])], out,
                         [f"kernel_{i}" for i in range(7)], ORIGIN, end, [])


@pytest.fixture
def small_lanes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timeline_lod, "MIN_SLICES", 1000)


def test_the_grid_is_the_power_of_two_nearest_a_pixel() -> None:
    assert grid(0, 1_000_000, 1000) == 10  # 1000 ns a pixel: buckets of 1024
    assert grid(0, 1_500_000, 1000) == 11  # 1500: 2048 is nearer in ratio than 1024
    assert grid(0, 10, 1000) == 0
    for span, px in ((123_456_789, 997), (10**12, 1190), (5000, 3)):
        step = 2 ** grid(0, span, px)
        assert (span / px) / 2 ** 0.5 <= step <= (span / px) * 2 ** 0.5


@pytest.mark.parametrize("seed", [0, 1])
def test_a_level_of_detail_answer_is_the_exact_aggregation_of_the_slices(small_lanes: None, seed: int) -> None:
    index = _index(20_000, seed)
    lod = build(index)
    assert set(lod) == {0, 1}
    span = index.end_ns - index.start_ns
    checked = 0
    for t0, t1, px in ((0, span, 400), (-span // 10, span + span // 10, 1190), (span // 7, span // 7 + span // 40, 300)):
        k = grid(t0, t1, px)
        from_pyramid, from_slices = window(index, t0, t1, px, lod=lod), window(index, t0, t1, px)
        assert from_pyramid == from_slices
        for w in from_pyramid["lanes"]:
            assert w["kind"] == "buckets" and w["step"] == 2 ** k and w["t0"] % w["step"] == 0
            assert w["t0"] <= t0 < w["t0"] + w["step"] and w["t0"] + len(w["busy"]) * w["step"] >= t1
            lane = index.lanes[w["lane"]]
            s, e = lane.start - ORIGIN, lane.end - ORIGIN
            for i in range(len(w["busy"])):
                a, b = w["t0"] + i * w["step"], w["t0"] + (i + 1) * w["step"]
                ran = np.clip(np.minimum(e, b) - np.maximum(s, a), 0, None).sum()
                assert abs(w["busy"][i] - ran / (b - a)) <= 0.0005 + 1e-12  # to the thousandth
                assert w["count"][i] == int(((s >= a) & (s < b)).sum())
                one = np.flatnonzero((s <= a) & (e >= b))  # covered by one slice: named after it
                if len(one):
                    assert w["name"][i] == int(lane.name[one[0]])
                checked += 1
    assert checked > 3000


def test_the_pyramid_goes_down_to_one_bucket_per_sixteen_slices(small_lanes: None) -> None:
    index = _index(20_000, 3, lanes=1)
    [p] = build(index).values()
    lane = index.lanes[0]
    ks = levels(lane, ORIGIN)
    assert sorted(p.busy) == list(ks) and p.k_min == ks.start
    last = int(lane.end[-1]) - ORIGIN
    assert len(p.busy[ks.start]) == (last >> ks.start) + 1 <= len(lane) // timeline_lod.FINEST_SLICES
    assert (last >> (ks.start - 1)) + 1 > len(lane) // timeline_lod.FINEST_SLICES
    assert len(p.busy[ks.stop - 1]) == 1 and p.count[ks.stop - 1][0] == len(lane)
    # a window finer than the finest grid is computed from the slices, and agrees with them
    fine = 2 ** (ks.start - 1) * 300
    assert window(index, 0, fine, 300, max_slices=10, lod={0: p}) == window(index, 0, fine, 300, max_slices=10)
    assert levels(_index(500, 4, lanes=1).lanes[0], ORIGIN) == range(0)  # few slices: no pyramid


def test_the_longest_slice_of_each_run_is_found_for_short_and_long_runs() -> None:
    index = _index(5000, 5, lanes=1)
    lane = index.lanes[0]
    rng = np.random.default_rng(6)
    for width in (10, 400):  # runs of a few slices (gathered at once) and long ones (one by one)
        lo = np.sort(rng.choice(5000 - width, 50, replace=False))
        hi = lo + rng.integers(1, width, 50)
        want = [a + int(np.argmax(lane.end[a:b] - lane.start[a:b])) for a, b in zip(lo, hi)]
        assert longest(lane, lo, hi).tolist() == want


def test_a_bucket_where_no_sampled_instant_hits_a_slice_is_named_after_its_longest() -> None:
    # the instants sampled in [0, 100) are 10, 30, 50, 70, 90: each slice starts just after one
    lane = Lane(0, 0, 0, np.array([11, 31, 51], np.int64), np.array([13, 37, 52], np.int64),
                np.array([4, 5, 6], np.int32), np.zeros(3, np.int8))
    busy, count, name = buckets(lane, np.array([0, 100, 200]))
    assert count.tolist() == [3, 0] and name.tolist() == [5, -1]
    assert busy.tolist() == pytest.approx([0.09, 0.0])


def test_a_kept_pyramid_answers_as_the_built_one_while_the_report_is_unchanged(tmp_path: Path, small_lanes: None,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "user-cache"))
    report = tmp_path / "r.gpuscope"
    report.write_bytes(b"a report")
    index = _index(8000, 7)
    lod = build(index)
    assert timeline_lod.keep(report, lod, sidecar.report_key(report)) == tmp_path / "r.gpuscope.cache" / "lod.bin"
    kept = timeline_lod.cached(report)
    assert kept is not None and set(kept) == set(lod)
    span = index.end_ns - index.start_ns
    assert window(index, 0, span, 500, lod=kept) == window(index, 0, span, 500, lod=lod)
    f = tmp_path / "r.gpuscope.cache" / "lod.bin"
    whole = f.read_bytes()
    f.write_bytes(whole[:-200])  # an array runs past the end
    assert timeline_lod.cached(report) is None
    f.write_bytes(whole)
    report.write_bytes(b"a report written again")
    assert timeline_lod.cached(report) is None


def test_the_server_builds_keeps_and_reads_back_the_pyramid(tmp_path: Path, small_lanes: None,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import unpack_fixture

    from gpuscope.reporters.html.server import Viewer

    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "user-cache"))
    path = unpack_fixture("program_mlp_adam", tmp_path)
    answers = []
    for kept in (False, True):
        with Report.open(path) as report:
            index = build_index(report)
            viewer = Viewer(report, index, 10**9, sidecar.report_key(path))
            viewer.start_lod()
            assert bool(viewer.lod) == kept  # the second reads what the first kept, at once
            deadline = time.monotonic() + 60
            while not viewer.lod and time.monotonic() < deadline:
                time.sleep(0.05)
            assert viewer.lod, "no levels of detail built"
            deadline = time.monotonic() + 60
            while not (tmp_path / f"{path.name}.cache" / "lod.bin").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            span = index.end_ns - index.start_ns
            answers.append(window(index, 0, span, 800, lod=viewer.lod))
            assert answers[-1] == window(index, 0, span, 800)
    assert answers[0] == answers[1]
    assert any(w["kind"] == "buckets" for w in answers[0]["lanes"])
    shutil.rmtree(tmp_path / f"{path.name}.cache")
