"""Reports trimmed to their capture windows when written: a recorded GPT run cut to steps 4-6, and
hand-made reports for launch points, step marks, processes without windows and host counters."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import duckdb
from report_builder import ReportBuilder

from gpuscope.analysis.ops.attribution import ops_table
from gpuscope.analysis.steps.capture import capture_summary
from gpuscope.analysis.steps.source import op_steps_table, step_source, steps_table
from gpuscope.analysis.steps.table import step_sum
from gpuscope.trace import schema, trim
from gpuscope.trace.report import Report

SUMMARY = ("mean", "median", "p95", "stddev")


def _steps(report: Report) -> dict[str, dict]:
    return {r["Step"]: r for r in step_sum(report).records() if r["Step"] not in SUMMARY}


def test_trimming_a_recorded_run_to_steps_keeps_exactly_their_kernels(
        recorded: Callable[[str], Path]) -> None:
    path = recorded("gpt_eager")
    with Report.open(path) as full:
        steps = full.sql(f"SELECT step, start_ns, end_ns FROM {steps_table(full, step_source(full))} ORDER BY step")
        in_steps = full.sql(
            f"""SELECT x.step, count(*) FROM {op_steps_table(full, step_source(full))} x
                JOIN {ops_table(full)} o USING (op_id) WHERE o.kind = 'kernel' GROUP BY x.step""")
        before = _steps(full)
        marks = full.count("nvtx_range WHERE kind = 'mark'")
        kept_ranges = full.sql("SELECT count(*) FROM nvtx_range WHERE kind = 'range' AND start_ns BETWEEN ? AND ?",
                               [steps[3][1], steps[5][2]])[0][0]
    per_step = dict(in_steps)
    start, end = steps[3][1], steps[5][2]  # the start of step 4 (mark 3) and the end of step 6 (mark 6)
    con = duckdb.connect(str(path))
    for stmt in schema.create_statements():  # a version 2 recording: add the tables of version 4
        con.execute(stmt)
    con.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    con.execute("INSERT INTO meta VALUES ('capture_range', ?)",
                [json.dumps({"limited": True, "description": "steps 4 to 6", "spec": {"first_step": 4, "last_step": 6}})])
    con.execute("INSERT INTO capture_window VALUES (1529, ?, ?, 'step 4 to step 6')", [start, end])
    removed = trim.trim(con)
    con.close()
    assert removed["kernel"] > 0 and removed["api_call"] > 0
    with Report.open(path) as cut:
        assert cut.count("kernel") == per_step[4] + per_step[5] + per_step[6] == 3 * 197
        # every kernel left was launched inside the window: its launch call began there, or, for the
        # kernels this recording has no launch call of, CUPTI saw it queued there
        launches = cut.sql("""SELECT a.start_ns IS NOT NULL, coalesce(a.start_ns, k.queued_ns)
                              FROM kernel k LEFT JOIN api_call a USING (pid, correlation_id)""")
        assert all(start <= t <= end for _, t in launches)
        assert sum(1 for by_api, _ in launches if by_api) > 500
        after = _steps(cut)
        assert sorted(after) == ["4", "5", "6"]  # numbered as in the whole run
        for n in ("4", "5", "6"):
            assert {k: after[n][k] for k in ("Duration", "GPU Busy", "Kernels")} == \
                   {k: before[n][k] for k in ("Duration", "GPU Busy", "Kernels")}
        assert cut.count("nvtx_range WHERE kind = 'mark'") == marks  # step marks stay
        assert cut.count("nvtx_range WHERE kind = 'range'") == kept_ranges
        summary = capture_summary(cut)
        assert summary is not None and summary.windows == 1 and summary.captured_ns == end - start
        assert summary.problems == []


def _two_processes(path: Path, limited: bool) -> Report:
    b = ReportBuilder(path, pid=1)
    b.writer.con.execute("INSERT INTO process (pid, ppid, start_ns, clock) VALUES (2, 1, 0, 'cupti')")
    b.kernel("before", 100, 110, queued=90)
    b.kernel("queued inside", 5000, 5100, queued=1500)          # runs after the window: launched inside
    b.kernel("api inside", 2100, 2200, tid=1, launch=1900)
    b.kernel("no queue time", 1200, 1300, queued=0)            # placed at its GPU start
    b.memcpy(3500, 3600)                                      # after the window
    b.range("starts before", 500, 1500, 1, source="gpuscope", category="")
    b.range("inside", 1100, 2500, 1, source="gpuscope", category="")
    b.mark("step", 200, 1)
    b.mark("step", 1800, 1)
    b.kernel("other process", 1500, 1600, queued=1500, pid=2)
    con = b.writer.con
    con.execute("INSERT INTO capture_window VALUES (1, 1000, 2000, 'gpuscope.start() to gpuscope.stop()')")
    con.execute("INSERT INTO host_counter VALUES (1500, 0, 'cpu0.util_percent', 5), (2500, 0, 'cpu0.util_percent', 6)")
    if limited:
        b.writer.set_meta(capture_range={"limited": True, "description": "x", "spec": {"range": "api"}})
    return b.open()


def test_launch_points_marks_and_processes(tmp_path: Path) -> None:
    with _two_processes(tmp_path / "a.gpuscope", limited=True) as r:
        names = {n for (n,) in r.sql("SELECT s.value FROM kernel k JOIN kernel_config c ON c.id = k.config_id "
                                     "JOIN string s ON s.id = c.name_id")}
        assert names == {"queued inside", "api inside", "no queue time"}  # pid 2 had no window
        assert r.count("memcpy") == 0
        assert [n for (n,) in r.sql("SELECT s.value FROM nvtx_range x JOIN string s ON s.id = x.name_id "
                                    "WHERE kind = 'range'")] == ["inside"]
        assert r.count("nvtx_range WHERE kind = 'mark'") == 2
        assert r.count("host_counter") == 1  # the one in the window
        assert r.meta["capture_trimmed"] == {"kernel": 2, "memcpy": 1, "nvtx_range": 1, "host_counter": 1}
    with _two_processes(tmp_path / "b.gpuscope", limited=False) as r:
        # recorded whole but paused by gpuscope.stop() in process 1: process 2 stays whole
        assert r.count("kernel WHERE pid = 2") == 1 and r.count("kernel WHERE pid = 1") == 3
        assert r.count("host_counter") == 2


def test_a_report_recorded_whole_is_left_alone(tmp_path: Path) -> None:
    b = ReportBuilder(tmp_path / "w.gpuscope")
    b.kernel("k", 100, 110, queued=90)
    with b.open() as r:
        assert r.count("kernel") == 1 and "capture_trimmed" not in r.meta
        assert capture_summary(r) is None


def test_anchors_at_the_switches_keep_work_launched_inside_the_window(tmp_path: Path) -> None:
    # no queued times: the window's ends are anchored, so work launched before or after lies
    # outside, however late it ran on the GPU
    b = ReportBuilder(tmp_path / "t.gpuscope", pid=1)
    b.kernel("launched before, ran inside", 1200, 1300)
    b.anchor(990)  # right before collection turned on
    b.kernel("launched inside, ran after", 2500, 2600)
    b.memcpy(2600, 2700)  # launched inside too
    b.anchor(1990)  # right before it turned off
    b.kernel("launched after", 2700, 2800)
    b.writer.con.execute("INSERT INTO capture_window VALUES (1, 1000, 2000, 'gpuscope.start() to gpuscope.stop()')")
    b.writer.set_meta(capture_range={"limited": True, "description": "x", "spec": {"range": "api"}})
    with b.open() as r:
        names = {n for (n,) in r.sql("SELECT s.value FROM kernel k JOIN kernel_config c ON c.id = k.config_id "
                                     "JOIN string s ON s.id = c.name_id")}
        assert names == {"launched inside, ran after"}
        assert r.count("memcpy") == 1
        assert r.meta["capture_trimmed"]["kernel"] == 2
