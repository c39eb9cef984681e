"""Attributing GPU operations to the ranges around their launch, on recorded and hand-made reports.

The recorded MLP (tests/conftest.py) wraps each of its 4 steps in NVTX ranges "step" > "forward",
"backward", "optimizer" on the main thread; autograd launches the backward kernels from its own
worker thread. ``mlp_api`` has the CUDA API calls (launch thread and time known), ``mlp_default``
is the same program without them (kernels placed by their queued time, on any thread).
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from report_builder import ReportBuilder

from gpuscope.analysis.ops import attribution
from gpuscope.analysis.ops.attribution import FOREVER, innermost, op_ranges
from gpuscope.trace.report import Report

STEPS = 4
LAYERS = 8
FORWARD_GEMM = "gemm_f32f32_f32f32_f32_tn_n"


def _kernels(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["kind"] == "kernel"]


def _per_range_instance(frame: pd.DataFrame) -> Counter:
    """Operations per (range name, instance number by start), None for no range."""
    starts = frame.dropna(subset=["range_name"]).groupby("range_name")["range_start_ns"].unique()
    order = {(n, s): i for n, ss in starts.items() for i, s in enumerate(sorted(ss))}
    return Counter(
        (r.range_name, order[(r.range_name, r.range_start_ns)]) if isinstance(r.range_name, str) else None
        for r in frame.itertuples()
    )


def test_forward_gemms_are_in_forward_ranges(mlp_api: Report) -> None:
    k = _kernels(innermost(mlp_api))
    gemm = k[k["name"].str.contains(FORWARD_GEMM)]
    assert len(gemm) == LAYERS * STEPS
    assert set(gemm["range_name"]) == {"forward"}
    # one forward GEMM per layer in each of the 4 forward ranges
    assert Counter(_per_range_instance(gemm).values()) == {LAYERS: STEPS}


def test_optimizer_ranges_hold_the_sgd_update(mlp_api: Report) -> None:
    inner = innermost(mlp_api)
    opt = inner[inner["range_name"] == "optimizer"]
    assert len(opt) == STEPS and opt["name"].str.contains("multi_tensor_apply_kernel").all()
    assert opt["range_start_ns"].nunique() == STEPS  # one per optimizer range
    pairs = op_ranges(mlp_api)
    assert (pairs["range_name"] == "optimizer").sum() == STEPS


def test_launch_point_is_the_api_call_on_its_thread(mlp_api: Report) -> None:
    inner = innermost(mlp_api)
    api = mlp_api.api_calls()
    k = mlp_api.kernels().merge(api, on=["pid", "correlation_id"], suffixes=("", "_api"))
    assert sorted(_kernels(inner)["launch_ns"]) == sorted(k["start_ns_api"])
    # autograd's worker thread launched the backward kernels; it has no ranges, so under the
    # same-thread rule they are in none, and "backward" holds only the main thread's first kernel
    main_tid = mlp_api.ranges()["tid"].iloc[0]
    worker = inner[inner["tid"] != main_tid]
    assert len(_kernels(worker)) == 164 and worker["range_name"].isna().all()
    backward = inner[inner["range_name"] == "backward"]
    assert len(backward) == STEPS and (backward["tid"] == main_tid).all()


def test_with_and_without_api_calls_agree(mlp_api: Report, recorded) -> None:
    """The queued time stands in for the API call: ignoring threads, both reports of the program
    put the same number of kernels in each range instance."""
    with Report.open(recorded("mlp_default")) as default:
        without = _per_range_instance(_kernels(innermost(default)))
    with_api = _per_range_instance(_kernels(innermost(mlp_api, same_thread=False)))
    assert with_api == without
    assert without[("backward", 0)] == 42 and without[("forward", 0)] == 18
    assert without[("optimizer", 3)] == 1 and without[None] == 2
    # with the API calls and the same-thread rule, the main-thread kernels keep their ranges
    same_thread = _per_range_instance(_kernels(innermost(mlp_api)))
    assert {k: v for k, v in same_thread.items() if k and k[0] != "backward"} == {
        k: v for k, v in without.items() if k and k[0] != "backward"
    }


def test_op_ranges_lists_every_enclosing_range(mlp_api: Report) -> None:
    pairs = op_ranges(mlp_api)
    per_range = pairs.groupby("range_name").size().to_dict()
    # a step encloses its forward, backward and optimizer operations of the main thread
    assert per_range == {"step": 84, "forward": 76, "backward": 4, "optimizer": 4}
    assert pairs["op_id"].nunique() == mlp_api.count("kernel") + mlp_api.count("memcpy") + mlp_api.count("memset")


def test_memory_operations_without_api_calls_use_their_start(tmp_path: Path) -> None:
    b = ReportBuilder(tmp_path / "r.gpuscope")
    b.range("load", 100, 200, 1, source="nvtx")
    b.range("compute", 300, 400, 1, source="nvtx")
    b.memcpy(150, 160)  # started on the GPU inside "load"
    b.memcpy(350, 390)
    b.kernel("k", 1000, 1100, queued=190)  # queued inside "load", ran much later
    with b.open() as report:
        inner = innermost(report)
    assert list(zip(inner["kind"], inner["range_name"])) == [("memcpy", "load"), ("kernel", "load"),
                                                             ("memcpy", "compute")]
    assert inner["tid"].isna().all()


def _brute_force(ops: dict, ranges: dict, same_thread: bool) -> tuple[dict, set]:
    """Innermost range and all enclosing ranges of each operation, by the definitions, pair by pair."""
    inner, pairs = {}, set()
    for op, (tid, t) in ops.items():
        best = None
        for rid, (rtid, s, e) in ranges.items():
            if same_thread and tid is not None and rtid != tid:
                continue
            if s <= t <= (FOREVER if e is None else e):
                pairs.add((op, rid))
                key = (s, -(FOREVER if e is None else e), rid)
                best = max(best or key, key)
        if best:
            inner[op] = best[2]
    return inner, pairs


@pytest.mark.parametrize("seed", range(12))
def test_innermost_and_enclosing_match_the_definition(tmp_path: Path, seed: int) -> None:
    """Random overlapping ranges on three threads (some never ended), launches with and without a
    known thread, against a pair-by-pair evaluation of the definitions."""
    rnd = random.Random(seed)
    b = ReportBuilder(tmp_path / "r.gpuscope")
    ranges = {}
    for i in range(rnd.randint(1, 30)):
        thread, start = rnd.choice([1, 2, 3]), rnd.randint(0, 1000)
        end = None if rnd.random() < 0.05 else start + rnd.randint(0, 300)
        b.range(f"r{i}", start, end, thread, source="nvtx")
        ranges[f"r{i}"] = (thread, start, end)
    ops: dict[str, tuple[int | None, int]] = {}
    for i in range(rnd.randint(1, 50)):
        t = rnd.randint(0, 1400)
        tid = rnd.choice([1, 2, 3, 4]) if rnd.random() < 0.5 else None
        if tid is not None:
            b.kernel(f"k{i}", 5000 + i, 5001 + i, tid=tid, launch=t)
        else:
            b.kernel(f"k{i}", 5000 + i, 5001 + i, queued=t)
        ops[f"k{i}"] = (tid, t)
    with b.open() as report:
        for same_thread in (True, False):
            inner, pairs = _brute_force(ops, ranges, same_thread)
            got = innermost(report, same_thread=same_thread).dropna(subset=["range_name"])
            assert dict(zip(got["name"], got["range_name"])) == inner
            got = op_ranges(report, same_thread=same_thread).dropna(subset=["range_name"])
            assert set(zip(got["name"], got["range_name"])) == pairs


@pytest.mark.parametrize("seed", range(6))
def test_range_tree_matches_the_definition(tmp_path: Path, seed: int) -> None:
    rnd = random.Random(100 + seed)
    b = ReportBuilder(tmp_path / "r.gpuscope")
    for i in range(rnd.randint(1, 30)):
        start = rnd.randint(0, 100)
        b.range(f"r{i}", start, None if rnd.random() < 0.05 else start + rnd.randint(0, 50),
                rnd.choice([1, 2]), source="nvtx")
    with b.open() as report:
        ranges = {rid: (tid, s, e) for rid, tid, s, e in report.sql(
            f"SELECT rid, tid, start_ns, end_eff FROM {attribution.ranges_table(report)}")}
        tree = {rid: (parent, level) for rid, parent, level in report.sql(
            f"SELECT * FROM {attribution.range_tree_table(report)}")}
    # ranges of a thread in order of start, longer first; the parent is the last earlier one
    # that ends no earlier
    order = sorted(ranges, key=lambda r: (ranges[r][0], ranges[r][1], -ranges[r][2], r))
    parent: dict[int, int | None] = {}
    for i, r in enumerate(order):
        tid, _, end = ranges[r]
        earlier = [q for q in order[:i] if ranges[q][0] == tid and ranges[q][2] >= end]
        parent[r] = earlier[-1] if earlier else None

    def level(r: int) -> int:
        up = parent[r]
        return 0 if up is None else 1 + level(up)

    assert tree == {r: (parent[r], level(r)) for r in ranges}


def test_results_are_kept_per_connection(mlp_api: Report) -> None:
    first = attribution.innermost_table(mlp_api, sources=("nvtx",))
    assert attribution.innermost_table(mlp_api, sources=("nvtx",)) == first
    assert attribution.innermost_table(mlp_api, sources=("torch",)) != first
    assert mlp_api.sql(f"SELECT count(*) FROM {attribution.innermost_table(mlp_api, sources=())}") == [(0,)]


def test_launch_anchors_place_queued_work_in_the_range_that_launched_it(tmp_path: Path) -> None:
    # Two module ranges with anchors just before their ends; the GPU runs behind, so kernels start
    # after their range ended. Without anchors they would count to the next range or to none.
    b = ReportBuilder(tmp_path / "r.gpuscope")
    b.range("A", 1000, 2000, 1)
    b.range("B", 2100, 3000, 1)
    b.anchor(990)  # anchors come right before each boundary's time
    b.kernel("a1", 2500, 2600)  # launched in A, ran during B
    b.memcpy(2600, 2700)  # launched in A, ran during B
    b.anchor(1990)
    b.anchor(2090)
    b.kernel("b1", 3500, 3600)  # launched in B, ran after it
    b.anchor(2990)
    b.kernel("late", 5000, 5100)  # launched after B: no anchor after it, placed at its GPU start
    with b.open() as report:
        inner = innermost(report)
    names = [n if k == "kernel" else k for n, k in zip(inner["name"], inner["kind"])]
    launch = dict(zip(names, inner["launch_ns"]))
    got = {n: (r if isinstance(r, str) else None) for n, r in zip(names, inner["range_name"])}
    assert got == {"a1": "A", "memcpy": "A", "b1": "B", "late": None}
    assert (launch["a1"], launch["b1"], launch["late"]) == (1989, 2989, 5000)


def test_op_ids_number_the_operations_in_launch_order(mlp_api: Report) -> None:
    ops = mlp_api.df(f"SELECT op_id, pid, launch_ns, start_ns, kind FROM {attribution.ops_table(mlp_api)} ORDER BY op_id")
    assert set(ops["kind"]) >= {"kernel", "memcpy", "memset"}
    assert ops["op_id"].tolist() == list(range(1, len(ops) + 1))
    ordered = ops.sort_values(["pid", "launch_ns", "start_ns", "kind"], kind="stable")
    assert ordered["op_id"].tolist() == ops["op_id"].tolist()
