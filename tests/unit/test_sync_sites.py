"""Synchronization sites on CPU: CUPTI's callback API faked over cupti-python's real callback ids."""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

import pytest

cupti_mod = pytest.importorskip("cupti").cupti

from gpuscope.capture.cupti.callbacks import CallbackHub, base_name  # noqa: E402
from gpuscope.capture.python.stacks import StackTable  # noqa: E402
from gpuscope.capture.cupti.sync_sites import SyncSites  # noqa: E402


class FakeCupti:
    CallbackDomain = cupti_mod.CallbackDomain
    ApiCallbackSite = cupti_mod.ApiCallbackSite
    runtime_api_trace_cbid = cupti_mod.runtime_api_trace_cbid
    driver_api_trace_cbid = cupti_mod.driver_api_trace_cbid

    def __init__(self) -> None:
        self.enabled: set[tuple[int, int]] = set()
        self.callback: Any = None

    def subscribe(self, callback: Any, userdata: Any) -> int:
        self.callback = callback
        return 7

    def enable_callback(self, enable: int, sub: int, domain: int, cbid: int) -> None:
        assert sub == 7
        if enable:
            self.enabled.add((domain, cbid))
        else:
            self.enabled.discard((domain, cbid))

    def unsubscribe(self, sub: int) -> None:
        self.callback = None

    def call(self, domain: Any, name: str, corr: int, body: Any = None) -> None:
        """Play one API call: enter callback, the body (nested calls), exit callback."""
        enum = self.runtime_api_trace_cbid if domain == self.CallbackDomain.RUNTIME_API else self.driver_api_trace_cbid
        cbid = int(getattr(enum, name))
        for site in (self.ApiCallbackSite.API_ENTER, self.ApiCallbackSite.API_EXIT):
            if (int(domain), cbid) in self.enabled and self.callback is not None:
                self.callback(None, int(domain), cbid, SimpleNamespace(callback_site=int(site), correlation_id=corr))
            if site == self.ApiCallbackSite.API_ENTER and body is not None:
                body()


def test_base_names() -> None:
    assert base_name("cudaStreamSynchronize_ptsz_v7000") == "cudaStreamSynchronize"
    assert base_name("cudaDeviceSynchronize_v3020") == "cudaDeviceSynchronize"
    assert base_name("cuCtxSynchronize_v2") == "cuCtxSynchronize"
    assert base_name("cuMemcpyDtoH_v2_ptds") == "cuMemcpyDtoH"


@pytest.mark.parametrize("layer", ["driver", "both"])
def test_sites_carry_the_calling_line_and_skip_nested_driver_calls(monkeypatch: pytest.MonkeyPatch, layer: str) -> None:
    """By default only the driver's synchronizing calls are watched (the runtime's are carried out by
    them); with both layers watched, the driver call inside a watched runtime call is not said again."""
    if layer == "both":
        monkeypatch.setenv("GPUSCOPE_SYNC_LAYER", "both")
    else:
        monkeypatch.delenv("GPUSCOPE_SYNC_LAYER", raising=False)
    fake = FakeCupti()
    hub = CallbackHub(fake, lambda level, msg: None)
    hub.start()
    stacks = StackTable()
    sites = SyncSites(hub, stacks, offset_ns=1_000)
    assert not sites.missing
    rt, drv = FakeCupti.CallbackDomain.RUNTIME_API, FakeCupti.CallbackDomain.DRIVER_API
    # only synchronizing calls are enabled: never a launch
    launch = int(fake.runtime_api_trace_cbid.cudaLaunchKernel_v7000)
    assert (int(rt), launch) not in fake.enabled
    runtime_sync = int(fake.runtime_api_trace_cbid.cudaStreamSynchronize_v3020)
    assert ((int(rt), runtime_sync) in fake.enabled) == (layer == "both")

    def item() -> None:  # stands for torch's C++ code of .item(): runtime call carried out by a driver call
        fake.call(rt, "cudaStreamSynchronize_v3020", 11,
                  body=lambda: fake.call(drv, "cuStreamSynchronize", 12))

    line = sys._getframe().f_lineno + 1
    item()
    fake.call(drv, "cuCtxSynchronize", 13)  # a driver call of its own (CuPy, Triton) is recorded
    rows = sites.take()
    said = ("cudaStreamSynchronize", 11) if layer == "both" else ("cuStreamSynchronize", 12)
    assert [(r[3], r[4]) for r in rows] == [said, ("cuCtxSynchronize", 13)]
    start, end = rows[0][0], rows[0][1]
    assert 1_000 < start <= end
    defs = stacks.take()
    frames = {fid: (file, ln, func) for fid, file, ln, func in defs["cpu_frame"]}
    parents = {node: (parent, fid) for node, parent, fid in defs["cpu_stack"]}
    path, node = [], rows[0][5]
    while node:
        node, fid = parents[node]
        path.append(frames[fid])
    # innermost first: the fake's call()s stand where the C++ library would be, then item(), then this line
    names = [f[2] for f in path]
    i = names.index("item")
    assert set(names[:i]) <= {"call", "<lambda>"} and names[i + 1] == "test_sites_carry_the_calling_line_and_skip_nested_driver_calls"
    assert path[i + 1][1] == line and path[i + 1][0] == __file__
    hub.stop()
    fake.call(rt, "cudaDeviceSynchronize_v3020", 14)
    assert sites.take() == []


def test_a_failing_handler_never_reaches_the_program() -> None:
    fake = FakeCupti()
    said: list[str] = []
    hub = CallbackHub(fake, lambda level, msg: said.append(msg))
    hub.start()
    hub.on_api(["cudaDeviceSynchronize"], enter=lambda n, c: 1 / 0)
    fake.call(FakeCupti.CallbackDomain.RUNTIME_API, "cudaDeviceSynchronize_v3020", 1)
    fake.call(FakeCupti.CallbackDomain.RUNTIME_API, "cudaDeviceSynchronize_v3020", 2)
    assert hub.failures == 2 and len(said) == 1 and "ZeroDivisionError" in said[0]


def test_unknown_names_are_returned() -> None:
    hub = CallbackHub(FakeCupti(), lambda level, msg: None)
    assert hub.on_api(["cudaProfilerStart", "cudaNoSuchCall"]) == ["cudaNoSuchCall"]


def test_launch_anchors_record_each_calls_correlation_id_once_at_its_entry() -> None:
    from gpuscope.capture.cupti.launch_anchors import ANCHOR_API, CallbackAnchors

    fake = FakeCupti()
    hub = CallbackHub(fake, lambda level, msg: None)
    hub.start()
    anchors = CallbackAnchors(hub, offset_ns=1000)
    assert anchors.missing == []
    drv = fake.CallbackDomain.DRIVER_API
    fake.call(drv, "cuDriverGetVersion", 41)
    fake.call(drv, "cuCtxSynchronize", 42)  # not watched: nothing
    fake.call(drv, "cuDriverGetVersion", 43)
    hub.set_enabled(False)  # a closed capture window: anchors stay on
    fake.call(drv, "cuDriverGetVersion", 44)
    rows = anchors.take()
    assert [(r[3], r[4]) for r in rows] == [(ANCHOR_API, 41), (ANCHOR_API, 43), (ANCHOR_API, 44)]
    assert all(r[0] == r[1] and r[0] > 1000 for r in rows) and rows[0][0] <= rows[1][0]
    assert anchors.take() == []
