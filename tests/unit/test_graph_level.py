"""The choice of graph-level records at a process's first CUDA graph instantiation (handoff.c's
watch, capture/cupti/graph_level.py), with the CUDA driver and libcupti faked: decided once, at the
entry of the first instantiation, from the node count of the graph being instantiated."""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import pytest
from native_helpers import CallbackData

from gpuscope.capture.cupti import graph_level, native

if not native._compiler():
    pytest.skip("no C compiler here", allow_module_level=True)

DRIVER, INSTANTIATE, OTHER = 6, 500, 501  # a domain and callback ids as the subscriber sees them
KIND = 51  # CUPTI_ACTIVITY_KIND_GRAPH_TRACE
NODES = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t))
ENABLE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)


class Driver:
    """cuGraphGetNodes over graphs made here (handle -> node count), cuptiActivityEnable recorded."""

    def __init__(self, shim: ctypes.CDLL, min_nodes: int = graph_level.MIN_NODES) -> None:
        self.shim = shim
        self.graphs: dict[int, int] = {}
        self.asked: list[int] = []
        self.enabled: list[int] = []
        self._nodes, self._enable = NODES(self.nodes), ENABLE(self.enable)  # kept alive
        self._keep: list[Any] = []
        shim.gs_set_graph_switch(ctypes.cast(self._nodes, ctypes.c_void_p), ctypes.cast(self._enable, ctypes.c_void_p),
                                 KIND, min_nodes)
        assert shim.gs_set_graph_watch(DRIVER, INSTANTIATE) == 0

    def nodes(self, graph: int, out: int, count: Any) -> int:
        self.asked.append(graph)
        count[0] = self.graphs[graph]
        return 0

    def enable(self, kind: int) -> int:
        self.enabled.append(kind)
        return 0

    def instantiate(self, nodes: int, site: int = 0, cbid: int = INSTANTIATE) -> None:
        """A cuGraphInstantiateWithFlags call of a graph of ``nodes`` nodes, at ``site`` (0 entry, 1 exit)."""
        handle = 0x1000 + 16 * len(self.graphs)
        self.graphs[handle] = nodes
        params = (ctypes.c_void_p * 3)(0xBEEF, handle, 0)  # (CUgraphExec *, CUgraph, flags)
        data = CallbackData(site=site, params=ctypes.cast(params, ctypes.c_void_p), correlation_id=7)
        self._keep += [params, data]
        self.shim.gs_api_callback(None, DRIVER, cbid, ctypes.byref(data))

    def state(self) -> list[int]:
        out = (ctypes.c_int64 * 4)()
        self.shim.gs_graph_state(out)
        return list(out)


@pytest.fixture
def driver(tmp_path: Path) -> Driver:
    return Driver(native.load(tmp_path))  # a library of its own: the choice is made once per process


def test_a_large_first_graph_turns_on_graph_level_records_before_it_is_instantiated(driver: Driver) -> None:
    driver.instantiate(nodes=300)
    decided, switched, nodes, at = driver.state()
    assert (decided, switched, nodes) == (1, 1, 300) and at > 0
    assert driver.enabled == [KIND] and driver.asked == [0x1000]  # the graph the call instantiates
    driver.instantiate(nodes=10)  # later graphs change nothing: every one is made under one setting
    assert driver.enabled == [KIND] and driver.asked == [0x1000] and driver.state()[:3] == [1, 1, 300]


def test_a_small_first_graph_keeps_every_node_for_the_whole_run(driver: Driver) -> None:
    driver.instantiate(nodes=38)  # a JAX step's graph
    assert driver.state()[:3] == [1, 0, 38] and driver.enabled == []
    driver.instantiate(nodes=400)  # too late: a graph made under the other setting could be launched again
    assert driver.state()[:3] == [1, 0, 38] and driver.enabled == []


def test_only_the_entry_of_a_watched_call_decides(driver: Driver) -> None:
    driver.instantiate(nodes=300, site=1)
    driver.instantiate(nodes=300, cbid=OTHER)
    assert driver.state() == [0, 0, -1, 0] and driver.asked == [] and driver.enabled == []
    driver.instantiate(nodes=graph_level.MIN_NODES)  # at the threshold: switched
    assert driver.state()[:3] == [1, 1, graph_level.MIN_NODES]


def test_the_state_reads_on_the_session_clock(driver: Driver) -> None:
    level = graph_level.GraphLevel(driver.shim, offset_ns=5_000)
    assert level.state() == {"decided": 0, "switched": 0, "nodes": -1, "min_nodes": graph_level.MIN_NODES, "from_ns": 0}
    driver.instantiate(nodes=128)
    st = level.state()
    assert st["switched"] == 1 and st["from_ns"] == driver.state()[3] + 5_000


def test_graph_level_records_chosen_by_the_user_leave_nothing_to_choose() -> None:
    class Ctx:
        trace = {"cuda", "cuda-graph"}

        def collector(self, name: str) -> None:
            raise AssertionError("not consulted")

    assert graph_level.start(Ctx()) is None  # type: ignore[arg-type]
    Ctx.trace = {"cuda", "graph-nodes"}
    assert graph_level.start(Ctx()) is None  # type: ignore[arg-type]


def test_the_summary_says_the_kernels_inside_graphs_were_not_recorded(tmp_path: Path) -> None:
    """A report whose process chose graph-level records says so in "Not recorded", with the node count
    of the first graph and the collector that records every node; one that did not choose keeps the
    share-of-kernels hint."""
    import json

    import duckdb

    from conftest import unpack_fixture
    from gpuscope.analysis.overview import overview
    from gpuscope.trace.report import Report

    path = unpack_fixture("client_nanogpt_reduce_overhead", tmp_path)
    with Report.open(path) as report:
        before = overview(report).not_recorded.get("cuda_graph", "")
    assert "ran in CUDA graphs" in before and "--trace cuda-graph" in before
    con = duckdb.connect(str(path))
    state = {"decided": 1, "switched": 1, "nodes": 116, "min_nodes": 64, "from_ns": 1}
    pid = con.execute("SELECT pid FROM process LIMIT 1").fetchall()[0][0]
    con.execute("INSERT INTO collector VALUES (?, 'graph-level', 1, 0, 0, 0, ?)", [pid, json.dumps(state)])
    con.close()
    with Report.open(path) as report:
        after = overview(report).not_recorded["cuda_graph"]
    assert "116 nodes" in after and "--trace graph-nodes" in after and "ran in CUDA graphs" not in after


def test_a_recorded_reduce_overhead_run_holds_its_graphs_whole_and_reads_as_busy(tmp_path: Path) -> None:
    """A reduce-overhead GPT recorded under the default on an H200: its first graph had 116 nodes, so
    no kernel of a graph has a row and each launch is one; the steps read the graphs as GPU work."""
    import json

    from conftest import unpack_fixture
    from gpuscope.analysis.diagnosis.context import Context
    from gpuscope.analysis.overview import overview
    from gpuscope.trace.report import Report

    with Report.open(unpack_fixture("client_nanogpt_reduce_overhead_graphs", tmp_path)) as report:
        (detail,) = report.sql("SELECT detail FROM collector WHERE name = 'graph-level'")[0]
        st = json.loads(detail)
        assert st["switched"] == 1 and st["nodes"] == 116
        graphed, plain = report.sql("SELECT count(*) FILTER (WHERE coalesce(graph_id, 0) <> 0), "
                                    "count(*) FILTER (WHERE coalesce(graph_id, 0) = 0) FROM kernel")[0]
        launches, first = report.sql("SELECT count(*), min(start_ns) FROM graph_launch")[0]
        assert graphed == 0 and plain > 0 and launches >= 2 * 290 and first >= st["from_ns"]
        assert "116 nodes" in overview(report).not_recorded["cuda_graph"]
        (p,) = Context(report).processes
        parts = p.breakdown.mean_parts()
        busy = sum(v for k, v in parts.items() if k.startswith("busy_"))
        assert busy > 0.6 * p.step_ns  # the graphs' spans count as GPU work, not as idle time


def test_the_diagnosis_says_its_kernel_rules_did_not_see_the_graphs_kernels(tmp_path: Path) -> None:
    from conftest import unpack_fixture
    from gpuscope.analysis.diagnosis import diagnose
    from gpuscope.trace.report import Report

    with Report.open(unpack_fixture("client_nanogpt_reduce_overhead_graphs", tmp_path)) as report:
        notes = diagnose(report).notes
    (note,) = [n for n in notes if "one operation per launch" in n]
    assert "116 nodes" in note and "--trace graph-nodes" in note
    with Report.open(unpack_fixture("client_nanogpt_reduce_overhead", tmp_path)) as report:  # every node recorded
        assert not [n for n in diagnose(report).notes if "one operation per launch" in n]
