"""CUPTI's cost per kernel launch, measured at the process's end (capture/cupti/launch_cost.py): the
arithmetic and the order of the blocks on a fake libcuda, the ways it gives up without hanging, and
the measurement's own records kept out of the report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpuscope.capture.cupti import activity, launch_cost
from gpuscope.capture.cupti.launch_cost import Unmeasured, measure


class FakeCuda:
    """A libcuda whose launches advance a fake clock by ``on_ns`` or ``off_ns`` as the records are."""

    def __init__(self, on_ns: int = 3_000, off_ns: int = 1_000, context: int = 0x1234, ready_after: int = 0,
                 fail_launch_at: int = -1) -> None:
        self.now = 0
        self.records = True
        self.on_ns, self.off_ns, self.context = on_ns, off_ns, context
        self.launches = 0
        self.queries = 0
        self.ready_after = ready_after  # queries answered "not ready" first (-1: never ready)
        self.fail_launch_at = fail_launch_at
        self.switches: list[bool] = []
        self.unloaded = self.destroyed = 0

    def clock(self) -> int:
        return self.now

    def switch(self, on: bool) -> None:
        self.records = on
        self.switches.append(on)

    def cuCtxGetCurrent(self, ref: Any) -> int:  # noqa: N802  (the driver's names)
        ref._obj.value = self.context or None
        return 0

    def cuModuleLoadData(self, ref: Any, image: Any) -> int:  # noqa: N802
        assert b".entry gpuscope_empty" in image.value
        ref._obj.value = 0x10
        return 0

    def cuModuleGetFunction(self, ref: Any, module: Any, name: bytes) -> int:  # noqa: N802
        ref._obj.value = 0x20
        return 0

    def cuStreamCreate(self, ref: Any, flags: Any) -> int:  # noqa: N802
        assert flags.value == 1  # non-blocking: does not wait for the program's streams
        ref._obj.value = 0x30
        return 0

    def cuLaunchKernel(self, *args: Any) -> int:  # noqa: N802
        self.launches += 1
        if self.launches == self.fail_launch_at:
            return 700
        self.now += self.on_ns if self.records else self.off_ns
        return 0

    def cuStreamQuery(self, stream: Any) -> int:  # noqa: N802
        self.queries += 1
        if self.ready_after < 0 or self.queries <= self.ready_after:
            return 600
        return 0

    def cuStreamDestroy_v2(self, stream: Any) -> int:  # noqa: N802
        self.destroyed += 1
        return 0

    def cuModuleUnload(self, module: Any) -> int:  # noqa: N802
        self.unloaded += 1
        return 0


class FakeRuntime:
    """A CUDA runtime whose launches cost ``on_ns``/``off_ns`` on the fake driver's clock."""

    def __init__(self, cuda: FakeCuda, on_ns: int, off_ns: int, loads: bool = True) -> None:
        self.cuda, self.on_ns, self.off_ns, self.loads = cuda, on_ns, off_ns, loads
        self.launches = self.unloaded = 0

    def cudaLibraryLoadData(self, ref: Any, image: Any, *options: Any) -> int:  # noqa: N802
        if not self.loads:
            return 98
        ref._obj.value = 0x40
        return 0

    def cudaLibraryGetKernel(self, ref: Any, library: Any, name: bytes) -> int:  # noqa: N802
        assert name == b"gpuscope_empty"
        ref._obj.value = 0x50
        return 0

    def cudaLaunchKernel(self, kernel: Any, grid: Any, block: Any, args: Any, shared: int, stream: Any) -> int:  # noqa: N802
        assert (grid.x, block.x) == (1, 1)
        self.launches += 1
        self.cuda.now += self.on_ns if self.cuda.records else self.off_ns
        return 0

    def cudaLibraryUnload(self, library: Any) -> int:  # noqa: N802
        self.unloaded += 1
        return 0


def test_the_cost_is_the_difference_of_the_medians_per_launch() -> None:
    cuda = FakeCuda(on_ns=3_400, off_ns=1_000)
    assert measure(cuda, cuda.switch, pairs=4, block=50, clock=cuda.clock) == {"driver": 2_400}  # type: ignore[arg-type]
    # on/off, then off/on, ...: neither half always comes first; the records are left on
    assert cuda.switches == [True, False, False, True, True, False, False, True, True]
    assert cuda.launches == 8 + 8 * 50
    assert (cuda.unloaded, cuda.destroyed) == (1, 1)


def test_detached_blocks_are_the_base_and_the_kinds_off_are_kept_beside() -> None:
    cuda = FakeCuda(on_ns=3_000, off_ns=2_500)
    detached: list[int] = []

    def detach() -> None:  # after detaching, a launch costs what it costs without CUPTI
        detached.append(cuda.launches)
        cuda.off_ns = 1_000
        cuda.records = False

    got = measure(cuda, cuda.switch, pairs=2, block=10, clock=cuda.clock, detach=detach)  # type: ignore[arg-type]
    assert got == {"driver": 2_000, "driver_kinds_off": 500}
    assert detached == [8 + 4 * 10]  # after the alternating blocks, then two more blocks
    assert cuda.launches == 8 + 6 * 10


def test_launches_through_the_runtime_are_measured_apart() -> None:
    cuda = FakeCuda(on_ns=1_500, off_ns=1_000)
    rt = FakeRuntime(cuda, on_ns=3_000, off_ns=1_200)
    got = measure(cuda, cuda.switch, rt, pairs=3, block=20, clock=cuda.clock)  # type: ignore[arg-type]
    assert got == {"driver": 500, "runtime": 1_800}
    assert rt.launches == 8 + 6 * 20 and rt.unloaded == 1
    no_runtime = FakeRuntime(cuda, 0, 0, loads=False)  # a runtime that cannot load the kernel: the driver's only
    assert measure(cuda, cuda.switch, no_runtime, pairs=1, block=5, clock=cuda.clock) == {"driver": 500}  # type: ignore[arg-type]


def test_no_cost_seen_is_zero_not_negative() -> None:
    cuda = FakeCuda(on_ns=900, off_ns=1_000)
    assert measure(cuda, cuda.switch, pairs=2, block=10, clock=cuda.clock) == {"driver": 0}  # type: ignore[arg-type]


def test_without_a_context_nothing_is_launched() -> None:
    cuda = FakeCuda(context=0)
    with pytest.raises(Unmeasured, match="no CUDA context"):
        measure(cuda, cuda.switch, clock=cuda.clock)  # type: ignore[arg-type]
    assert cuda.launches == 0 and cuda.switches == []


def test_a_gpu_that_never_runs_the_kernel_is_given_up_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launch_cost, "DEADLINE_S", 0.01)
    cuda = FakeCuda(ready_after=-1)
    with pytest.raises(Unmeasured, match="did not run an empty kernel"):
        measure(cuda, cuda.switch, clock=cuda.clock)  # type: ignore[arg-type]
    # only the first few launches were queued, the records never switched, and nothing is unloaded
    # under work that may still be queued
    assert cuda.launches == 8 and cuda.switches == []
    assert (cuda.unloaded, cuda.destroyed) == (0, 0)


def test_a_block_waits_for_the_one_before_it() -> None:
    cuda = FakeCuda(ready_after=3)
    assert measure(cuda, cuda.switch, pairs=1, block=5, clock=cuda.clock) == {"driver": 2_000}  # type: ignore[arg-type]
    assert cuda.queries == 3 + 3  # the first wait polled until ready, then one query per block


def test_a_failing_launch_leaves_the_records_on() -> None:
    cuda = FakeCuda(fail_launch_at=30)
    with pytest.raises(Unmeasured, match="cuLaunchKernel returned CUDA error 700"):
        measure(cuda, cuda.switch, pairs=3, block=10, clock=cuda.clock)  # type: ignore[arg-type]
    assert cuda.switches[-1] is True


def test_the_measurements_own_records_do_not_reach_the_report(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    cupti = pytest.importorskip("cupti.cupti")
    from fake_cupti import FakeBuffer, RawLayout
    from gpuscope.spool import SpoolWriter

    spool = tmp_path / "spool"
    spool.mkdir()
    c = activity.CuptiCollector(SpoolWriter(str(spool), pid=9), {"cuda"}, lambda lvl, m: None)
    c.bind(cupti, np)
    c.enabled = ["kernel"]
    flushes: list[bool] = []

    class Raw:
        def flush_all(self, forced: bool) -> None:
            flushes.append(forced)

    c.raw = Raw()

    def buffer() -> RawLayout:
        buf = FakeBuffer(cupti)
        for i in range(3):
            buf.add("ActivityKernel11", kind=10, name="k", start=1000 * i, end=1000 * i + 500, correlation_id=i + 1)
        return RawLayout(buf)

    def fake_measure(lib: Any, switch: Any, runtime: Any, detach: Any) -> dict[str, int]:
        lay = buffer()  # records of the measurement's launches arrive meanwhile
        c._on_raw_buffer(lay.raw, lay.valid, lay.next_record)
        return {"driver": 600, "runtime": 1_800, "driver_kinds_off": 100}

    monkeypatch.setattr(activity, "loaded_library", lambda fragment: "/fake/libcuda.so.1")
    monkeypatch.setattr(activity.ctypes, "CDLL", lambda path: object())
    monkeypatch.setattr(launch_cost, "measure", fake_measure)
    c._measure_launch_cost()
    assert c.launch_cost_unmeasured == ""
    assert (c.ns_per_launch, c.ns_per_runtime_launch, c.records) == (600, 1_800, 0)
    assert c.launch_cost_kinds_off == {"driver_kinds_off": 100}
    assert flushes == [True]  # the measurement's records delivered while being dropped
    lay = buffer()
    c._on_raw_buffer(lay.raw, lay.valid, lay.next_record)  # and the program's records still count after it
    assert c.records == 3


def test_an_unmeasured_cost_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    c = activity.CuptiCollector(None, {"cuda"}, lambda lvl, m: None)  # type: ignore[arg-type]
    c.enabled = ["kernel"]
    monkeypatch.setattr(activity, "loaded_library", lambda fragment: None)
    c._measure_launch_cost()
    assert c.ns_per_launch is None and c.launch_cost_unmeasured == "libcuda not loaded"
    monkeypatch.setenv(activity.LAUNCH_COST_ENV, "0")
    c.launch_cost_unmeasured = ""
    c._measure_launch_cost()
    assert c.launch_cost_unmeasured == ""  # switched off: nothing to say


class CallLog:
    """A cupti module that notes the calls of the end of a run, in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def activity_flush_all(self, forced: int) -> None:
        self.calls.append("flush")

    def activity_get_num_dropped_records(self, ctx: int, stream: int, out: int) -> None:
        self.calls.append("dropped")

    def activity_enable(self, kind: int) -> None:
        self.calls.append(f"enable {kind}")

    def activity_disable(self, kind: int) -> None:
        self.calls.append(f"disable {kind}")

    def finalize(self) -> None:
        self.calls.append("finalize")


class Spool:
    def __init__(self) -> None:
        self.rows: list[dict] = []

    def write(self, rows: dict) -> None:
        self.rows.append(rows)


@pytest.mark.parametrize("measured", [True, False])
def test_the_end_of_a_run_reads_the_dropped_count_before_detaching_once(monkeypatch: pytest.MonkeyPatch,
                                                                       measured: bool) -> None:
    log, spool = CallLog(), Spool()
    c = activity.CuptiCollector(spool, {"cuda"}, lambda lvl, m: None)  # type: ignore[arg-type]
    c._cupti = log
    c.enabled, c._enabled_kinds = ["kernel"], [10]

    def fake_measure(lib: Any, switch: Any, runtime: Any, detach: Any) -> dict[str, int]:
        switch(False)
        switch(True)
        detach()
        return {"driver": 1_500}

    monkeypatch.setattr(activity, "loaded_library", lambda fragment: "/fake/lib.so" if measured else None)
    monkeypatch.setattr(activity.ctypes, "CDLL", lambda path: object())
    monkeypatch.setattr(launch_cost, "measure", fake_measure)
    c.stop()
    calls = log.calls
    assert calls.index("dropped") < calls.index("finalize") and calls.count("finalize") == 1
    assert calls[0] == "flush" and calls[1] == "dropped"
    if measured:  # every kind off and on for the measurement, its records flushed, then detached
        assert calls[2:] == ["disable 10", "enable 10", "flush", "disable 10", "finalize"]
        assert c.ns_per_launch == 1_500
    else:
        assert calls[2:] == ["disable 10", "finalize"] and c.ns_per_launch is None
    assert spool.rows == [{"dropped": [("cupti", 0), ("gpuscope", 0)]}]
    c.stop()  # a second stop does nothing
    assert log.calls.count("finalize") == 1
