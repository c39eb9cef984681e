"""Collectives per rank: NCCL kernel names, c10d operators, arrival skew, overlap, and the straggler,
imbalance and exposed-communication findings on hand-made multi-rank reports."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

from gpuscope.analysis.distributed.collectives import (
    collectives, overlap_ns, parse_kernel, parse_op, parse_range, tensor_bytes,
)
from gpuscope.analysis.diagnosis import diagnose
from gpuscope.analysis.distributed.summaries import collective_sum, rank_steps, rank_sum
from gpuscope.analysis.distributed.ranks import rank_table
from gpuscope.capture.python.ranks import from_environment
from gpuscope.trace.report import Report
from rank_reports import MS, nccl_straggler


@pytest.mark.parametrize("name, expected", [
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", ("all_reduce", "RING", "LL")),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", ("all_reduce", "RING", "LL")),
    ("ncclDevKernel_AllGather_RING_LL128(ncclDevKernelArgsStorage<4096ul>)", ("all_gather", "RING", "LL128")),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_TREE_SIMPLE", ("reduce_scatter", "TREE", "SIMPLE")),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", ("send_recv", None, None)),
    ("ncclDevKernel_Broadcast_RING_LL", ("broadcast", "RING", "LL")),
    ("ampere_sgemm_128x64_nn", None),
    ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", None),
])
def test_nccl_kernel_names_give_kind_algorithm_and_protocol(name: str, expected: object) -> None:
    assert parse_kernel(name) == expected


def test_c10d_operators_and_backend_ranges_give_their_kind() -> None:
    assert parse_op("c10d::allreduce_") == "all_reduce"
    assert parse_op("c10d::_allgather_base_") == "all_gather"
    assert parse_op("c10d::_reduce_scatter_base_") == "reduce_scatter"
    assert parse_op("_c10d_functional::all_reduce") == "all_reduce"
    assert parse_op("c10d::barrier") == "barrier"
    assert parse_op("_c10d_functional::wait_tensor") is None
    assert parse_op("aten::mm") is None
    assert parse_range("gloo:all_reduce") == "all_reduce"
    assert parse_range("nccl:_all_gather_base") == "all_gather"
    assert parse_range("DataLoader.__next__") is None


def test_bytes_of_a_tensor_list_argument() -> None:
    assert tensor_bytes('[[[4680]],null,null,null]', '[["float32"],null,null,null]') == 4680 * 4
    assert tensor_bytes('[[[2, 3], [4]],null]', '[["bfloat16", "int64"],null]') == 6 * 2 + 4 * 8
    assert tensor_bytes('[[null],[[1]],null]', '[[null],["int64"],null]') is None
    assert tensor_bytes("not json", "[]") is None


def test_launcher_variables_give_the_rank() -> None:
    torchrun = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8", "GROUP_RANK": "1"}
    assert from_environment(torchrun, "h") == (3, 1, 8, 1, "h", None, "torchrun")
    mpi = {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_SIZE": "6"}
    assert from_environment(mpi, "h") == (5, 1, 6, None, "h", None, "mpirun")
    slurm = {"SLURM_PROCID": "2", "SLURM_LOCALID": "0", "SLURM_NTASKS": "4", "SLURM_NODEID": "2"}
    assert from_environment(slurm, "h") == (2, 0, 4, 2, "h", None, "slurm")
    assert from_environment({"PATH": "/bin"}, "h") is None


def test_arrival_skew_names_the_rank_the_others_wait_for(tmp_path: Path) -> None:
    with nccl_straggler(tmp_path / "r.gpuscope") as r:
        coll = collectives(r)
        assert set(coll["rank"]) == {0, 1} and set(coll["kind"]) == {"all_reduce"}
        per = rank_steps(r)
        rows = {x["Rank"]: x for x in rank_sum(r).records()}
        kinds = collective_sum(r).records()
    # rank 1 loads 3.4 ms longer, so rank 0 waits that long in every all-reduce
    assert (per.loc[per["rank"] == 0, "wait_ns"] == int(3.4 * MS)).all()
    assert (per.loc[per["rank"] == 1, "wait_ns"] == 0).all()
    assert rows[1]["Arrived Last"] == 100.0 and rows[0]["Arrived Last"] == 0.0
    assert rows[0]["Comm/Step"] == pytest.approx(4.4 * MS) and rows[1]["Comm/Step"] == pytest.approx(MS)
    assert {k["Algorithm"] for k in kinds} == {"RING/LL"}


def test_the_straggler_finding_says_why_and_what_the_others_lose(tmp_path: Path) -> None:
    with nccl_straggler(tmp_path / "r.gpuscope") as r:
        d = diagnose(r)
    straggler = next(f for f in d.findings if f.rule == "straggler")
    assert straggler.data["straggler_rank"] == 1 and straggler.data["cause_part"] == "idle_data"
    assert straggler.saving_ns == pytest.approx(3.4 * MS)
    assert "data loading" in straggler.location and "rank 1" in straggler.location
    exposed = [f for f in d.findings if f.rule == "exposed_comm"]
    # each all-reduce runs 1 ms after the last arrival with no compute beside it, on both ranks: one
    # fix (overlap it), so one finding that names both
    assert len(exposed) == 1 and exposed[0].saving_ns == pytest.approx(MS)
    assert sorted(exposed[0].data["ranks"].values()) == pytest.approx([MS, MS])
    assert any("found on 2 ranks" in e for e in exposed[0].evidence)
    assert not any(f.rule == "load_imbalance" for f in d.findings)


def test_ranks_slowest_in_turn_are_an_imbalance_not_a_straggler(tmp_path: Path) -> None:
    with nccl_straggler(tmp_path / "r.gpuscope", load_ms=(0.5, 2.0, 3.5), steps=9, rotate=True) as r:
        d = diagnose(r)
    rules = {f.rule for f in d.findings}
    assert "load_imbalance" in rules and "straggler" not in rules
    f = next(f for f in d.findings if f.rule == "load_imbalance")
    # per step the waits are 3 ms, 1.5 ms and 0: 1.5 ms per rank on average
    assert f.saving_ns == pytest.approx(1.5 * MS)


def test_overlap_counts_compute_beside_a_collective_once() -> None:
    coll = pd.DataFrame({"pid": [1, 1, 2], "start_ns": [100, 500, 100], "end_ns": [300, 600, 300]})
    compute = pd.DataFrame({"pid": [1, 1, 1], "start_ns": [50, 150, 550], "end_ns": [200, 250, 700]})
    assert overlap_ns(coll, compute).tolist() == [150, 50, 0]


def test_a_single_process_report_has_no_rank_findings(tmp_path: Path) -> None:
    with nccl_straggler(tmp_path / "r.gpuscope", load_ms=(1.0,)) as r:
        d = diagnose(r)
        assert len(rank_sum(r).rows) == 1
    # nothing to compare, and nothing to say: the rank rules are not listed as skipped either
    assert not {"straggler", "exposed_comm"} & {s.rule for s in d.skipped}
    assert not {"straggler", "exposed_comm", "hung_rank"} & {f.rule for f in d.findings}


def test_ranks_without_shared_collectives_say_why_they_were_not_checked(tmp_path: Path) -> None:
    path = tmp_path / "r.gpuscope"
    nccl_straggler(path).close()
    con = duckdb.connect(str(path))
    con.execute("DELETE FROM kernel WHERE pid = 101 AND config_id = (SELECT id FROM kernel_config WHERE "
                "name_id = (SELECT id FROM string WHERE value LIKE 'nccl%'))")
    con.close()
    with Report.open(path) as r:
        d = diagnose(r)
    skipped = {s.rule: s.reason for s in d.skipped}
    assert "two or more ranks" in skipped["straggler"]


def test_a_report_of_schema_5_opens_without_ranks(tmp_path: Path) -> None:
    path = tmp_path / "old.gpuscope"
    nccl_straggler(path).close()
    con = duckdb.connect(str(path))
    con.execute("DROP TABLE rank")
    con.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
    con.close()
    with Report.open(path) as r:
        assert len(rank_table(r)) == 0
        per = rank_steps(r)
        assert set(per["rank"].map(lambda v: v is None or np.isnan(v))) == {True}


def _op(b, pid: int, start: int, name: str, shapes: str, dtypes: str, ranks: list[int]) -> None:
    scalars = '{"process_group":["0","default_pg",%s],"async_op":false}' % ranks
    b.writer.con.execute("INSERT INTO torch_op VALUES (?, ?, ?, 1, ?, 0, ?, ?, NULL, ?)",
                         [start, start + 20_000, pid, b.writer.intern(name), shapes, dtypes, scalars])


def test_every_operator_gives_its_own_kernel_its_bytes_and_a_barrier_is_named(tmp_path: Path) -> None:
    """Two ranks whose operators were all recorded; the second rank (pid 100) runs later than the
    first (pid 101), so the kernels' order by process differs from their order in time. Each
    kernel takes the bytes of its own operator, and the barrier's kernel (NCCL's one-element
    all-reduce) is numbered among the all-reduces and named a barrier."""
    from report_builder import ReportBuilder
    from rank_reports import add_rank

    b = ReportBuilder(tmp_path / "r.gpuscope")
    ar = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    ag = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    for pid, rank, lag in ((100, 0, 50 * MS), (101, 1, 0)):
        add_rank(b, pid, rank, 2)
        t = lag
        for name, kernel, shapes, dtypes in (
                ("c10d::allreduce_", ar, "[[[1024]],null]", '[["float32"],null]'),
                ("c10d::barrier", ar, "[[1],null]", '["uint8",null]'),
                ("c10d::_allgather_base_", ag, "[[2048],[1024],null]", '["bfloat16","bfloat16",null]'),
                ("c10d::allreduce_", ar, "[[[4096]],null]", '[["float32"],null]')):
            _op(b, pid, t, name, shapes, dtypes, [0, 1])
            b.kernel(kernel, t + 30_000, t + 80_000, pid=pid)
            t += MS
    coll = collectives(b.open())
    for pid in (100, 101):
        mine = coll[coll["pid"] == pid].sort_values("start_ns")
        assert mine["kind"].tolist() == ["all_reduce", "barrier", "all_gather", "all_reduce"]
        assert mine["bytes"].tolist()[:1] + mine["bytes"].tolist()[2:] == [4096.0, 4096.0, 16384.0]
        assert mine["group_size"].tolist() == [2, 2, 2, 2]
