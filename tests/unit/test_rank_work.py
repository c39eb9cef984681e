"""Each rank's own work per step (host time before its first launch and in its DataLoader, compute
kernels, collectives held in its GPU's queue), and the rank findings made from it on hand-made
reports: a rank that arrives last at every collective only because its launches lag is no straggler."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuscope.analysis.diagnosis import diagnose
from gpuscope.analysis.diagnosis.context import Context
from gpuscope.analysis.diagnosis.rank_work import rank_work
from gpuscope.analysis.diagnosis.stragglers import rank_waits, work_excess
from gpuscope.trace.report import Report
from rank_reports import MS, NCCL_ALLREDUCE, PERIOD, add_rank, nccl_straggler
from report_builder import ReportBuilder


def test_the_work_of_each_rank_is_its_lead_its_loader_and_its_kernels(tmp_path: Path) -> None:
    with nccl_straggler(tmp_path / "r.gpuscope") as r:  # loads 0.5 ms and 3.9 ms, a 3 ms GEMM each
        ctx = Context(r)
        work = rank_work(ctx.timelines, ctx.names)
        waits = rank_waits(r)
    assert waits is not None
    per = work.groupby("pid").median()
    # the first launch comes 0.1 ms after the load, 50 µs before its GEMM starts (the step began at the
    # previous mark, 100 ns before the load)
    assert per.loc[100, "host_ns"] == 550_100 and per.loc[101, "host_ns"] == 3_950_100
    assert per.loc[101, "loader_ns"] == pytest.approx(3.9 * MS)
    assert (per["kernel_ns"] == 3 * MS).all()
    assert (per["queue_ns"] == 50_000).all()  # each all-reduce starts 50 µs after its launch
    excess = work_excess(waits.steps, work)
    assert excess.host[101] == pytest.approx(3.4 * MS) and excess.host[100] == 0
    assert excess.loader[101] == pytest.approx(3.4 * MS) and not excess.heavy


def _lagging(path: Path, lag_ns: int, calls: int = 4, steps: int = 6) -> Report:
    """Two ranks that load and compute alike and launch their first kernel of the step at the same
    moment; rank 0's host launches each GEMM ``lag_ns`` later than rank 1's, so it arrives last at
    each of the ``calls`` all-reduces of a step by that much."""
    b = ReportBuilder(path)
    pids = (100, 101)
    for rank, pid in enumerate(pids):
        add_rank(b, pid, rank, 2)
    for k in range(steps):
        t = k * PERIOD
        for pid in pids:
            b.range("DataLoader.__next__", t, t + MS // 2, 1, category="dataloader", pid=pid)
        free = t + int(0.6 * MS)
        for _ in range(calls):
            arrive = {}
            for pid in pids:  # a small kernel launched alike, then the GEMM (later on rank 0)
                b.kernel("vectorized_elementwise_kernel", free + 5_000, free + 15_000, tid=1, launch=free, pid=pid)
                launch = free + 20_000 + (lag_ns if pid == 100 else 0)
                b.kernel("ampere_sgemm_128x64_nn", launch + 5_000, launch + 5_000 + MS, tid=1, launch=launch, pid=pid)
                arrive[pid] = launch + 5_000 + MS
            end = max(arrive.values()) + 200_000
            for pid in pids:
                b.kernel(NCCL_ALLREDUCE, arrive[pid], end, tid=1, launch=arrive[pid] - 20_000, pid=pid)
            free = end + 10_000
        for pid in pids:
            b.range("step", t + PERIOD - 100, t + PERIOD - 100, 1, source="gpuscope", category="step", kind="mark",
                    pid=pid)
    return b.open(command=["train.py"], started_at=str(path))


def test_launch_lag_at_every_collective_is_no_straggler(tmp_path: Path) -> None:
    with _lagging(tmp_path / "r.gpuscope", lag_ns=300_000) as r:
        waits = rank_waits(r)
        d = diagnose(r)
    assert waits is not None and waits.last[100] == waits.shared  # rank 0 arrives last at every call
    assert waits.wait_ns[101] == pytest.approx(4 * 300_000)  # 1.2 ms per step of a 10 ms step
    assert not [f for f in d.findings if f.rule in ("straggler", "load_imbalance")]


def test_a_rank_that_starts_its_step_later_is_the_straggler_whatever_the_lag(tmp_path: Path) -> None:
    with nccl_straggler(tmp_path / "r.gpuscope", load_ms=(0.5, 2.0, 0.5, 0.5)) as r:
        d = diagnose(r)
    top = next(f for f in d.findings if f.rule == "straggler")
    assert top.data["straggler_rank"] == 1 and top.data["cause_part"] == "idle_data"
    # the others wait 1.5 ms for it in every step, its extra data loading is 1.5 ms
    assert top.saving_ns == pytest.approx(1.5 * MS)
