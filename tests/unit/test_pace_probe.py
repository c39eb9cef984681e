"""The overhead probe of a program without step marks, paced by its CUDA graph launches
(capture/process/pace_probe.py, read back by analysis/steps/probe.py): collection goes off for a
stretch once the launches come at a steady pace, and the report compares the time per launch."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Callable

import duckdb
import pytest

from gpuscope.analysis.steps.overhead import collection_overhead
from gpuscope.analysis.steps.probe import PACE, _pace_split, probe_timings
from gpuscope.capture.capture_range import CaptureSpec
from gpuscope.capture.process import pace_probe
from gpuscope.capture.process.pace_probe import STRETCH_POLLS, PaceProbe, steady
from gpuscope.capture.process.window import CaptureWindow
from gpuscope.reporters.overview import overhead_line
from gpuscope.trace.report import Report
from gpuscope.trace.trim import probes_only
from gpuscope.units import duration


class Launches:
    """A program launching graphs every ``on_ns`` with collection on and every ``off_ns`` with it off."""

    def __init__(self, on_ns: int, off_ns: int, start_after_ns: int = 0) -> None:
        self.on_ns, self.off_ns = on_ns, off_ns
        self.collecting = True
        self.t = time.monotonic_ns() + start_after_ns
        self.n = 0.0
        self.lock = threading.Lock()

    def _advance(self) -> None:
        now = time.monotonic_ns()
        if now > self.t:
            self.n += (now - self.t) / (self.on_ns if self.collecting else self.off_ns)
            self.t = now

    def switch(self, on: bool) -> None:
        with self.lock:
            self._advance()
            self.collecting = on

    def count(self) -> int:
        with self.lock:
            self._advance()
            return int(self.n)


def _window(launches: Launches) -> tuple[CaptureWindow, list[bool], list[tuple[int, int | None, str]]]:
    switches: list[bool] = []
    rows: list[tuple[int, int | None, str]] = []

    def switch(on: bool) -> None:
        switches.append(on)
        launches.switch(on)

    w = CaptureWindow(CaptureSpec(), time.monotonic_ns, switch, lambda a, b, r: rows.append((a, b, r)))
    w.probe_gap_ns = 10_000_000_000  # one cycle in these tests
    w.begin()
    return w, switches, rows


def _wait(cond: Callable[[], bool], seconds: float = 10.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


def test_a_steady_stream_of_graph_launches_is_probed_and_its_pace_compared() -> None:
    launches = Launches(on_ns=100_000, off_ns=80_000)  # collection makes launches 25% further apart
    w, switches, rows = _window(launches)
    w.pace = PaceProbe(w, launches.count)
    w.pace.start()
    def done() -> bool:
        return bool(w.pace.cycles) and len(w.pace.cycles[0]["polls"]) == w.pace.cycles[0]["on"] + 1 + STRETCH_POLLS

    assert _wait(done), "a steady stream gets a probe, whole"
    info = w.finish()
    cycle = info["pace_probes"][0]
    assert info["probes"] == 1 and switches[:3] == [True, False, True]
    polls, off, on = cycle["polls"], cycle["off"], cycle["on"]
    assert off >= STRETCH_POLLS and on > off and len(polls) > on
    closed = [r for r in rows if r[1] is not None]
    n_off = polls[off][1]
    assert closed[0][2] == f"process start to overhead probe at CUDA graph launch {n_off}"
    assert rows[-1][2].startswith("end of overhead probe at CUDA graph launch")
    with_on, with_off = _pace_split(polls, off, on)
    assert len(with_off) >= 2 and len(with_on) >= 2
    assert sorted(with_off)[len(with_off) // 2] == pytest.approx(80_000, rel=0.1)
    assert sorted(with_on)[len(with_on) // 2] == pytest.approx(100_000, rel=0.1)


def test_no_probe_by_pace_once_steps_are_marked_or_without_launches() -> None:
    marked = Launches(100_000, 80_000)
    w, switches, _ = _window(marked)
    w.step_mark("torch", time.monotonic_ns())  # the step probe's program
    w.pace = PaceProbe(w, marked.count)
    w.pace.start()
    assert _wait(lambda: not w.pace._thread.is_alive(), 2.0), "the paced probe leaves it to the step probe"
    quiet = Launches(100_000, 80_000, start_after_ns=10**12)  # no graph launch in this test's time
    w2, switches2, _ = _window(quiet)
    w2.pace = PaceProbe(w2, quiet.count)
    w2.pace.start()
    time.sleep(0.4)
    assert switches == [True] and switches2 == [True], "collection stayed on"
    assert w.finish().get("pace_probes") is None and w2.finish().get("pace_probes") is None


def test_steady_asks_for_enough_launches_at_one_pace() -> None:
    polls = [(i * 10, i * 10) for i in range(STRETCH_POLLS + 1)]  # 10 a poll
    assert steady(polls)
    assert not steady(polls[:-1]), "a whole stretch is needed"
    assert not steady([(i * 10, i) for i in range(STRETCH_POLLS + 1)]), "too few launches"
    burst = [(i * 10, 0 if i <= STRETCH_POLLS // 2 else 100 * i) for i in range(STRETCH_POLLS + 1)]
    assert not steady(burst), "a burst after a pause is not a pace"


def test_the_window_refuses_a_paced_probe_while_a_step_probe_runs_or_after_the_end() -> None:
    w, switches, _ = _window(Launches(1, 1))
    w._probe_until = 5
    assert not w.pace_switch(False, 10)
    w._probe_until = 0
    w.finish()
    assert not w.pace_switch(False, 10) and switches == [True, False]


def test_split_leaves_out_the_interval_after_each_switch() -> None:
    # intervals of 10 ms: 100 launches each with collection on, 125 off; the switches' intervals odd
    counts = [100] * 6 + [7] + [125] * 5 + [3] + [100] * 5
    polls, n = [[0, 0]], 0
    for i, c in enumerate(counts, 1):
        n += c
        polls.append([i * 10_000_000, n])
    with_on, with_off = _pace_split(polls, 6, 12)
    assert set(with_off) == {80_000} and len(with_off) == 5
    assert set(with_on) == {100_000} and len(with_on) == 11


def _report_with_cycles(path: Path, cycles: list[dict]) -> None:  # type: ignore[type-arg]
    con = duckdb.connect(str(path))
    pid = con.execute("SELECT min(pid) FROM process").fetchone()[0]
    con.execute("DELETE FROM collector WHERE name = 'capture'")
    con.execute("INSERT INTO collector VALUES (?, 'capture', 1, 0, 0, 0, ?)",
                [pid, json.dumps({"probes": len(cycles), "pace_probes": cycles})])
    start = con.execute("SELECT min(start_ns) FROM kernel").fetchone()[0]
    con.execute("INSERT INTO capture_window VALUES (?, ?, ?, ?)",
                [pid, start, start + 1, "process start to overhead probe at CUDA graph launch 600"])
    con.close()


def test_the_report_reads_the_paced_probe_and_the_line_says_what_it_measured(recorded: Callable[[str], Path]) -> None:
    path = recorded("client_cupy_elementwise")
    polls, n = [[0, 0]], 0
    for i, c in enumerate([100] * 6 + [50] + [125] * 5 + [60] + [100] * 5, 1):
        n += c
        polls.append([i * 10_000_000, n])
    _report_with_cycles(path, [{"polls": polls, "off": 6, "on": 12}, {"polls": "damaged", "off": 1, "on": 2}])
    with Report.open(path) as report:
        timing = next(iter(probe_timings(report).values()))
        assert timing.source == PACE and timing.measured and timing.significant
        assert timing.slowdown == pytest.approx(0.25)
        assert timing.added_ns() == 0.0 and not timing.times_steps
        line = overhead_line(collection_overhead(report))
        with duckdb.connect(str(path), read_only=True) as con:
            assert probes_only(con)
    assert "collection made the program 25% slower" in line
    assert f"a graph launch came every {duration(80_000)}" in line and f"every {duration(100_000)} with it on" in line


def test_too_few_intervals_are_no_measurement(recorded: Callable[[str], Path]) -> None:
    path = recorded("client_cupy_elementwise")
    _report_with_cycles(path, [{"polls": [[0, 0], [10, 5], [20, 10], [30, 15]], "off": 1, "on": 3}])
    with Report.open(path) as report:
        timing = next(iter(probe_timings(report).values()))
    assert not timing.measured and "no measurement" in timing.describe()


def test_the_poll_interval_the_report_names_is_the_one_capture_uses() -> None:
    from gpuscope.analysis.steps import probe

    assert probe.POLL_NS == pace_probe.POLL_NS


def test_a_cycle_the_process_ends_in_is_kept_with_collection_left_off() -> None:
    launches = Launches(on_ns=100_000, off_ns=80_000)
    w, switches, rows = _window(launches)
    w.pace = PaceProbe(w, launches.count)
    w.pace.start()
    assert _wait(lambda: w.probing), "the probe switched collection off"
    info = w.finish()
    cycle = info["pace_probes"][0]
    assert cycle["on"] >= len(cycle["polls"]) - 1 >= cycle["off"], "no poll with collection back on"
    assert _wait(lambda: not w.pace._thread.is_alive(), 2.0)
    assert switches == [True, False] and rows[-1][2].endswith(f"overhead probe at CUDA graph launch {cycle['polls'][cycle['off']][1]}")
    _, with_off = _pace_split(cycle["polls"], cycle["off"], cycle["on"])
    assert all(v == pytest.approx(80_000, rel=0.2) for v in with_off)


def test_a_recorded_jax_loop_gets_its_profiling_cost_from_the_paced_probe(recorded: Callable[[str], Path]) -> None:
    """JAX on an H200 with GPUSCOPE_PACE_PROBE=1: no step marks, one CUDA graph per jitted call; three
    probes measured the pace, and the diagnosis takes that cost out of the host's share of its steps."""
    from gpuscope.analysis.diagnosis import diagnose

    with Report.open(recorded("client_jax_mlp_paced")) as report:
        timing = next(iter(probe_timings(report).values()))
        assert (timing.source, timing.probes) == (PACE, 3) and len(timing.off_ns) == 15
        assert timing.significant and 0.05 < timing.slowdown < 0.4
        diag = diagnose(report)
    note = next(n for n in diag.notes if "profiling's own cost, measured" in n)
    assert "CUDA graph launches" in note and "less the" in note and "per step that collection added" in note


def test_a_lopsided_interval_is_given_as_its_ends_not_as_a_spread() -> None:
    from gpuscope.analysis.steps.probe import ProbeTiming

    # off steps 10 ms; recorded ones mostly 12 ms with a long tail: the interval is above 0 but wide
    wide = ProbeTiming(1, 1, (10_000_000, 10_100_000, 9_900_000), (12_000_000, 40_000_000, 13_000_000, 45_000_000, 12_500_000))
    assert wide.significant and wide.noise > wide.slowdown
    lo, hi = wide.interval
    assert f"(95% interval {round(lo * 100)}% to {round(hi * 100)}%)" in wide.verdict() and "±" not in wide.verdict()
    narrow = ProbeTiming(1, 1, (10_000_000,) * 6, (12_000_000,) * 6)
    assert narrow.verdict() == "collection made a step 20% longer (±0%)"
