"""The per-node reports of a multi-node run read as one: clock offsets recovered from collective ends
(or from the hosts' wall clocks), reports merged with one string table and no pid shared, process
groups and bus bandwidth in collective_sum, and each layer's time per rank."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pandas as pd
import pytest

from gpuscope.analysis.distributed.collectives import (
    _groups_alike, arrivals, bus_bandwidth, collectives, data_bytes, group_of,
)
from gpuscope.analysis.diagnosis import diagnose
from gpuscope.analysis.distributed.nodes import clock_offsets, merge_nodes, one_run
from gpuscope.analysis.distributed.layers import rank_layer_sum
from gpuscope.analysis.distributed.summaries import collective_sum, rank_sum
from gpuscope.trace.files import expand
from gpuscope.trace.merge import PID_STRIDE, pid_shifts
from gpuscope.trace.report import Report
from rank_reports import MS, nccl_nodes, nccl_straggler
from report_builder import torch_training

OFFSET = 7_654_321_987  # node 1's clock runs 7.65 s ahead of node 0's
JITTER = 3_000  # the NCCL kernels of one all-reduce end up to 3 µs apart


def _open(paths: list[Path]) -> list[Report]:
    return [Report.open(p) for p in paths]


def test_the_planted_clock_offset_is_recovered_from_collective_ends(tmp_path: Path) -> None:
    paths = nccl_nodes(tmp_path, offsets_ns=(0, OFFSET, -OFFSET // 3), jitter_ns=JITTER)
    reports = _open(paths)
    try:
        assert one_run(reports)
        fixes = clock_offsets(reports)
    finally:
        for r in reports:
            r.close()
    assert [f.method for f in fixes] == ["reference", "collectives", "collectives"]
    # tolerance: the kernels' end jitter (the median of 6 differences of medians lies within it)
    assert fixes[1].offset_ns == pytest.approx(-OFFSET, abs=JITTER)
    assert fixes[2].offset_ns == pytest.approx(OFFSET // 3, abs=JITTER)
    assert fixes[1].matched == 6 and 0 <= (fixes[1].spread_ns or 0) <= JITTER
    assert "from 6 collective ends" in fixes[1].describe()


def test_without_gpu_collectives_the_wall_clock_anchor_aligns_or_nothing_does(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    anchored = nccl_nodes(tmp_path / "a", offsets_ns=(0, OFFSET), gpu=False, anchors=True)
    bare = nccl_nodes(tmp_path / "b", offsets_ns=(0, OFFSET), gpu=False)
    for paths, method, offset in ((anchored, "wall clock", -OFFSET), (bare, "none", 0)):
        reports = _open(paths)
        try:
            fix = clock_offsets(reports)[1]
        finally:
            for r in reports:
                r.close()
        assert (fix.method, fix.offset_ns) == (method, offset)


def test_merged_nodes_hold_every_rank_once_with_one_string_table(tmp_path: Path) -> None:
    paths = nccl_nodes(tmp_path, offsets_ns=(0, OFFSET), jitter_ns=JITTER)
    done = merge_nodes(paths, tmp_path / "all.gpuscope")
    assert [d[3] for d in done] == [0, PID_STRIDE]  # both nodes' processes are 100 and 101
    with Report.open(tmp_path / "all.gpuscope") as r:
        ranks = r.df("SELECT pid, rank, host FROM rank ORDER BY rank")
        dupes = r.sql("SELECT count(*) - count(DISTINCT value) FROM string")[0][0]
        span = r.sql("SELECT max(end_ns) - min(start_ns) FROM kernel")[0][0]
        origins = [m["clock_method"] for m in r.meta["merged_from"]]
        coll = collectives(r)
        rows = {x["Rank"]: x for x in rank_sum(r).records()}
        kinds = collective_sum(r).records()
        d = diagnose(r)
    assert ranks["rank"].tolist() == [0, 1, 2, 3] and ranks["pid"].tolist() == [100, 101, PID_STRIDE + 100,
                                                                                 PID_STRIDE + 101]
    assert dupes == 0 and origins == ["reference", "collectives"]
    assert span < 7 * 10 * MS  # six 10 ms steps on one timeline, not 7.65 s apart
    # matched across the reports: every all-reduce has all four ranks, rank 3 (node 1) the last to arrive
    assert set(coll.groupby(["kind", "seq"])["pid"].nunique()) == {4}
    assert rows[3]["Arrived Last"] == 100.0 and rows[0]["Wait/Step"] == pytest.approx(3.4 * MS, abs=10_000)
    straggler = next(f for f in d.findings if f.rule == "straggler")
    assert straggler.data["straggler_rank"] == 3 and straggler.data["cause_part"] == "idle_data"
    assert straggler.saving_ns == pytest.approx(3.4 * MS, abs=10_000)
    # 4 MiB per all-reduce over the 1 ms after the last arrival; bus bandwidth 2(n-1)/n of it for n = 4
    assert {k["Group"] for k in kinds} == {"default_pg (0)"} and {k["Group Size"] for k in kinds} == {4}
    for k in kinds:
        assert k["Algorithm BW"] == pytest.approx(4 * 2**20 / 1e-3, rel=0.01)
        assert k["Bus BW"] == pytest.approx(1.5 * k["Algorithm BW"])


def test_reports_of_overlapping_ranks_are_not_one_run(tmp_path: Path) -> None:
    a, b = nccl_straggler(tmp_path / "a.gpuscope"), nccl_straggler(tmp_path / "b.gpuscope")
    try:
        assert not one_run([a, b]) and not one_run([a])
    finally:
        a.close()
        b.close()


def test_process_groups_and_nccl_bus_bandwidth_factors() -> None:
    assert group_of('{"process_group":["3","tp",[0,2,4,6]]}') == ("3", "tp", 4)
    assert group_of('{"group_name":"7","group_size":2,"reduce_op":"sum"}') == ("7", None, 2)
    assert group_of("{}") == (None, None, None) and group_of("not json") == (None, None, None)
    gb = 1e9
    assert bus_bandwidth("all_reduce", gb, 1.0, 8) == pytest.approx(gb * 2 * 7 / 8)
    assert bus_bandwidth("all_gather", gb, 1.0, 8) == pytest.approx(gb * 7 / 8)
    assert bus_bandwidth("broadcast", gb, 1.0, 8) == pytest.approx(gb)
    assert bus_bandwidth("barrier", gb, 1.0, 8) is None and bus_bandwidth("all_reduce", None, 1.0, 8) is None
    # reduce_scatter's first argument is this rank's shard; nccl-tests counts the whole buffer
    assert data_bytes("c10d::_reduce_scatter_base_", "reduce_scatter", 1000, 4) == 4000
    assert data_bytes("c10d::allreduce_", "all_reduce", 1000, 4) == 1000
    assert data_bytes("_c10d_functional::all_gather_into_tensor", "all_gather", 10, 8) == 80


def test_pid_shifts_only_where_pids_collide() -> None:
    assert pid_shifts([{1, 2}, {3}, {2, 9}]) == [0, 0, 2 * PID_STRIDE]


def test_placeholders_of_the_output_name() -> None:
    assert expand("job-%h", {}, host="node7") == "job-node7"
    assert expand("job-%q{NODE}-100%%", {"NODE": "2"}) == "job-2-100%"
    with pytest.raises(Exception, match="NODE is not set"):
        expand("job-%q{NODE}", {})


def test_layer_time_per_rank_names_the_slowest_rank(tmp_path: Path) -> None:
    path = tmp_path / "r.gpuscope"
    torch_training(path).close()
    with Report.open(path) as r:  # one process: nothing to compare
        assert rank_layer_sum(r).rows == [] and "No ranks" in rank_layer_sum(r).notes[0]
    paths = nccl_nodes(tmp_path, offsets_ns=(0, OFFSET))
    merge_nodes(paths, tmp_path / "all.gpuscope")
    with Report.open(tmp_path / "all.gpuscope") as r:
        table = rank_layer_sum(r).records()
    # the ranges here are the DataLoader waits: 0.5 ms per step on ranks 0-2, 3.9 ms on rank 3: the largest gap
    loader = table[0]
    assert (loader["Name"], loader["Time"], loader["Max - Min"]) == ("DataLoader.__next__", "CPU", 3.4 * MS)
    assert loader["Ranks"] == 4 and loader["Max Rank"] == 3 and loader["Min"] == pytest.approx(0.5 * MS)
    assert loader["Max"] == pytest.approx(3.9 * MS)
    assert loader["Spread"] == pytest.approx(100 * 3.4 / ((3 * 0.5 + 3.9) / 4))


def test_kernels_take_the_operator_they_were_launched_in_where_some_operators_are_missing(tmp_path: Path) -> None:
    [path] = nccl_nodes(tmp_path, offsets_ns=(0,))
    con = duckdb.connect(str(path))  # pid 100 lost its first operator (as outside a sample window)
    con.execute("DELETE FROM torch_op WHERE pid = 100 AND start_ns = (SELECT min(start_ns) FROM torch_op WHERE pid = 100)")
    con.close()
    with Report.open(path) as r:
        coll = collectives(r)
    by_pid = {pid: f for pid, f in coll.groupby("pid")}
    # numbering would pair each operator with the kernel before its own; by launch, the others have
    # their own operator's bytes, and the kernel whose operator was lost takes those of its place in
    # the step (the same call in every other step: 4 MiB here too)
    mine = by_pid[100].sort_values("start_ns")
    assert set(mine["bytes"].iloc[1:]) == {4 * 2**20}
    assert mine["bytes"].iloc[0] == 4 * 2**20
    assert set(by_pid[101]["group"]) == {"0"} and set(by_pid[101]["bytes"]) == {4 * 2**20}
    # the group that only the other rank knows is taken as pid 100's too, so the calls still pair up
    # (a rank that knows none against one that knows its group would leave every call unmatched)
    assert set(by_pid[100]["group"]) == {"0"}
    assert (arrivals(coll)["ranks"] == 2).all()


def test_where_the_known_groups_are_several_a_kind_matches_in_one_sequence() -> None:
    found = pd.DataFrame({"pid": [1, 1, 2, 2], "kind": ["all_reduce"] * 4, "start_ns": [0, 10, 1, 11],
                          "group": ["0", "1", None, None], "group_desc": ["dp", "tp", None, None],
                          "group_size": [2, 2, None, None]})
    out = _groups_alike(found)
    assert out["group"].isna().all() and out["group_desc"].isna().all()
    # every process knows its groups: left as they are
    known = found.assign(group=["0", "1", "0", "1"])
    assert list(_groups_alike(known)["group"]) == ["0", "1", "0", "1"]
