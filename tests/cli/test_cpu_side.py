"""The CPU side, as a user runs it: sampled Python stacks, threads' CPU time, host counters, and
the default collectors on a machine without a GPU."""

from __future__ import annotations

import gpuscope
from gpuscope.analysis.cpu.summaries import cpu_hotspots, cpu_hotspots_lines, cpu_thread_sum, host_summary

from .conftest import Gpuscope

HOT = """
import threading, time

def hot_loop(seconds):
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1  # HOT LINE
    return x

def idle(seconds):
    time.sleep(seconds)

t = threading.Thread(target=idle, args=(1.0,), name="sleeper")
t.start()
hot_loop(1.0)
t.join()
print("done")
"""


def test_a_planted_hot_loop_is_the_top_hotspot(gs: Gpuscope) -> None:
    gs.script("hot.py", HOT)
    res = gs.profile("-t", "cpu,host", "-o", "h", "hot.py")
    assert res.returncode == 0 and "done" in res.stdout, res.describe()
    with gpuscope.load(str(gs.cwd / "h.gpuscope")) as report:
        funcs = cpu_hotspots(report).records()
        lines = cpu_hotspots_lines(report).records()
        threads = cpu_thread_sum(report).records()
        host = host_summary(report)
    by_name = {r["Function"]: r for r in funcs if r["File"].endswith("hot.py")}  # not site's <module>
    # the main thread spins for 1 s while the other thread sleeps for 1 s: about the same wall time,
    # but only the spinning one used CPU time, and it ranks first (on a 2-core machine busy with two
    # other jobs the spinning thread got 0.42 s of its second: the bound leaves room for that)
    assert by_name["hot_loop"]["Wall Self"] > 0.6e9 and by_name["hot_loop"]["CPU Self"] > 0.3e9
    assert by_name["idle"]["Wall Total"] > 0.6e9 and by_name["idle"]["CPU Self"] < 0.2e9
    assert funcs.index(by_name["hot_loop"]) < funcs.index(by_name["idle"])
    assert not [r for r in funcs if "gpuscope" in r["File"] and "hot.py" not in r["File"]]  # none of its own
    hot_line = next(i for i, text in enumerate(HOT.splitlines(), 1) if "HOT LINE" in text)
    top_hot = [r for r in lines if r["Function"] == "hot_loop"][0]["Line"]
    # the sampled line is the loop body or its condition (the interpreter may be at either)
    assert top_hot.endswith((f"/hot.py:{hot_line}", f"/hot.py:{hot_line - 1}")), top_hot
    assert by_name["<module>"]["Wall Total"] >= by_name["hot_loop"]["Wall Total"]
    # CPU against wall time: the spinning main thread used its time, the sleeper did not
    main = next(r for r in threads if r["Thread"] == "MainThread")
    sleeper = next(r for r in threads if r["Thread"] == "sleeper")
    assert main["CPU Use"] > 30 and sleeper["CPU Time"] < 0.2e9
    assert host is not None and host.cores >= 1 and host.peak_rss_bytes > 1e6
    assert 20 < host.process_cpu_percent < 150  # one busy thread, as a percent of one core


def test_without_a_gpu_the_default_profiles_the_cpu_side(gs: Gpuscope) -> None:
    gs.script("hot.py", HOT)
    res = gs.profile("-o", "d", "hot.py")
    assert res.returncode == 0, res.describe()
    said = [line for line in res.own_lines if "no NVIDIA GPU" in line]
    assert len(said) == 1 and "Traceback" not in res.stderr
    page = res.stderr[res.stderr.index("Program: "):]
    assert "Heaviest lines of the program" in page and "hot.py:" in page  # the end-of-run page shows them
    assert "CPU utilization" in page and len(page.splitlines()) <= 40, page
    assert "No kernels" not in page and "(cuda_gpu_kern_sum)" not in page  # no empty tables
    with gpuscope.load(str(gs.cwd / "d.gpuscope")) as report:
        assert set(report.meta["trace"]) == {"torch", "host", "torch-shapes", "cpu"}
        assert report.count("cpu_sample") > 100


def test_counter_tracks_in_the_chrome_export(gs: Gpuscope) -> None:
    import json

    gs.script("hot.py", HOT)
    assert gs.profile("-t", "host,nvml", "-o", "c", "hot.py").returncode == 0
    res = gs.run("export", "c.gpuscope")
    assert res.returncode == 0, res.describe()
    events = json.loads((gs.cwd / "c.trace.json").read_text())["traceEvents"]
    counters = {e["name"] for e in events if e["ph"] == "C"}
    assert {"process.rss_bytes", "process.cpu_percent", "cpu0.util_percent"} <= counters
