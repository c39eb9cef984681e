"""The C subscriber of CUPTI's callback API (capture/cupti/handoff.c), with libcupti faked: it
forwards watched calls to the hub's handlers, and makes launch anchors without any Python
callback, each with the id CUPTI gave its driver call, its thread and its time."""

from __future__ import annotations

import ctypes
import itertools
import threading
import time
from typing import Any

import pytest

cupti_mod = pytest.importorskip("cupti").cupti

from native_helpers import CallbackData  # noqa: E402

from gpuscope.capture.cupti import native  # noqa: E402
from gpuscope.capture.cupti.callbacks import CallbackHub  # noqa: E402
from gpuscope.capture.cupti.launch_anchors import ANCHOR_API, NativeAnchors  # noqa: E402
from gpuscope.capture.cupti.sync_sites import SyncSites  # noqa: E402
from gpuscope.capture.python.stacks import StackTable  # noqa: E402

if not native._compiler():
    pytest.skip("no C compiler here", allow_module_level=True)

RT, DRV = int(cupti_mod.CallbackDomain.RUNTIME_API), int(cupti_mod.CallbackDomain.DRIVER_API)
ANCHOR_CBID = next(int(m.value) for m in cupti_mod.driver_api_trace_cbid if m.name.startswith("cuDriverGetVersion"))


class FakeLibcupti:
    """cuptiSubscribe / cuptiEnableCallback / cuptiUnsubscribe, and API calls played through the
    subscriber's C callback as CUPTI makes them."""

    def __init__(self, shim: ctypes.CDLL) -> None:
        self.shim = shim
        self.callback: int | None = None
        self.enabled: set[tuple[int, int]] = set()
        self.ids = itertools.count(100)

    def cuptiSubscribe(self, handle: Any, callback: Any, userdata: Any) -> int:  # noqa: N802
        self.callback = callback.value
        return 0

    def cuptiEnableCallback(self, on: Any, handle: Any, domain: Any, cbid: Any) -> int:  # noqa: N802
        key = (domain.value, cbid.value)
        (self.enabled.add if on.value else self.enabled.discard)(key)
        return 0

    def cuptiUnsubscribe(self, handle: Any) -> int:  # noqa: N802
        self.callback = None
        return 0

    def call(self, domain: int, cbid: int, body: Any = None) -> int:
        """One API call: its entry callback, its body, its exit callback; return its correlation id."""
        corr = next(self.ids)
        for site in (0, 1):
            if (domain, cbid) in self.enabled and self.callback is not None:
                data = CallbackData(site=site, correlation_id=corr)
                self.shim.gs_api_callback(None, domain, cbid, ctypes.byref(data))
            if site == 0 and body is not None:
                body()
        return corr


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    return native.load(tmp_path_factory.mktemp("native"))


def _hub(shim: ctypes.CDLL) -> tuple[CallbackHub, FakeLibcupti, list[str]]:
    lib = FakeLibcupti(shim)
    said: list[str] = []
    hub = CallbackHub(cupti_mod, lambda level, msg: said.append(msg), native=(shim, lib))
    hub.start()
    assert lib.callback == ctypes.cast(shim.gs_api_callback, ctypes.c_void_p).value
    return hub, lib, said


def test_watched_calls_reach_their_handlers_through_the_c_subscriber(shim: ctypes.CDLL,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUSCOPE_SYNC_LAYER", "both")  # the runtime call watched too: its driver call said once
    hub, lib, said = _hub(shim)
    sites = SyncSites(hub, StackTable(), offset_ns=0)
    sync = next(int(m.value) for m in cupti_mod.runtime_api_trace_cbid if m.name == "cudaStreamSynchronize_v3020")
    drv_sync = next(int(m.value) for m in cupti_mod.driver_api_trace_cbid if m.name == "cuStreamSynchronize")
    assert (RT, sync) in lib.enabled and (DRV, drv_sync) in lib.enabled
    outer = lib.call(RT, sync, body=lambda: lib.call(DRV, drv_sync))  # the runtime call's driver call: once
    alone = lib.call(DRV, drv_sync)
    assert [(r[3], r[4]) for r in sites.take()] == [("cudaStreamSynchronize", outer), ("cuStreamSynchronize", alone)]
    hub.set_enabled(False)
    assert not lib.enabled
    hub.stop()
    assert lib.callback is None and said == []


def test_anchors_are_made_in_c_with_the_id_thread_and_time_of_their_call(shim: ctypes.CDLL) -> None:
    hub, lib, _ = _hub(shim)
    driver = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int))
    ids: list[int] = []

    def cu_driver_get_version(out: Any) -> int:  # the driver call: CUPTI calls back at its entry and exit
        ids.append(lib.call(DRV, ANCHOR_CBID))
        return 0

    fn = driver(cu_driver_get_version)
    assert hub.native_anchor(ANCHOR_API, fn)
    assert (DRV, ANCHOR_CBID) in lib.enabled
    anchors = NativeAnchors(shim, 1_000, native.anchor_function(shim))
    anchors.take()  # what an earlier test left
    before = time.monotonic_ns()
    made = [anchors.call() for _ in range(3)]
    other = threading.Thread(target=lambda: made.append(anchors.call()))
    other.start()
    other.join()
    after = time.monotonic_ns()
    assert made == ids and hub.calls == 0, "the anchor's callbacks never reach Python"
    assert anchors.pending() == 4
    rows = anchors.take()
    assert [r[4] for r in rows] == ids and all(r[3] == ANCHOR_API for r in rows)
    assert [r[2] for r in rows] == [threading.get_native_id()] * 3 + [other.native_id]
    times = [r[0] for r in rows]
    assert before + 1_000 <= times[0] <= times[1] <= times[2] <= times[3] <= after + 1_000 and all(
        r[0] == r[1] for r in rows)
    assert anchors.take() == [] and anchors.pending() == 0

    kept = anchors.pending()
    anchors.call()
    anchors.call()
    anchors.forget_since(kept)  # the anchors made to measure their cost are not kept
    assert anchors.take() == []

    made = [anchors.call() for _ in range(2)]  # the flush thread's way: the rows as bytes, in one copy
    (offset, blob), = anchors.take_rows()["anchor_log"]
    triples = memoryview(blob).cast("q").tolist()
    assert offset == 1_000 and triples[2::3] == made and triples[1::3] == [threading.get_native_id()] * 2
    assert triples[0] <= triples[3] and anchors.pending() == 0 and anchors.take_rows() == {}

    lib.enabled.discard((DRV, ANCHOR_CBID))  # no callback: no id, and nothing kept
    assert anchors.call() == 0 and anchors.pending() == 0
    hub.stop()
    shim.gs_set_anchor(0, 0xFFFFFFFF, None)


def test_an_anchor_callback_cupti_refuses_goes_back_to_python(shim: ctypes.CDLL) -> None:
    """Where CUPTI refuses to enable the anchor call's callback, the C subscriber stops keeping its
    ids, so that the Python anchors (which then take over) see that call's callbacks."""
    hub, lib, _ = _hub(shim)

    def refuse(on: Any, handle: Any, domain: Any, cbid: Any) -> int:
        return 1 if cbid.value == ANCHOR_CBID else FakeLibcupti.cuptiEnableCallback(lib, on, handle, domain, cbid)

    lib.cuptiEnableCallback = refuse  # type: ignore[method-assign]
    fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int))(lambda out: 0)
    with pytest.raises(RuntimeError, match="cuptiEnableCallback"):
        hub.native_anchor(ANCHOR_API, fn)
    seen: list[int] = []
    lib.cuptiEnableCallback = FakeLibcupti.cuptiEnableCallback.__get__(lib)  # type: ignore[method-assign]
    assert not hub.on_api_entry([ANCHOR_API], seen.append)
    corr = lib.call(DRV, ANCHOR_CBID)
    assert seen == [corr]
    hub.stop()


def test_anchors_c_could_not_keep_are_said() -> None:
    said: list[tuple[str, str]] = []
    ctx = type("Ctx", (), {"diag": lambda self, level, msg: said.append((level, msg))})()
    shim = type("Shim", (), {"gs_anchors_lost": lambda self: 0})()
    NativeAnchors(shim, 0, None).shutdown(ctx)  # type: ignore[arg-type]
    assert said == []
    shim.gs_anchors_lost = lambda: 3
    NativeAnchors(shim, 0, None).shutdown(ctx)  # type: ignore[arg-type]
    assert said and said[0][0] == "warning" and said[0][1].startswith("3 launch anchors were lost")


def test_graph_launches_are_timed_in_c_without_any_python_callback(shim: ctypes.CDLL) -> None:
    from gpuscope.capture.cupti.graph_launches import GraphLaunches

    hub, lib, said = _hub(shim)
    launches = GraphLaunches(hub, offset_ns=1_000)
    launch = [int(m.value) for m in cupti_mod.driver_api_trace_cbid if m.name.startswith("cuGraphLaunch")]
    runtime = [int(m.value) for m in cupti_mod.runtime_api_trace_cbid if m.name.startswith("cudaGraphLaunch")]
    assert launch and all((DRV, c) in lib.enabled for c in launch)
    assert runtime and all((RT, c) in lib.enabled for c in runtime)
    before = time.monotonic_ns()
    ids = [lib.call(DRV, launch[0], body=lambda: time.sleep(0.001)) for _ in range(3)]
    other: list[int] = []
    worker = threading.Thread(target=lambda: other.append(lib.call(DRV, launch[-1])))
    worker.start()
    worker.join()
    after = time.monotonic_ns()
    assert hub.calls == 0, "no launch reached Python"
    rows = launches.take()
    assert [r[4] for r in rows] == ids + other
    assert {r[3] for r in rows} == {"cuGraphLaunch"}
    assert [r[2] for r in rows] == [threading.get_native_id()] * 3 + [worker.native_id]
    for start, end, *_ in rows:
        assert before + 1_000 <= start <= end <= after + 1_000
    assert all(r[1] - r[0] >= 1_000_000 for r in rows[:3]), "entry to exit: the call's own time"
    assert launches.take() == []

    counted = launches.launched()
    launches.set_collecting(False)  # outside a capture window the launches pass untimed,
    lib.call(DRV, launch[0])
    lib.call(DRV, launch[0])
    assert launches.take() == []
    assert launches.launched() == counted + 2, "but counted: the overhead probe's pace"
    launches.set_collecting(True)
    hub.set_enabled(False)  # the timed ids are switched with the others
    assert not any((DRV, c) in lib.enabled for c in launch)
    hub.set_enabled(True)
    hub.stop()
    assert lib.callback is None and said == []
    forwarded: list[int] = []  # after stop, the C subscriber times nothing: a new hub's handlers see the calls
    hub2, lib2, _ = _hub(shim)
    hub2.on_api(["cuGraphLaunch"], enter=lambda name, corr: forwarded.append(corr))
    corr = lib2.call(DRV, launch[0])
    assert forwarded == [corr] and launches.take() == []
    hub2.stop()


def test_a_runtime_graph_launch_is_one_row_with_its_own_id_in_c(shim: ctypes.CDLL) -> None:
    """A runtime ``cudaGraphLaunch`` carried out by a driver ``cuGraphLaunch`` on the same thread is
    one row, named by the runtime call and with its correlation id (the one its kernels carry), as
    the Python handlers recorded it; a launch whose exit never came (callbacks switched off
    meanwhile) does not hold up the next."""
    from gpuscope.capture.cupti.graph_launches import GraphLaunches

    hub, lib, _ = _hub(shim)
    launches = GraphLaunches(hub, offset_ns=0)
    launches.take()
    rt = next(int(m.value) for m in cupti_mod.runtime_api_trace_cbid if m.name.startswith("cudaGraphLaunch"))
    drv = next(int(m.value) for m in cupti_mod.driver_api_trace_cbid if m.name.startswith("cuGraphLaunch"))
    inner: list[int] = []
    outer = lib.call(RT, rt, body=lambda: inner.append(lib.call(DRV, drv)))
    alone = lib.call(DRV, drv)
    rows = launches.take()
    assert [(r[3], r[4]) for r in rows] == [("cudaGraphLaunch", outer), ("cuGraphLaunch", alone)]
    assert inner and inner[0] not in [r[4] for r in rows] and hub.calls == 0
    data = CallbackData(site=0, correlation_id=999)  # an entry whose exit is never seen
    shim.gs_api_callback(None, DRV, drv, ctypes.byref(data))
    after = lib.call(DRV, drv)
    assert [r[4] for r in launches.take()] == [after]
    shim.gs_api_callback(None, RT, rt, ctypes.byref(data))  # a runtime entry, then callbacks switched
    hub.set_enabled(False)
    hub.set_enabled(True)
    after = [lib.call(DRV, drv), lib.call(DRV, drv)]  # the driver launches that follow are not taken as inside it
    assert [r[4] for r in launches.take()] == after
    hub.stop()
