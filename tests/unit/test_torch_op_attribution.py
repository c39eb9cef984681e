"""PyTorch operators and the GPU operations launched inside them, on a hand-made report."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from gpuscope.analysis.ops.attribution import ops_table
from gpuscope.analysis.ranges.operators import OUTSIDE, op_kernels_table, op_sum, torch_ops_table
from gpuscope.trace.report import Report
from report_builder import ReportBuilder, add_torch_op

S1 = "[[16],[4,8],[8,16]]"
F3 = '["float32","float32","float32"]'

# (label, name, start, end, thread, shapes, dtypes, seq). Thread 1 runs the forward pass, thread 2
# autograd's worker, thread 3 another thread of the program. "linear" encloses an addmm (a
# recorder that saw nested calls); "t" and "view" start together, the longer one first.
OPS = [
    ("A", "aten::addmm", 1000, 2000, 1, S1, F3, 0),
    ("F", "aten::add", 1500, 1600, 3, "[[4],[4],null]", '["float32","float32",null]', None),
    ("B", "aten::relu", 2100, 2500, 1, "[[4,16]]", '["float32"]', None),
    ("C", "aten::addmm", 3000, 4000, 1, S1, F3, 1),
    ("D", "aten::mm", 5000, 6000, 2, "[[4,16],[16,8]]", '["bfloat16","bfloat16"]', 1),
    ("L", "aten::linear", 10000, 12000, 1, "[[2,8],[32,8],[32]]", F3, None),
    ("I", "aten::addmm", 10200, 11800, 1, "[[32],[2,8],[8,32]]", F3, None),
    ("J", "aten::view", 20000, 20000, 1, "[[4,4],null]", '["float32",null]', None),
    ("K", "aten::t", 20000, 20500, 1, "[[4,4]]", '["float32"]', None),
]

# (name, launch, thread, GPU start, GPU end, operator with API calls, operator without them).
# Without API calls the thread is unknown: an operator of any thread that runs at the launch counts,
# so the two launches at 1500 and 1550 go to F (thread 3), which started after A.
GPU = [
    ("gemm", 1500, 1, 1600, 1900, "A", "F"),
    ("bias", 1700, 1, 1900, 1950, "A", "A"),
    ("add", 1550, 3, 1560, 1570, "F", "F"),
    ("relu", 2200, 1, 2300, 2400, "B", "B"),
    ("other", 2700, 1, 2750, 2800, None, None),
    ("memcpy", 3100, 1, 3200, 3300, "C", "C"),  # without API calls placed at its GPU start, still in C
    ("gemm", 3500, 1, 3600, 3800, "C", "C"),
    ("gemm", 5500, 2, 5600, 6000, "D", "D"),
    ("fill", 10100, 1, 11000, 11010, "L", "L"),
    ("gemm", 10500, 1, 10600, 10900, "I", "I"),
]
IDS = {label: i + 1 for i, label in enumerate(["A", "F", "B", "C", "D", "L", "I", "K", "J"])}


def _report(tmp_path: Path, api: bool) -> Report:
    b = ReportBuilder(tmp_path / f"ops_{api}.gpuscope")
    for _, name, start, end, tid, shapes, dtypes, seq in OPS:
        add_torch_op(b, name, start, end, tid, shapes=shapes, dtypes=dtypes, seq=seq)
    for name, launch, tid, start, end, _, _ in GPU:
        thread, at = (tid, launch) if api else (None, None)
        if name == "memcpy":
            b.memcpy(start, end, tid=thread, launch=at)
        else:
            b.kernel(name, start, end, tid=thread, launch=at, queued=None if api else launch)
    # another process's kernel at the same time as A, launched by a thread with the same id: not A's
    b.writer.con.execute("INSERT INTO process (pid, ppid, start_ns, clock) VALUES (200, 1, 0, 'cupti')")
    b.kernel("elsewhere", 1600, 1700, tid=1 if api else None, launch=1500 if api else None,
             queued=None if api else 1500, pid=200)
    return b.open(trace=["cuda", "torch-ops"] + (["cuda-api"] if api else []))


def test_operators_are_numbered_and_nested(tmp_path: Path) -> None:
    with _report(tmp_path, api=True) as report:
        rows = report.sql(f"SELECT torch_op_id, name, tid, depth, parent_id, seq, shapes FROM {torch_ops_table(report)} "
                          "ORDER BY torch_op_id")
    by_id = {r[0]: r for r in rows}
    assert [by_id[IDS[label]][1] for label in "AFBCDLIKJ"] == [
        "aten::addmm", "aten::add", "aten::relu", "aten::addmm", "aten::mm", "aten::linear", "aten::addmm",
        "aten::t", "aten::view"]
    nested = {r[0]: (r[3], r[4]) for r in rows if r[3]}
    assert nested == {IDS["I"]: (1, IDS["L"]), IDS["J"]: (1, IDS["K"])}
    assert by_id[IDS["C"]][5] == 1 and by_id[IDS["F"]][5] is None
    assert by_id[IDS["D"]][6] == "[[4,16],[16,8]]"


@pytest.mark.parametrize("api", [True, False])
def test_each_gpu_operation_belongs_to_the_innermost_operator_at_its_launch(tmp_path: Path, api: bool) -> None:
    with _report(tmp_path, api) as report:
        got = report.sql(f"""
            SELECT o.pid, o.launch_ns, o.kind, w.torch_op_id
            FROM {op_kernels_table(report)} w JOIN {ops_table(report)} o USING (op_id)
            ORDER BY o.pid, o.launch_ns""")
    expected = sorted((100, launch if api or name != "memcpy" else start, "memcpy" if name == "memcpy" else "kernel",
                       IDS.get((with_api if api else without_api) or ""))
                      for name, launch, _, start, _, with_api, without_api in GPU)
    assert got == expected + [(200, 1500, "kernel", None)]


def test_op_sum_with_api_calls(tmp_path: Path) -> None:
    with _report(tmp_path, api=True) as report:
        table = op_sum(report)
    rows = [tuple(r[:8]) for r in table.rows]
    assert rows == [
        ("aten::addmm", S1, F3, 2, 2000, 1000, 3, 300 + 50 + 100 + 200),  # A and C; the memcpy is no kernel
        ("aten::mm", "[[4,16],[16,8]]", '["bfloat16","bfloat16"]', 1, 1000, 1000, 1, 400),
        ("aten::addmm", "[[32],[2,8],[8,32]]", F3, 1, 1600, 1600, 1, 300),  # same name, other shapes
        ("aten::relu", "[[4,16]]", '["float32"]', 1, 400, 400, 1, 100),
        ("aten::linear", "[[2,8],[32,8],[32]]", F3, 1, 2000, 2000, 1, 10),  # its own fill, not the addmm's gemm
        ("aten::add", "[[4],[4]]", '["float32","float32"]', 1, 100, 100, 1, 10),  # trailing nulls left out
        ("aten::t", "[[4,4]]", '["float32"]', 1, 500, 500, 0, 0),
        ("aten::view", "[[4,4]]", '["float32"]', 1, 0, 0, 0, 0),
        (OUTSIDE, None, None, None, None, None, 2, 50 + 100),  # and process 200's kernel
    ]
    total = 1520 + 100  # every GPU operation of the report
    assert sum(r[7] for r in table.rows) == total
    assert table.rows[0][8] == pytest.approx(100 * 650 / total)
    assert sum(r[8] for r in table.rows) == pytest.approx(100)
    assert not any("cuda-api" in n for n in table.notes)


def test_op_sum_without_api_calls_moves_the_launches_at_1500(tmp_path: Path) -> None:
    with _report(tmp_path, api=False) as report:
        table = op_sum(report)
    got = {(r[0], r[1]): (r[6], r[7]) for r in table.rows}
    assert got[("aten::addmm", S1)] == (2, 50 + 100 + 200)
    assert got[("aten::add", "[[4],[4]]")] == (2, 10 + 300)
    assert any("--trace cuda-api" in n for n in table.notes)


def test_op_sum_without_operators_says_how_to_record_them(tmp_path: Path) -> None:
    b = ReportBuilder(tmp_path / "none.gpuscope")
    b.kernel("gemm", 10, 20, tid=1, launch=5)
    with b.open(trace=["cuda", "nvtx", "torch"]) as report:
        table = op_sum(report)
    assert table.rows == []
    assert table.notes == ["No PyTorch operators in this report: rerun with --trace cuda,nvtx,torch,torch-ops."]
    b = ReportBuilder(tmp_path / "hint.gpuscope")
    with b.open(trace=["cuda"], not_recorded={"torch_ops": "PyTorch operators: add --trace torch-ops"}) as report:
        assert op_sum(report).notes == ["No PyTorch operators in this report: PyTorch operators: add --trace torch-ops."]


@pytest.mark.parametrize("nested", [False, True])
def test_random_operators_against_a_direct_search(tmp_path: Path, nested: bool) -> None:
    """Both ways of finding operators (the as-of join where a thread's operators never overlap, and
    the general one) against the definitions, evaluated call by call."""
    rng = random.Random(7 + nested)
    b = ReportBuilder(tmp_path / "random.gpuscope")
    calls: list[tuple[int, int, int, int]] = []  # (tid, start, end, label)
    starts = rng.sample(range(0, 200_000, 10), 600)
    for tid in (1, 2, 3):
        t = 0
        for _ in range(100):  # a thread's calls one after another, with gaps
            t += rng.randrange(1, 400)
            end = t + rng.randrange(0, 300)
            calls.append((tid, t, end, len(calls)))
            t = end
    if nested:  # thread 4: intervals of any kind (nested, overlapping, disjoint)
        for start in starts[:100]:
            calls.append((4, start, start + rng.randrange(0, 3000), len(calls)))
    for tid, start, end, label in calls:
        add_torch_op(b, f"op{label}", start, end, tid)
    launches = []
    for i in range(400):
        tid = rng.choice([1, 2, 3, 4, None])
        t = rng.choice([c[1] for c in calls] + [c[2] for c in calls]) if i % 4 == 0 else rng.randrange(0, 60_000)
        launches.append((tid, t))
        b.kernel("k", t, t + 1, tid=tid, launch=t if tid is not None else None, queued=None if tid else t)
    with b.open(trace=["cuda", "torch-ops"]) as report:
        tree = {n: (d, p) for n, d, p in report.sql(
            f"SELECT t.name, t.depth, p.name FROM {torch_ops_table(report)} t "
            f"LEFT JOIN {torch_ops_table(report)} p ON p.torch_op_id = t.parent_id")}
        got = report.sql(f"""
            SELECT o.tid, o.launch_ns, t.name FROM {op_kernels_table(report)} w JOIN {ops_table(report)} o USING (op_id)
            LEFT JOIN {torch_ops_table(report)} t USING (torch_op_id)""")
    order = sorted(calls, key=lambda c: (c[0], c[1], -c[2], c[3]))
    parent: dict[int, int | None] = {}
    for i, (tid, _, end, label) in enumerate(order):
        before = [c for c in order[:i] if c[0] == tid and c[2] >= end]
        parent[label] = before[-1][3] if before else None

    def depth(label: int) -> int:
        up = parent[label]
        return 0 if up is None else depth(up) + 1

    assert tree == {f"op{label}": (depth(label), None if parent[label] is None else f"op{parent[label]}")
                    for label in parent}
    assert any(d for d, _ in tree.values()) == nested

    def innermost(tid: int | None, t: int) -> str | None:
        inside = [c for c in calls if (tid is None or c[0] == tid) and c[1] <= t <= c[2]]
        return f"op{max(inside, key=lambda c: (c[1], -c[2]))[3]}" if inside else None

    assert sorted(got, key=repr) == sorted(((tid, t, innermost(tid, t)) for tid, t in launches), key=repr)
