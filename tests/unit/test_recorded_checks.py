"""The independent-truth checks of tests/device/check.py, rerun on the reports they were made on."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from conftest import FIXTURES

from gpuscope.analysis.overview import busy_time, overview
from gpuscope.trace.report import Report

_spec = importlib.util.spec_from_file_location("device_check", Path(__file__).parents[1] / "device" / "check.py")
check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check)  # type: ignore[union-attr]


def test_kernel_durations_add_up_to_cuda_event_time(recorded) -> None:
    result = check.events(str(recorded("event_regions")), str(FIXTURES / "event_regions.truth.json"))
    assert result["ok"]
    saturated = [r for r in result["rows"] if r["saturated"]]
    assert len(saturated) == 9  # the spin kernel kept the host ahead of the GPU every time
    for r in saturated:
        assert abs(r["ratio_sum_to_event"] - 1) < 0.006
    assert {r["kernels"] for r in result["rows"] if r["region"].startswith("gemm")} == {10}


def test_a_killed_program_keeps_what_it_recorded(recorded) -> None:
    with Report.open(recorded("crash_kill")) as r:
        assert r.meta["exit_signal"] == 9 and r.meta["exit_code"] is None
        assert r.complete  # the launcher survived and finished the file
        assert r.count("kernel") > 1000
        proc = r.processes()
        assert proc["end_ns"].isna().all()  # the program never reached its exit handlers
        ov = overview(r)
        assert ov.exit_description == "killed by signal 9"


def test_busy_time_is_the_union_of_gpu_intervals(mlp_api: Report) -> None:
    ops = mlp_api.sql(
        "SELECT start_ns, end_ns FROM kernel UNION ALL SELECT start_ns, end_ns FROM memcpy "
        "UNION ALL SELECT start_ns, end_ns FROM memset ORDER BY 1, 2"
    )
    busy, cur_s, cur_e = 0, None, None
    for s, e in ops:  # merge by hand
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                busy += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    busy += cur_e - cur_s
    (dev,) = busy_time(mlp_api)
    assert dev.busy_ns == busy
    assert dev.span_ns == max(e for _, e in ops) - ops[0][0]
    assert dev.name == "NVIDIA H200" and dev.kernels == 246


def test_host_waits_match_the_gpu_work_they_waited_for(recorded) -> None:
    # H100 run of tests/device/workloads/sync_loop.py: .item() and nonzero() each step
    result = check.sync(str(recorded("sync_loop")), str(FIXTURES / "sync_loop.lines.json"))
    assert result["ok"]
    item, nonzero = result["per_line"]["item"], result["per_line"]["nonzero"]
    assert item["calls"] == nonzero["calls"] == 23  # 20 steps + 3 warm-up
    assert abs(item["wait_over_drain"] - 1) < 0.05
    assert nonzero["gpu_drain_ns"] == 0  # .item() had already drained the queue
    top = result["sync_sum"][0]
    assert top["Location"].endswith("sync_loop.py:35") and top["API"] == "cudaStreamSynchronize"


def test_cuda_graph_kernels_belong_to_the_range_around_the_replay(recorded) -> None:
    # without API tracing: the graph's launch call, recorded through the callback API, places them
    result = check.graphs(str(recorded("cuda_graph")), str(FIXTURES / "cuda_graph.facts.json"))
    assert result["ok"] and result["kernels_per_replay"] == 18
    with Report.open(recorded("cuda_graph")) as r:
        assert r.count("api_call") == 0 and r.count("launch_call") == 22


def test_whole_graph_launches_are_one_operation_each(recorded) -> None:
    from gpuscope.analysis.ops.attribution import innermost

    with Report.open(recorded("cuda_graph_whole")) as r:
        assert r.count("graph_launch") == 22
        assert r.sql("SELECT count(*) FROM kernel WHERE graph_id <> 0")[0][0] == 0
        ops = innermost(r)
    graphs = ops[ops["kind"] == "graph"]
    assert len(graphs) == 22 and set(graphs["range_name"]) == {"replay"}
    assert set(graphs["name"]) == {"[CUDA graph]"}


@pytest.mark.parametrize(("fixture", "share"), [("client_nanogpt_reduce_overhead", "81%"), ("client_nanogpt_compiled", None),
                                              ("cuda_graph_whole", None)])
def test_the_summary_names_graph_level_records_where_most_kernels_ran_in_graphs(recorded, fixture: str,
                                                                                share: str | None) -> None:
    """reduce-overhead's replays hold 81% of the GPT's kernels, each recorded: the summary's "Not
    recorded" names the graph-level collector with that share. Not where the kernels ran one by one
    (the compiled GPT without graphs), nor where graph launches were recorded whole already."""
    with Report.open(recorded(fixture)) as r:
        hint = overview(r).not_recorded.get("cuda_graph")
    if share is None:
        assert hint is None
    else:
        assert hint is not None and hint.startswith(f"{share} of the kernels ran in CUDA graphs")
        assert hint.endswith("add --trace cuda-graph")


def test_nvml_counters_were_read_on_the_gpu(recorded) -> None:
    # the H100 run of sync_loop.py with the default collectors, NVML at 20 Hz
    with Report.open(recorded("sync_loop")) as r:
        rows = {name: (n, lo, hi) for name, n, lo, hi in r.sql(
            "SELECT name, count(*), min(value), max(value) FROM host_counter WHERE name LIKE 'gpu0.%' GROUP BY name")}
        wall_s = r.meta["wall_ns"] / 1e9
    for name in ("util_percent", "memory_used_bytes", "power_watts", "sm_clock_mhz", "temperature_c",
                 "pcie_rx_bytes_per_s"):
        assert f"gpu0.{name}" in rows, name
    n, lo, hi = rows["gpu0.power_watts"]
    assert n >= 10 * wall_s and 20 < lo <= hi < 800  # every 50 ms or so; an H100's power range
    assert rows["gpu0.memory_used_bytes"][2] > 2**28  # the program's tensors and context
    assert rows["gpu0.sm_clock_mhz"][2] > 1000
