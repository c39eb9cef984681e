"""The collection-overhead line of the profile summary, on recorded reports (collector and CUPTI
overhead rows) and on a hand-made one with gpuscope's own per-call costs; and what the summary says
when a capture range caught less than asked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from report_builder import ReportBuilder

from gpuscope.analysis.steps.capture import capture_summary
from gpuscope.analysis.steps.overhead import OverheadPart, collection_overhead
from gpuscope.analysis.overview import overview
from gpuscope.reporters.overview import overhead_line, render
from gpuscope.trace.report import Report


def test_recorded_mlp(recorded: Callable[[str], Path]) -> None:
    with Report.open(recorded("mlp_api")) as r:
        o = collection_overhead(r)
        # CUPTI's own overhead kinds only: module and lazy function loading happen without a profiler too
        own = r.sql("SELECT sum(end_ns - start_ns) FROM overhead WHERE kind IN ('CuptiResource', "
                    "'ActivityBufferRequest', 'CuptiInstrumentation', 'CuptiBufferFlush')")[0][0]
        everything = r.sql("SELECT sum(end_ns - start_ns) FROM overhead")[0][0]
        # CUPTI inside the CUDA calls: 246 kernels, 23 copies, 5 sets, at the H100's 1.16 µs each
        cupti_calls = (246 + 23 + 5) * 1_160
        assert o.parts == [OverheadPart("CUPTI buffers", 78_629_560),
                           OverheadPart("CUPTI in CUDA calls", cupti_calls, estimated=True),
                           OverheadPart("CUPTI overhead records", own)]
        assert own == 35_116_928 < everything
        assert o.total_ns == 113_746_488 + cupti_calls and round(o.percent or 0, 2) == 1.29
        assert overhead_line(o) == (
            "Collection overhead: not measured (no overhead probe timed the program with collection off). What "
            "gpuscope times, a lower bound: 114.1 ms in the program (1.3% of 8.832 s wall): CUPTI buffers 78.6 ms, CUPTI in "
            "CUDA calls ~317.8 µs, CUPTI overhead records 35.1 ms; not included: CUPTI's cost per CUDA call on this "
            "machine (an H100's, 1.16 µs, is used); CUPTI's start (attaching, and the program's kernels loaded under it); "
                "the report writer beside the program (it competes for the cores). What CUPTI adds to each kernel "
                "beyond the launch call is not counted")
        page = render(overview(r))
        assert " ".join(overhead_line(o).split()) in " ".join(page.split())  # wrapped to the terminal's width
        assert max(len(line) for line in page.splitlines() if "Collection overhead" in line) <= 120


def test_recorded_gpt_without_per_call_costs_says_so(recorded: Callable[[str], Path]) -> None:
    with Report.open(recorded("gpt_eager")) as r:
        o = collection_overhead(r)
        assert [p.name for p in o.parts] == ["CUPTI buffers", "CUPTI in CUDA calls", "CUPTI overhead records"]
        assert o.not_measured == ["ranges and PyTorch hooks"]
        assert "(ranges and PyTorch hooks: not measured in this report); not included: " in overhead_line(o)


def test_estimated_hooks_and_ranges_and_measured_collectors(tmp_path: Path) -> None:
    b = ReportBuilder(tmp_path / "o.gpuscope")
    for i in range(10):
        b.range(f"M.{i}", 100 * i, 100 * i + 50, 1, category="forward")
    for i in range(4):
        b.range(f"M.{i}", 2000 + i, 2100, 2, category="backward")
    for i in range(3):
        b.range("mine", 3000 + i, 3100, 1, source="gpuscope", category="")
    for i in range(5):  # recorded by CUPTI: not gpuscope's cost
        b.range("c", 4000 + i, 4100, 1, source="nvtx", category=None)
    b.mark("step", 5000, 1)
    for t in range(7):
        b.anchor(6000 + t)
    costs = {"ranges": 22, "ns_per_range": 2000, "ns_per_module_call": 5000, "ns_per_module_call_with_backward": 50000,
             "ns_per_anchor": 3000}
    con = b.writer.con
    con.execute("INSERT INTO collector VALUES (100, 'ranges', 22, 0, 0, 0, ?)", [json.dumps(costs)])
    con.execute("INSERT INTO collector VALUES (100, 'sampler', 900, 0, 1000000, 0, '')")
    con.execute("INSERT INTO collector VALUES (100, 'torch-ops', 50, 0, 777, 0, '{}')")
    # the host waiting for room in a full command buffer (50-150) is the program waiting for its GPU: not counted
    con.execute("INSERT INTO overhead VALUES (10, 30, 100, 1, 'LazyFunctionLoading'), (40, 45, 100, 1, 'CuptiBufferFlush'), "
                "(50, 150, 100, 1, 'CommandBufferFull')")
    with b.open(wall_ns=100_000_000) as r:
        o = collection_overhead(r)
    # an old sampler row (no held_ns in its detail): its CPU time stands in; the operator row's callback
    # time is not a part of its own (operators are estimated from the counts in its detail, none here)
    assert o.parts == [
        OverheadPart("Python sampler", 1_000_000),
        OverheadPart("CUPTI overhead records", 5),
        OverheadPart("PyTorch hooks", 4 * 50_000 + 6 * 5_000, estimated=True),
        OverheadPart("launch anchors", 7 * 3_000, estimated=True),
        OverheadPart("ranges", 3 * 2_000, estimated=True),
    ]
    assert overhead_line(o) == ("Collection overhead: not measured (no overhead probe timed the program with "
                                "collection off). What gpuscope times, a lower bound: 1.26 ms in the program (1.3% of 100.0 ms wall): Python "
                                "sampler 1 ms, CUPTI overhead records 5 ns, PyTorch hooks ~230.0 µs, launch anchors "
                                "~21 µs, ranges ~6 µs; not included: "
                                "the report writer beside the program (it competes for the cores)")


def _limited(path: Path, spec: dict, infos: list[dict], marks: int = 0, window: bool = False) -> Report:
    b = ReportBuilder(path)
    for i in range(marks):
        b.mark("step", 1000 * (i + 1), 1)
    for info in infos:
        b.writer.con.execute("INSERT INTO collector VALUES (100, 'capture', 0, 0, 0, 0, ?)", [json.dumps(info)])
    if window:
        b.writer.con.execute("INSERT INTO capture_window VALUES (100, 500, 1500, 'x to y')")
    b.writer.set_meta(capture_range={"limited": True, "description": "d", "spec": spec})
    return b.open()


def test_what_a_capture_range_missed_is_said(tmp_path: Path) -> None:
    cases = [
        ({"first_step": 10, "last_step": 20}, [{"steps": 7}], 0, False,
         "no step 10 was reached: the program made 7 steps; nothing was captured"),
        ({"first_step": 3, "last_step": 20}, [{"steps": 5}], 0, True,
         "no step 20 was reached: the program made 5 steps; the report holds steps 3-5"),
        ({"first_step": 2, "last_step": 2}, [], 1, False,  # killed: the kept step marks tell
         "no step 2 was reached: the program made 1 step; nothing was captured"),
        ({"first_step": 1, "last_step": 2}, [{"steps": 0}], 0, False,
         "no step 1 was reached: the program made 0 steps (steps are gpuscope.step() calls, or "
         "optimizer.step() calls with --trace torch); nothing was captured"),
        ({"range": "nvtx", "nvtx_name": "train", "nvtx_domain": "d"}, [{"nvtx_opened": 0, "names_seen": ["a"]}],
         0, False, "no NVTX range named 'train@d' was opened (ranges seen: a): nothing was captured."),
        ({"range": "cudaProfilerApi"}, [{"profiler_starts": 0, "profiler_watched": True}], 0, False,
         "cudaProfilerStart was never called"),
        ({"range": "cudaProfilerApi"}, [{"profiler_starts": 0, "profiler_watched": False}], 0, False,
         "cudaProfilerStart and cudaProfilerStop could not be watched (no CUPTI callback API here)"),
        ({"range": "api"}, [{"api_starts": 0}], 0, False, "gpuscope.start() was never called: nothing was captured"),
        ({"delay_ns": 30_000_000_000}, [{"armed": False}], 0, False,
         "the program ended before the --delay of 30 s had passed: nothing was captured"),
        ({"duration_ns": 5}, [{}], 0, False, "nothing was captured: no capture window opened"),
    ]
    for i, (spec, infos, marks, window, said) in enumerate(cases):
        with _limited(tmp_path / f"{i}.gpuscope", spec, infos, marks, window) as r:
            summary = capture_summary(r)
            assert summary is not None
            assert len(summary.problems) == 1 and summary.problems[0].startswith(said), (said, summary.problems)
            assert f"Warning: {summary.problems[0]}" in render(overview(r))
    with _limited(tmp_path / "ok.gpuscope", {"first_step": 1, "last_step": 1}, [{"steps": 3}], 0, True) as r:
        summary = capture_summary(r)
        assert summary is not None and summary.problems == [] and summary.captured_ns == 1000
        assert "Capture range: d (1 window, 1 µs recorded)" in render(overview(r))


def test_without_a_probe_the_busiest_gpu_bounds_the_cost_from_above(recorded: Callable[[str], Path]) -> None:
    from gpuscope.analysis.overview import DeviceBusy, busy_time

    with Report.open(recorded("mlp_api")) as r:
        ov = overview(r)
        o = ov.overhead
        assert o is not None and not o.probes
        devices = busy_time(r)
        best = max(devices, key=lambda d: d.busy_ns / d.span_ns)
        assert o.busiest == best and 0 < best.busy_ns < best.span_ns
        assert abs(o.at_most - (best.span_ns / best.busy_ns - 1)) < 1e-12
        # a short run, its GPU mostly idle between set-up and the end: a bound of many times the run
        # says nothing, and is not said
        assert o.at_most > 10 and "At most" not in overhead_line(o)
        o.busiest = DeviceBusy(best.device_id, best.name, busy_ns=best.span_ns * 4 // 5, span_ns=best.span_ns,
                               kernels=best.kernels)
        line = overhead_line(o)
        assert f"At most 25% longer over the recorded span: GPU {best.device_id} was busy 80% of it" in line
        # the time in the program (1.3% of the wall here) is below the bound: nothing said of an overlap
        assert "overlapped the GPU's work" not in line


def test_a_busy_gpu_says_the_hosts_time_overlapped_it() -> None:
    from gpuscope.analysis.overview import DeviceBusy
    from gpuscope.analysis.steps.overhead import CollectionOverhead

    o = CollectionOverhead(1_000_000_000, [OverheadPart("CUPTI buffers", 120_000_000)])
    o.busiest = DeviceBusy(0, "GPU", busy_ns=990_000_000, span_ns=1_000_000_000, kernels=10)
    line = overhead_line(o)
    assert "At most 1% longer over the recorded span: GPU 0 was busy 99% of it" in line
    assert line.endswith("(collection's time on the host overlapped the GPU's work)")
    o.busiest = None
    assert "At most" not in overhead_line(o)
