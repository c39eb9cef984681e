"""The Python sampler's readings of the threads' CPU times: the threads Python knows are read from
their CPU-time clocks, without a file (a /proc read hands the GIL over), often enough that a
short-lived thread gets two readings, in the same nanoseconds as /proc's."""

from __future__ import annotations

import builtins
import os
import sys
import threading
import time
from collections import Counter
from typing import Any

import pytest

from gpuscope.capture.python import sampler as sampler_mod
from gpuscope.capture.python.sampler import Sampler

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and Linux's thread clocks")


def _count_proc_reads(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Count the /proc/self/task files opened (by task id) and listings made ('listdir')."""
    seen: Counter[str] = Counter()
    real_open, real_listdir = builtins.open, os.listdir

    def counting_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(file, str) and file.startswith("/proc/self/task/"):
            seen[file.split("/")[4]] += 1
        return real_open(file, *args, **kwargs)

    def counting_listdir(path: Any = ".") -> list[str]:
        if path == "/proc/self/task":
            seen["listdir"] += 1
        return real_listdir(path)

    monkeypatch.setattr(builtins, "open", counting_open)
    monkeypatch.setattr(os, "listdir", counting_listdir)
    return seen


def _idle_threads(n: int, stop: threading.Event) -> list[threading.Thread]:
    threads = [threading.Thread(target=stop.wait, name=f"idle-{i}") for i in range(n)]
    for t in threads:
        t.start()
    return threads


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1


@linux_only
def test_python_threads_are_read_without_a_file_and_a_short_thread_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    stop = threading.Event()
    idle = _idle_threads(20, stop)
    seen = _count_proc_reads(monkeypatch)
    s = Sampler(0.004, 0)
    s.start()
    short = threading.Thread(target=_busy, args=(0.3,), name="short-lived")
    short.start()
    short.join()
    s.stop()
    stop.set()
    for t in idle:
        t.join()
    rows = s.take()["thread_time"]
    python_tids = {t.native_id for t in [*idle, short, threading.current_thread()]}
    assert not {tid for tid in seen if tid != "listdir" and int(tid) in python_tids}  # no /proc file of theirs
    readings = {ts for ts, *_ in rows}
    assert seen["listdir"] < len(readings)  # every task's listing is rarer than the readings
    # the idle threads are read at every reading, named
    assert all(sum(1 for _, tid, _, _ in rows if tid == t.native_id) == len(readings) for t in idle)
    assert {name for _, tid, name, _ in rows if tid == idle[0].native_id} == {"idle-0"}
    mine = sorted((ts, cpu) for ts, tid, _, cpu in rows if tid == short.native_id)
    assert len(mine) >= 2, mine  # a thread living 0.3 s gets two readings: its CPU time is known
    assert mine[-1][1] > mine[0][1] and all(a[1] <= b[1] for a, b in zip(mine, mine[1:]))


@linux_only
def test_without_the_clocks_every_reading_is_from_proc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(time, "pthread_getcpuclockid")
    stop = threading.Event()
    idle = _idle_threads(3, stop)
    seen = _count_proc_reads(monkeypatch)
    s = Sampler(0.004, 0)
    s.start()
    time.sleep(0.25)
    s.stop()
    stop.set()
    for t in idle:
        t.join()
    rows = s.take()["thread_time"]
    readings = {ts for ts, *_ in rows}
    assert len(readings) >= 2 and seen["listdir"] == len(readings)
    assert seen[str(idle[0].native_id)] == len(readings)
    assert sum(1 for _, tid, _, _ in rows if tid == idle[0].native_id) == len(readings)


@linux_only
def test_a_threads_clock_and_proc_agree_in_nanoseconds() -> None:
    assert sampler_mod._thread_clocks_work()
    used, stop = threading.Event(), threading.Event()

    def work() -> None:
        end = time.thread_time() + 0.1  # CPU time well above a tick, so that ticks read as ns would not pass
        while time.thread_time() < end:
            pass
        used.set()
        stop.wait()

    t = threading.Thread(target=work)
    t.start()
    used.wait()
    assert t.native_id is not None
    clock_ns = time.clock_gettime_ns(sampler_mod._cpu_clock(t.native_id))
    proc_ns = sampler_mod._proc_cpu_ns(t.native_id)
    stop.set()
    t.join()
    tick_ns = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    assert clock_ns > 5 * tick_ns and proc_ns is not None
    # /proc's utime and stime are the clock's time split in two, each rounded down to a tick
    assert clock_ns - 3 * tick_ns <= proc_ns <= clock_ns + tick_ns, (clock_ns, proc_ns)
    # the clock of a thread that ended, as the reading meets it, is an error, not a number
    gone = time.monotonic() + 10
    while os.path.exists(f"/proc/self/task/{t.native_id}") and time.monotonic() < gone:
        time.sleep(0.01)  # join() returns as the thread ends, a moment before its task is gone
    with pytest.raises(OSError):
        time.clock_gettime_ns(sampler_mod._cpu_clock(t.native_id))
    assert sampler_mod._proc_cpu_ns(t.native_id) is None


@linux_only
def test_the_clock_id_is_the_one_pthread_gives() -> None:
    got: list[tuple[int, int]] = []

    def mine() -> None:
        clock = time.pthread_getcpuclockid(threading.get_ident())
        got.append((clock, sampler_mod._cpu_clock(threading.get_native_id())))

    t = threading.Thread(target=mine)
    t.start()
    t.join()
    assert got and got[0][0] == got[0][1]
