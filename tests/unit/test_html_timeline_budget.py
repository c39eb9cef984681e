"""Which lanes a file's timeline holds whole (``gpuscope report --max-events``): those of the
heaviest slices first (the most busy time per slice), as many as fit the budget; the others are
drawn as summaries."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpuscope.analysis.timeline.tracks import Lane, TimelineIndex, Track, build_index
from gpuscope.reporters.html.content import timeline_static, whole_first
from gpuscope.trace.report import Report

US = 1_000


def _lane(i: int, n: int, length: int) -> Lane:
    start = np.arange(n, dtype=np.int64) * 10 * length
    return Lane(i, i, 0, start, start + length, np.zeros(n, np.int32), np.zeros(n, np.int8))


def _index(lanes: list[Lane]) -> TimelineIndex:
    tracks = [Track(lane.id, "Process 1", f"row {lane.id}", "slices", [lane.id], pid=1) for lane in lanes]
    end = max(int(lane.end[-1]) for lane in lanes if len(lane))
    return TimelineIndex(tracks, lanes, ["k"], 0, end, [])


def _whole(index: TimelineIndex, budget: int) -> set[int]:
    return {w["lane"] for w in timeline_static(index, None, budget)["static"]["lanes"] if w["kind"] == "slices"}


def test_the_lanes_of_the_heaviest_slices_are_held_whole_first() -> None:
    # ten kernels of 1 ms; five API calls of 1 µs; eight of 10 µs; a lane without slices
    kernels, calls, short, empty = _lane(0, 10, 1_000 * US), _lane(1, 5, US), _lane(2, 8, 10 * US), _lane(3, 0, 1)
    index = _index([kernels, calls, short, empty])
    assert [lane.id for lane in whole_first(index.lanes)] == [3, 0, 2, 1]
    # smallest first would hold the calls and nothing else (5 + 8 > 12, 5 + 10 > 12): 5 µs of 10 ms
    assert _whole(index, 12) == {0, 3}
    assert _whole(index, 18) == {0, 2, 3}  # then the next heaviest that fits
    assert _whole(index, 15) == {0, 1, 3}  # 10 + 8 > 15: the lighter lane that still fits
    assert _whole(index, 23) == {0, 1, 2, 3}
    assert _whole(index, 0) == {3}


def test_a_recorded_runs_budget_holds_more_of_its_time_whole(tmp_path: Path) -> None:
    """On a recorded run whose slices exceed the budget, the lanes held whole cover more busy time
    than holding the smallest lanes first did, within the same budget."""
    from conftest import unpack_fixture

    with Report.open(unpack_fixture("program_mlp_adam", tmp_path)) as report:
        index = build_index(report)
    budget = 1000
    kept = _whole(index, budget)
    by_id = {lane.id: lane for lane in index.lanes}
    assert 0 < sum(len(by_id[i]) for i in kept) <= budget < index.events()
    left, smallest = budget, 0
    for lane in sorted(index.lanes, key=len):
        if len(lane) <= left:
            left -= len(lane)
            smallest += int(lane.cum[-1])
    assert sum(int(by_id[i].cum[-1]) for i in kept) > smallest
