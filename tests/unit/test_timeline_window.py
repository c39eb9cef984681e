"""The timeline's index and window queries: slices when few, exact per-pixel busy time when many,
nested ranges on their depth, details from the report, search and span summaries."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpuscope.analysis.timeline.details import details, search, span_summary
from gpuscope.analysis.timeline.tracks import Lane, TimelineIndex, Track, build_index
from gpuscope.analysis.timeline.window import counters, lane_window, window
from report_builder import torch_training


def _lane(start: list[int], end: list[int], name: list[int]) -> Lane:
    return Lane(0, 0, 0, np.array(start, np.int64), np.array(end, np.int64), np.array(name, np.int32),
                np.zeros(len(start), np.int8))


def _random_lane(n: int, seed: int) -> Lane:
    rng = np.random.default_rng(seed)
    gaps = rng.integers(0, 300, n)
    durs = rng.integers(1, 500, n)
    start = np.cumsum(gaps + np.concatenate([[0], durs[:-1]]))
    return _lane(start.tolist(), (start + durs).tolist(), rng.integers(0, 7, n).tolist())


def test_few_slices_come_back_as_they_are() -> None:
    lane = _lane([10, 30, 50], [20, 40, 60], [1, 2, 3])
    w = lane_window(lane, 25, 55, px=100)
    assert w["kind"] == "slices"
    assert (w["first"], w["start"], w["end"], w["name"]) == (1, [30, 50], [40, 60], [2, 3])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_buckets_hold_the_exact_busy_time_and_slice_count_of_each_pixel(seed: int) -> None:
    lane = _random_lane(5000, seed)
    t0, t1, px = int(lane.start[300]) + 17, int(lane.end[4200]) - 5, 97
    w = lane_window(lane, t0, t1, px, max_slices=100)
    assert w["kind"] == "buckets" and len(w["busy"]) == px
    edges = t0 + (np.arange(px + 1, dtype=np.float64) * ((t1 - t0) / px)).astype(np.int64)
    for p in range(px):
        a, b = edges[p], edges[p + 1]
        overlap = np.clip(np.minimum(lane.end, b) - np.maximum(lane.start, a), 0, None).sum()
        assert w["busy"][p] == pytest.approx(overlap / (b - a), abs=0.0006)
        assert w["count"][p] == int(((lane.start >= a) & (lane.start < b)).sum())
    assert sum(w["count"]) == int(((lane.start >= t0) & (lane.start < edges[-1])).sum())


def test_a_pixel_covered_by_one_slice_is_named_after_it() -> None:
    start = list(range(0, 1000, 10))
    lane = _lane(start + [1000], [s + 9 for s in start] + [5000], [1] * len(start) + [4])
    w = lane_window(lane, 0, 5000, px=10, max_slices=5)
    assert w["kind"] == "buckets"
    assert w["name"][0] == 1 and w["busy"][0] == pytest.approx(0.9)
    assert w["name"][5:] == [4] * 5 and w["busy"][5:] == [1.0] * 5


def test_window_times_are_from_the_timeline_start_and_names_are_only_those_used() -> None:
    lane = _lane([1_000_010, 1_000_030], [1_000_020, 1_000_040], [0, 2])
    index = TimelineIndex([Track(0, "g", "t", "slices", [0])], [lane], ["a", "b", "c"], 1_000_000, 1_000_100, [])
    w = window(index, 0, 100, px=50)
    assert w["lanes"][0]["start"] == [10, 30] and w["names"] == {0: "a", 2: "c"}


def test_counters_keep_each_pixels_range() -> None:
    track = Track(0, "Counters", "gpu0.util_percent", "counter")
    track.t = np.arange(0, 1000, dtype=np.int64)
    track.v = (np.arange(1000) % 10).astype(float)
    index = TimelineIndex([track], [], [], 0, 1000, [])
    [c] = counters(index, 0, 1000, px=10)
    assert len(c["t"]) == 10 and c["lo"] == [0.0] * 10 and c["hi"] == [9.0] * 10
    [raw] = counters(index, 500, 510, px=100)
    assert raw["t"] == list(range(499, 510))  # with the sample before the window: the line starts at t0


@pytest.fixture
def training(tmp_path: Path):  # type: ignore[no-untyped-def]
    with torch_training(tmp_path / "t.gpuscope") as report:
        yield report, build_index(report)


def test_ranges_nest_by_depth_on_their_threads_track(training) -> None:  # type: ignore[no-untyped-def]
    report, index = training
    [track] = [t for t in index.tracks if t.label == "Thread 1: Ranges"]
    by_depth = {index.lanes[i].depth: [index.names[n] for n in index.lanes[i].name] for i in track.lanes}
    assert by_depth[0][:3] == ["DataLoader.__next__", "Net", "backward"]
    assert by_depth[1][:2] == ["Net.enc", "Net.head"] and by_depth[2] == ["Net.enc.fc"]


def test_a_kernels_details_name_its_launch_range_path_and_configuration(training) -> None:  # type: ignore[no-untyped-def]
    report, index = training
    [gpu] = [t for t in index.tracks if t.stream is not None]
    lane = index.lanes[gpu.lanes[0]]
    i = int(np.flatnonzero(lane.start == 10100)[0])  # the gemm launched at 4000 inside Net > Net.enc > Net.enc.fc
    d = details(report, index, lane.id, i)
    assert d is not None and d["name"] == "gemm" and d["source"] == "kernel"
    fields = {label: value for label, value, _ in d["fields"]}
    assert fields["Range path"] == "Net > Net.enc > Net.enc.fc"
    assert fields["Duration"] == 500 and fields["Stream"] == 7
    assert d["launch"]["name"] == "cudaLaunchKernel" and d["launch"]["start_ns"] == 4000
    assert details(report, index, lane.id, len(lane)) is None


def test_search_and_span_summary_count_what_ran(training) -> None:  # type: ignore[no-untyped-def]
    report, index = training
    found = search(index, "GEMM")
    assert found["total"] == 5 and [m[2] for m in found["matches"]] == [10100 - index.start_ns, 10700 - index.start_ns,
                                                                        13000 - index.start_ns, 13600 - index.start_ns,
                                                                        33000 - index.start_ns]
    o = index.start_ns
    s = span_summary(index, 10500 - o, 13800 - o)
    kernels = {name: (ns, n) for name, ns, n in s["kernels"]}
    # gemm: 100 of 10100-10600, all of 10700-11000, 600 of 13000-13600, 200 of 13600-14400
    assert kernels["gemm"] == (100 + 300 + 600 + 200, 4)
    [(label, busy)] = s["busy"]
    ran = sum(ns for ns, _ in kernels.values())
    assert busy == pytest.approx(ran / 3300)


def test_the_files_details_are_those_of_a_click_in_the_viewer(training) -> None:  # type: ignore[no-untyped-def]
    from gpuscope.reporters.html.content import file_details
    from gpuscope.units import human

    report, index = training
    gpu_lanes = [i for t in index.tracks if t.stream is not None for i in t.lanes]
    got = file_details(report, index, [lane.id for lane in index.lanes])
    assert set(got["lanes"]) == {str(i) for i in gpu_lanes}
    checked = 0
    for lane_id in gpu_lanes:
        per = got["lanes"][str(lane_id)]
        for i in range(len(index.lanes[lane_id])):
            one = details(report, index, lane_id, i)
            assert one is not None
            want = [[label, "" if label == "Correlation" else human(v, unit)] for label, v, unit in one["fields"]
                    if label not in ("Start", "Duration")]
            if one["launch"] is not None:
                want.append(["Launched by", f"{one['launch']['name']} on thread {one['launch']['tid']}"])
            assert got["fields"][per["fields"][i]] == want
            corr = dict((label, v) for label, v, _ in one["fields"]).get("Correlation")
            assert per["correlation"][i] == corr
            checked += one["launch"] is not None and "Range path" in dict(got["fields"][per["fields"][i]])
    assert checked >= 3  # launches and range paths found in bulk, as for one slice


def test_python_samples_make_a_flame_strip_one_lane_per_depth(tmp_path: Path) -> None:
    from report_builder import ReportBuilder, add_stack

    b = ReportBuilder(tmp_path / "f.gpuscope")
    main = [("train.py", 10, "main")]
    step = main + [("train.py", 20, "step")]
    fwd, bwd = step + [("model.py", 5, "forward")], step + [("train.py", 22, "backward")]
    stacks = [add_stack(b, s) for s in (fwd, fwd, bwd, main, fwd)]
    con = b.writer.con
    for k, stack in enumerate(stacks):  # samples 0..4 at 1 ms apart; the last one after a gap
        ts = 1_000_000 * k + (5_000_000 if k == 4 else 0)
        con.execute("INSERT INTO cpu_sample (pid, tid, ts_ns, weight_ns, stack_id) VALUES (?, 7, ?, 1000000, ?)",
                    [b.pid, ts, stack])
    b.kernel("k", 0, 10, tid=7, launch=0)
    report = b.open()
    index = build_index(report)
    [track] = [t for t in index.tracks if t.label == "Thread 7: Python stacks"]
    lanes = [index.lanes[i] for i in track.lanes]
    got = [[(int(s), int(e), index.names[n]) for s, e, n in zip(ln.start, ln.end, ln.name)] for ln in lanes]
    ms = 1_000_000
    assert [ln.depth for ln in lanes] == [0, 1, 2]
    assert got[0] == [(0, 4 * ms, "main"), (9 * ms, 10 * ms, "main")]  # the gap ends every slice
    assert got[1] == [(0, 3 * ms, "step"), (9 * ms, 10 * ms, "step")]
    assert got[2] == [(0, 2 * ms, "forward"), (2 * ms, 3 * ms, "backward"), (9 * ms, 10 * ms, "forward")]
    d = details(report, index, lanes[2].id, 1)
    assert d is not None and d["name"] == "backward" and d["source"] == "cpu_stack"
    report.close()
