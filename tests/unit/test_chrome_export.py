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
