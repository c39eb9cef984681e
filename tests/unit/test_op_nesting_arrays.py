"""The numbers, nesting and launch owners of PyTorch operator calls worked out in numpy
(ranges/op_nesting.py) and paired with the stored calls by position, against a straightforward
call-by-call reference: calls with NULL ends, equal starts, equal calls, two processes, an operator
without a name string, launches of unknown threads, the table made in one batch and in many."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from gpuscope.analysis.ops.attribution import ANY_THREAD, FOREVER, ops_table
from gpuscope.analysis.ranges import operators
from gpuscope.analysis.ranges.operators import op_kernels_table, torch_ops_table
from report_builder import ReportBuilder

NAMES = ["aten::mm", "aten::add", "aten::relu"]


def _calls(rng: random.Random, pids: tuple[int, int]) -> list[tuple[int, int, int, int | None, str]]:
    """(pid, tid, start, end, name) of nested, equal and overlapping calls on two processes."""
    calls = []
    for pid in pids:
        for tid in (1, 2):
            for _ in range(150):
                start = rng.randint(0, 3_000) // 10 * 10  # many equal starts
                end = None if rng.random() < 0.02 else start + rng.randint(0, 400) // 20 * 20
                calls.append((pid, tid, start, end, rng.choice(NAMES)))
                if rng.random() < 0.1:
                    calls.append(calls[-1])  # an equal call
    return calls


def _reference_numbers(rows: list[tuple]) -> dict[int, tuple[int, int, int | None]]:
    """rowid -> (torch_op_id, depth, parent_id) by the definitions, call by call."""
    def key(r: tuple) -> tuple:  # pid, start, tid, longer first (never ended last), name id, table order
        rowid, pid, tid, start, end, name_id = r
        return (pid, start, tid, end is None, -(end or 0), name_id, rowid)

    ids = {r[0]: k + 1 for k, r in enumerate(sorted(rows, key=key))}
    out: dict[int, tuple[int, int, int | None]] = {}
    by_thread: dict[tuple[int, int], list[tuple]] = {}
    for r in rows:
        by_thread.setdefault((r[1], r[2]), []).append(r)
    for calls in by_thread.values():
        calls.sort(key=lambda r: (r[3], -(FOREVER if r[4] is None else r[4]), ids[r[0]]))
        for i, r in enumerate(calls):
            end = FOREVER if r[4] is None else r[4]
            parent = next((c for c in reversed(calls[:i]) if (FOREVER if c[4] is None else c[4]) >= end), None)
            depth = out[parent[0]][1] + 1 if parent else 0
            out[r[0]] = (ids[r[0]], depth, ids[parent[0]] if parent else None)
    return out


@pytest.mark.parametrize("batch", [None, 97])  # the table made in one batch, and in many
def test_numbers_nesting_and_owners_match_a_call_by_call_reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   batch: int | None) -> None:
    if batch:
        monkeypatch.setattr(operators, "BATCH", batch)
    rng = random.Random(3)
    b = ReportBuilder(tmp_path / "calls.gpuscope")
    names = {n: b.writer.intern(n) for n in NAMES}
    calls = _calls(rng, (b.pid, b.pid + 1))
    for pid, tid, start, end, name in calls:
        b.writer.con.execute("INSERT INTO torch_op VALUES (?, ?, ?, ?, ?, NULL, '[]', '[]', '[]', '{}')",
                             [start, end, pid, tid, names[name]])
    b.writer.con.execute("INSERT INTO torch_op VALUES (5, 50, ?, 1, 999999, NULL, '[]', '[]', '[]', '{}')", [b.pid])
    for k in range(300):
        launch = rng.randint(0, 3_500)
        tid = rng.choice([1, 2, None])
        b.kernel(f"k{k % 3}", 10_000 + 10 * k, 10_005 + 10 * k, tid=tid,
                 launch=launch if tid else None, queued=None if tid else launch)
    with b.open(trace=["cuda", "torch-ops", "cuda-api"]) as report:
        rows = report.sql("SELECT rowid, pid, tid, start_ns, end_ns, name_id FROM torch_op")
        got = report.sql(f"SELECT torch_op_id, pid, tid, start_ns, end_ns, name, depth, parent_id "
                         f"FROM {torch_ops_table(report)}")
        owners = dict(report.sql(f"SELECT op_id, torch_op_id FROM {op_kernels_table(report)}"))
        launches = report.sql(f"SELECT op_id, pid, coalesce(tid, {ANY_THREAD}), launch_ns FROM {ops_table(report)}")
        texts = dict(report.sql("SELECT id, value FROM string"))
    want = _reference_numbers(rows)
    by_row = {r[0]: r for r in rows}
    expected = sorted((*want[rowid][:1], pid, tid, start, end, texts[name_id], *want[rowid][1:])
                      for rowid, pid, tid, start, end, name_id in by_row.values() if name_id in texts)
    assert sorted(got) == expected
    assert len(got) == len(calls) and len(rows) == len(calls) + 1  # the call whose name is not stored: left out
    assert max(r[6] for r in got) >= 3
    for op_id, pid, ktid, launch in launches:
        around = [r for r in got if r[1] == pid and (ktid == ANY_THREAD or r[2] == ktid)
                  and r[3] <= launch <= (FOREVER if r[4] is None else r[4])]
        # the innermost: the last one started, of equal starts the shorter, then the higher id
        around.sort(key=lambda r: (r[3], -(FOREVER if r[4] is None else r[4]), r[0]))
        assert owners[op_id] == (around[-1][0] if around else None), (op_id, launch)
    assert sum(o is not None for o in owners.values()) > 100


def test_operators_without_gpu_work_own_no_launch(tmp_path: Path) -> None:
    b = ReportBuilder(tmp_path / "cpu.gpuscope")
    name = b.writer.intern("aten::add")
    for start, end in ((0, 100), (10, 50), (60, None)):
        b.writer.con.execute("INSERT INTO torch_op VALUES (?, ?, ?, 1, ?, NULL, '[]', '[]', '[]', '{}')",
                             [start, end, b.pid, name])
    with b.open(trace=["torch-ops"]) as report:
        got = report.sql(f"SELECT torch_op_id, start_ns, depth, parent_id FROM {torch_ops_table(report)} ORDER BY 1")
        owners = report.sql(f"SELECT * FROM {op_kernels_table(report)}")
    assert got == [(1, 0, 0, None), (2, 10, 1, 1), (3, 60, 0, None)]  # the last one never ends: no parent
    assert owners == []
