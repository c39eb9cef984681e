"""One vocabulary for steps (found, recorded, warm-up, in the overhead probe, timed with collection
off), the same in the end-of-run summary, step_sum, analyze and the overhead line; on a hand-made
run of 60 optimizer steps with two overhead probes."""

from __future__ import annotations

from pathlib import Path

from report_builder import probe_run

from gpuscope.analysis.steps.overhead import collection_overhead
from gpuscope.analysis.steps.counts import describe_counts, step_counts
from gpuscope.analysis.steps.table import step_sum
from gpuscope.reporters.overview import overhead_line
from gpuscope.trace.report import Report

MS = 1_000_000


def _run(path: Path, off_ms: int) -> Report:
    return probe_run(path, off_ms)


def test_every_output_counts_the_steps_alike(tmp_path: Path) -> None:
    with _run(tmp_path / "r.gpuscope", off_ms=5) as r:
        (c,) = step_counts(r)
        table = step_sum(r)
        o = collection_overhead(r)
    assert c.found == 60 and len(c.recorded) == 52 and c.warmup == (1,) and c.steady == 51
    assert c.in_probe == (11, 12, 13, 14, 36, 37, 38, 39) and c.timed_off == (12, 13, 37, 38)
    assert describe_counts([c], "PyTorch's marks") == (
        "60 steps found from PyTorch's marks: 52 recorded (1 warm-up); 8 in the overhead probe "
        "(steps 11-14, 36-39), 4 of them timed with collection off")
    # step_sum: the recorded steps by number, the probe's steps marked, none of them in the summary rows
    steps = [str(row[1]) for row in table.rows if str(row[1]).split()[0].isdigit()]
    assert [s for s in steps if s.isdigit()] == [str(s) for s in c.recorded]
    assert [s for s in steps if not s.isdigit()] == [
        "11 (switching off)", "12 (collection off)", "13 (collection off)", "14 (switching on)",
        "36 (switching off)", "37 (collection off)", "38 (collection off)", "39 (switching on)"]
    assert [int(s.split()[0]) for s in steps] == list(range(1, 61))  # in step order, none missing
    off_rows = [row for row in table.rows if str(row[1]) == "12 (collection off)"]
    assert off_rows[0][3] == 5 * MS and off_rows[0][4] is None  # mark to mark; nothing recorded on the GPU
    median = next(row for row in table.rows if row[1] == "median")
    assert median[3] == 10 * MS  # the 5 ms steps with collection off are not in it
    note = next(n for n in table.notes if "overhead probe" in n)
    assert "steps 11-14, 36-39 ran in the overhead probe" in note and "51 recorded steps after warm-up (step 1)" in note
    # the overhead line: one estimate, its spread, what it rests on, then the parts
    (t,) = o.probes
    assert t.off_steps == c.timed_off and len(t.on_ns) == c.steady
    line = overhead_line(o)
    assert line.startswith("Collection overhead: collection made a step 100% longer (±0%), measured by the "
                           "overhead probe in process 100: 4 steps timed with collection off (steps 12-13, "
                           "37-38; 2 probes)"), line
    assert "It leaves out what stays on while a probe runs" in line and line.count("longer") == 1


def test_without_warm_up_the_probe_leaves_out_step_1_alone(tmp_path: Path) -> None:
    """step_sum flags no warm-up: the probe's recorded steps are all of step_sum's but step 1, which
    no mark starts, and it says so (it said 'after warm-up' of steps step_sum did not flag)."""
    with probe_run(tmp_path / "w.gpuscope", off_ms=5, first_ms=10) as r:
        (c,) = step_counts(r)
        o = collection_overhead(r)
    assert c.warmup == () and len(c.recorded) == 52
    assert "against 10 ms for the 51 recorded steps after step 1. It leaves out" in overhead_line(o)
    assert "warm-up" not in overhead_line(o)


def test_a_negative_slowdown_is_noise_everywhere(tmp_path: Path) -> None:
    """Steps with collection off that took longer (a busy machine) are no measurable slowdown, in the
    overhead line, step_sum's note and analyze alike; never '-50% longer'."""
    from gpuscope.analysis.diagnosis import diagnose
    from gpuscope.reporters.findings_table import render

    with _run(tmp_path / "slow.gpuscope", off_ms=20) as r:
        o = collection_overhead(r)
        table = step_sum(r)
        analyzed = render(diagnose(r))
    said = [overhead_line(o), " ".join(table.notes), " ".join(analyzed.split())]
    for text in said:
        assert "no measurable slowdown (within the noise: ±50%)" in text, text
        assert "-50%" not in text and "% longer" not in text
    assert o.probes[0].cost_share == 0.0
    assert "mean of 51 steady steps; 60 steps found from PyTorch's marks at the end of optimizer.step(): " \
           "52 recorded (1 warm-up); 8 in the overhead probe" in said[2]


def test_the_viewer_marks_the_probe_steps_instead_of_leaving_gaps(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The timeline's steps are the recorded ones, in order; the probe's steps come apart, each with
    what happened in it, and survive the index kept beside the report."""
    from gpuscope.analysis.timeline import store as timeline_store
    from gpuscope.analysis.timeline.tracks import build_index
    from gpuscope.trace import sidecar

    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "user-cache"))
    path = tmp_path / "v.gpuscope"
    with _run(path, off_ms=5) as r:
        index = build_index(r)
    meta = index.describe()
    assert [s["step"] for s in meta["steps"]] == [s for s in range(1, 61) if not (11 <= s <= 14 or 36 <= s <= 39)]
    probe = meta["probe_steps"]
    assert [(s["step"], s["what"]) for s in probe] == [
        (11, "switching off"), (12, "collection off"), (13, "collection off"), (14, "switching on"),
        (36, "switching off"), (37, "collection off"), (38, "collection off"), (39, "switching on")]
    # the bands fill the gaps between the recorded steps: step 10 ends where step 11 starts, 14 where 15 starts
    by_step = {s["step"]: s for s in meta["steps"]}
    assert probe[0]["start"] == by_step[10]["end"] and probe[3]["end"] == by_step[15]["start"]
    assert all(s["end"] - s["start"] == (5 * MS) for s in probe)
    timeline_store.keep(path, index, sidecar.report_key(path))
    kept = timeline_store.cached(path)
    assert kept is not None and kept.probe_steps == index.probe_steps
