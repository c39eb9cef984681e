"""The Chrome-trace export of a recorded report: rows, events and launch arrows."""

from __future__ import annotations

import io
import json
from collections import Counter

from gpuscope.trace import chrome
from gpuscope.trace.report import Report


def _export(report: Report) -> list[dict]:
    buf = io.StringIO()
    n = chrome.write(report, buf)
    doc = json.loads(buf.getvalue())
    assert doc["displayTimeUnit"] == "ns"
    assert len(doc["traceEvents"]) == n
    return doc["traceEvents"]


def test_gpu_rows_per_stream_and_cpu_rows_per_thread(mlp_api: Report) -> None:
    events = _export(mlp_api)
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in events if e["ph"] == "M" and "tid" in e}
    gpu_pid = chrome.GPU_PID_BASE + 0
    assert names[(gpu_pid, 7)] == "Stream 7"
    procs = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert procs[gpu_pid] == "GPU 0 NVIDIA H200"
    assert procs[536].endswith("(pid 536)")
    slices = Counter((e["cat"], e["pid"] == gpu_pid) for e in events if e["ph"] == "X")
    assert slices[("kernel", True)] == 246
    assert slices[("memcpy", True)] == 23 and slices[("memset", True)] == 5
    assert slices[("cuda_api", False)] == mlp_api.count("api_call")
    assert slices[("sync", False)] == mlp_api.count("sync")
    api_threads = {e["tid"] for e in events if e.get("cat") == "cuda_api"}
    assert api_threads == set(mlp_api.api_calls()["tid"])


def test_every_gpu_operation_has_an_arrow_from_its_launch(mlp_api: Report) -> None:
    events = _export(mlp_api)
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts.keys() == ends.keys()
    assert len(ends) == 246 + 23 + 5  # every kernel, copy and set was launched by a recorded call
    api = {(e["tid"], e["ts"]) for e in events if e.get("cat") == "cuda_api"}
    gpu = {(e["pid"], e["tid"], e["ts"]) for e in events if e.get("cat") in ("kernel", "memcpy", "memset")}
    for fid, s in starts.items():
        f = ends[fid]
        assert (s["tid"], s["ts"]) in api  # binds to the launching call's slice
        assert (f["pid"], f["tid"], f["ts"]) in gpu  # and to the operation's slice
        assert f["ts"] >= s["ts"]  # a launch precedes what it launched


def test_times_are_microseconds_from_the_start_of_the_program(mlp_api: Report) -> None:
    events = _export(mlp_api)
    origin = chrome.origin_ns(mlp_api)
    assert origin == mlp_api.processes()["start_ns"][0]
    assert min(e["ts"] for e in events if "ts" in e) >= 0
    k = mlp_api.kernels()
    first = k.iloc[0]
    kern = [e for e in events if e.get("cat") == "kernel"]
    assert kern[0]["ts"] == round((first["start_ns"] - origin) / 1000, 3)
    assert kern[0]["dur"] == round(first["duration_ns"] / 1000, 3)


def test_host_waits_are_slices_on_the_waiting_thread(recorded) -> None:
    from gpuscope.trace import chrome
    from gpuscope.trace.report import Report

    with Report.open(recorded("sync_loop")) as r:
        waits = [e for e in chrome.events(r) if e.get("cat") == "sync"]
        n = r.count("sync_site")
    assert len(waits) == n > 0
    assert sum(1 for e in waits if e["args"]["source"].endswith("sync_loop.py:35")) == 23
    assert all(e["dur"] >= 0 and e["name"].startswith("cu") for e in waits)


def _partial_overlaps(events: list[dict]) -> int:
    """Slices on one row that start inside another and end after it, in ns as exported."""
    rows: dict[tuple, list[tuple[float, float]]] = {}
    for e in events:
        if e["ph"] == "X":
            rows.setdefault((e["pid"], e["tid"]), []).append((round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000)))
    bad = 0
    for spans in rows.values():
        spans.sort(key=lambda p: (p[0], -p[1]))
        open_ends: list[int] = []
        for s, e in spans:
            while open_ends and open_ends[-1] <= s:
                open_ends.pop()
            if open_ends and e > open_ends[-1]:
                bad += 1
            open_ends.append(e)
    return bad


def test_no_two_slices_of_one_row_partially_overlap(recorded) -> None:
    with Report.open(recorded("gpt_eager")) as report:
        overlapping = report.sql(
            """SELECT count(*) FROM nvtx_range a JOIN nvtx_range b ON a.pid = b.pid AND a.tid = b.tid
               AND b.start_ns > a.start_ns AND b.start_ns < a.end_ns AND b.end_ns > a.end_ns""")[0][0]
        events = _export(report)
    assert overlapping > 0  # the recorded report has ranges that cross (GPT.head and GPT.ln)
    assert _partial_overlaps(events) == 0
    extra = [e for e in events if e["ph"] == "M" and "(overlapping" in e["args"].get("name", "")]
    assert extra and all(e["tid"] >= chrome.LANE_BASE for e in extra)
    assert sum(e["ph"] == "X" and e["cat"] in ("nvtx", "torch_range") for e in events) == \
        report_ranges(recorded("gpt_eager"))


def report_ranges(path) -> int:
    with Report.open(path) as r:
        return r.sql("SELECT count(*) FROM nvtx_range WHERE kind <> 'mark' AND end_ns IS NOT NULL")[0][0]


def test_operators_and_python_samples_are_in_the_trace(recorded) -> None:
    with Report.open(recorded("cpu_balanced")) as report:
        events = _export(report)
        ops, samples = report.count("torch_op"), report.count("cpu_sample")
    assert sum(e.get("cat") == "torch_op" and e["ph"] == "X" for e in events) == ops
    python = [e for e in events if e.get("cat") == "python"]
    assert len(python) == samples and all(e["ph"] == "X" for e in python)
    assert any(e["args"]["line"].endswith(".py:37") for e in python)  # the program's line, not a library's
    assert _partial_overlaps(events) == 0


def test_python_samples_are_slices_on_a_row_of_their_own(recorded) -> None:
    with Report.open(recorded("cpu_balanced")) as report:
        events = _export(report)
        [(tid, weight_us)] = report.sql("SELECT tid, sum(weight_ns) / 1000 FROM cpu_sample GROUP BY tid "
                                        "ORDER BY count(*) DESC LIMIT 1")
    rows = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    row = tid + chrome.SAMPLES_LANE
    assert rows[row] == f"thread {tid}: Python samples"
    mine = [e for e in events if e.get("cat") == "python" and e["tid"] == row]
    assert mine and all(e["dur"] >= 0 for e in mine)
    assert abs(sum(e["dur"] for e in mine) - weight_us) < 0.01 * weight_us  # each covers its wall time
    assert not [e for e in events if e.get("cat") == "python" and e["tid"] == tid]  # not on the thread's own row


def test_pytorch_ranges_have_a_category_of_their_own(recorded) -> None:
    with Report.open(recorded("cpu_train_small")) as report:
        torch = report.sql("SELECT count(*) FROM nvtx_range WHERE source = 'torch' AND kind = 'range' "
                           "AND end_ns IS NOT NULL")[0][0]
        events = _export(report)
    with Report.open(recorded("mlp_api")) as report:
        nvtx = report.sql("SELECT count(*) FROM nvtx_range WHERE source = 'nvtx'")[0][0]
        program = _export(report)
    assert torch > 1000 and sum(e.get("cat") == "torch_range" and e["ph"] == "X" for e in events) == torch
    assert not any(e.get("cat") == "nvtx" for e in events)
    assert nvtx and sum(e.get("cat") == "nvtx" for e in program) == nvtx


def test_export_memory_does_not_grow_with_the_report(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The slices are streamed from one sorted query: exporting 39,000 operators in batches of 2,000
    holds a batch, not every slice (held as dicts, as they once were, they peaked at 35 MB)."""
    import tracemalloc

    import duckdb
    from conftest import unpack_fixture

    path = unpack_fixture("cpu_balanced", tmp_path)
    con = duckdb.connect(str(path))
    span = con.execute("SELECT max(end_ns) - min(start_ns) + 1000000 FROM torch_op").fetchall()[0][0]
    con.execute(f"""INSERT INTO torch_op SELECT start_ns + k * {span}, end_ns + k * {span}, pid, tid, name_id, seq,
                    shapes, dtypes, out_shapes, scalars FROM torch_op, range(1, 10) r(k)""")
    ops = con.execute("SELECT count(*) FROM torch_op WHERE end_ns IS NOT NULL").fetchall()[0][0]
    con.close()

    class Sink(io.StringIO):
        def write(self, text: str) -> int:  # keep nothing: only what the export holds is measured
            return len(text)

    monkeypatch.setattr(chrome, "BATCH", 2_000)
    with Report.open(path) as report:
        tracemalloc.start()
        n = chrome.write(report, Sink())
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert ops > 38_000 and n > ops
    assert peak < 8 * 2**20, peak / 2**20
