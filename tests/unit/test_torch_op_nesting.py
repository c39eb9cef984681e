"""Deeply and widely nested PyTorch operators (as imported profiler traces have them): parents, depths,
the operator of each launch and op_sum, against answers worked out call by call."""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path

from gpuscope.analysis.ops.attribution import FOREVER, ops_table
from gpuscope.analysis.ranges.operators import OUTSIDE, op_kernels_table, op_sum, torch_ops_table
from report_builder import ReportBuilder, add_torch_op

NAMES = ["aten::linear", "aten::addmm", "aten::mm", "aten::relu", "aten::copy_"]
SHAPES = ["[[4,8]]", "[[8,8],[8,8]]"]


def _calls(rng: random.Random) -> list[tuple[str, int, int | None, int, str]]:
    """(name, start, end, thread, shapes): on thread 1 a chain 90 deep with 120 children of the
    innermost, each with two of its own; on thread 2 random trees with equal starts, equal calls
    and calls that overlap without nesting; one call on thread 2 never ends."""
    calls = [(NAMES[k % 3], 1000 + 10 * k, 1_000_000 - 10 * k, 1, SHAPES[k % 2]) for k in range(90)]
    for k in range(120):
        s = 10_000 + 5_000 * k
        calls.append(("aten::linear", s, s + 4_000, 1, SHAPES[k % 2]))
        calls += [("aten::addmm", s + 100, s + 1_900, 1, SHAPES[0]), ("aten::relu", s + 2_000, s + 3_900, 1, SHAPES[1])]

    def tree(start: int, end: int, depth: int) -> None:
        if depth > 6 or end - start < 8:
            return
        at = start
        while at < end - 4:
            length = rng.randint(1, max(1, (end - at) // 2))
            s = at if rng.random() < 0.3 else rng.randint(at, end - length)  # some start with their parent
            e = s + length
            calls.append((rng.choice(NAMES), s, e, 2, rng.choice(SHAPES)))
            if rng.random() < 0.1:  # an equal call
                calls.append((rng.choice(NAMES), s, e, 2, SHAPES[0]))
            tree(s, e, depth + 1)
            at = e + rng.randint(0, 3)

    tree(0, 200_000, 0)
    for _ in range(15):  # overlapping without nesting
        s = rng.randint(0, 190_000)
        calls.append(("aten::copy_", s, s + rng.randint(1, 9_000), 2, SHAPES[0]))
    calls.append(("aten::linear", 150_000, None, 2, SHAPES[1]))
    return calls


def _order(call: tuple[int, int, int, int, int]) -> tuple[int, int, int]:
    rid, start, end, _, _ = call
    return (start, -end, rid)


def test_nested_operators_match_call_by_call_answers(tmp_path: Path) -> None:
    rng = random.Random(7)
    b = ReportBuilder(tmp_path / "nested.gpuscope")
    for name, start, end, tid, shapes in _calls(rng):
        add_torch_op(b, name, start, end, tid, shapes=shapes, dtypes='["float32"]')  # type: ignore[arg-type]
    for k in range(400):  # launches on threads 1 and 2, and some of an unknown thread (any thread's operators)
        launch = rng.randint(0, 1_050_000)
        tid = rng.choice([1, 2, None])
        b.kernel(f"k{k % 4}", 2_000_000 + 100 * k, 2_000_000 + 100 * k + 1 + k % 7, tid=tid,
                 launch=launch if tid else None, queued=None if tid else launch)
    with b.open(trace=["cuda", "torch-ops", "cuda-api"]) as report:
        ops = report.sql(f"SELECT torch_op_id, start_ns, coalesce(end_ns, {FOREVER}), tid, pid, name, shapes, "
                         f"end_ns - start_ns, depth, parent_id FROM {torch_ops_table(report)}")
        launches = report.sql(f"SELECT o.op_id, o.pid, o.tid, o.launch_ns, o.end_ns - o.start_ns, w.torch_op_id "
                              f"FROM {ops_table(report)} o JOIN {op_kernels_table(report)} w USING (op_id)")
        table = op_sum(report)
    assert len(ops) == len(_calls(random.Random(7)))
    by_thread: dict[int, list[tuple[int, int, int, int, int]]] = defaultdict(list)
    for rid, start, end, tid, pid, *_ in ops:
        by_thread[tid].append((rid, start, end, tid, pid))
    want: dict[int, tuple[int, int | None]] = {}
    for calls in by_thread.values():
        calls.sort(key=_order)
        for i, (rid, _, end, _, _) in enumerate(calls):  # the last call before it that ends no earlier
            parent = next((c[0] for c in reversed(calls[:i]) if c[2] >= end), None)
            want[rid] = (want[parent][0] + 1 if parent else 0, parent)
    got = {r[0]: (r[8], r[9]) for r in ops}
    assert got == want
    assert max(d for d, _ in got.values()) >= 90 and sum(1 for d, _ in got.values() if d == 0) < len(got) / 10

    everything = [c for calls in by_thread.values() for c in calls]
    owner = {}
    for op_id, pid, tid, launch, _, torch_op_id in launches:
        around = [c for c in everything if c[4] == pid and (tid is None or c[3] == tid) and c[1] <= launch <= c[2]]
        owner[op_id] = max(around, key=_order)[0] if around else None
        assert torch_op_id == owner[op_id], (op_id, launch, tid)
    assert sum(1 for v in owner.values() if v is None) >= 1 and sum(1 for v in owner.values() if v) > 300

    info = {r[0]: r for r in ops}
    sums: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for r in ops:
        s = sums[(r[5], r[6])]
        s[0] += 1
        s[1] += r[7] or 0
    outside = [0, 0]
    for op_id, _, _, _, gpu, _ in launches:
        if owner[op_id] is None:
            outside[0] += 1
            outside[1] += gpu
        else:
            s = sums[(info[owner[op_id]][5], info[owner[op_id]][6])]
            s[2] += 1
            s[3] += gpu
    rows = {(r[0], r[1]): (r[3], r[4], r[6], r[7]) for r in table.rows}
    assert rows.pop((OUTSIDE, None)) == (None, None, outside[0], outside[1])
    assert rows == {key: tuple(v) for key, v in sums.items()}
