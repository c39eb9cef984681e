"""launch_sum: GPU work by the source line whose stack sample follows each launch."""

from __future__ import annotations

from pathlib import Path

from gpuscope.analysis.ops.launch_sites import launch_sum
from tests.report_builder import ReportBuilder, add_stack


def _sample(b: ReportBuilder, ts: int, tid: int, stack: int) -> None:
    b.writer.con.execute("INSERT INTO cpu_sample VALUES (?, ?, ?, ?, 1000000)", [ts, b.pid, tid, stack])


def test_operations_go_to_the_line_sampled_after_their_launch(tmp_path: Path) -> None:
    b = ReportBuilder(tmp_path / "l.gpuscope")
    fwd = add_stack(b, [("train.py", 50, "<module>"), ("model.py", 10, "forward")])
    opt = add_stack(b, [("train.py", 52, "<module>"), ("/x/site-packages/torch/optim/sgd.py", 90, "step")])
    # no API records: kernels are placed by their queued time, on the process's main thread (tid = pid)
    b.kernel("gemm", 10_000, 30_000, queued=1_000)
    b.kernel("relu", 30_000, 31_000, queued=2_000)
    _sample(b, 1_500, b.pid, fwd)  # after the first launch only: the first goes here
    _sample(b, 2_500, b.pid, fwd)
    b.kernel("sgd", 40_000, 45_000, queued=5_000)
    _sample(b, 5_200, b.pid, opt)
    _sample(b, 5_300, 999, fwd)  # another thread's sample says nothing about this process's launches
    b.kernel("late", 60_000, 61_000, queued=9_000)  # next sample of the thread: 20 ms later
    _sample(b, 20_009_000, b.pid, fwd)
    with b.open() as r:
        t = launch_sum(r)
    rows = {rec["Location"]: rec for rec in t.records()}
    assert rows["model.py:10"]["Operations"] == 2 and rows["model.py:10"]["Total GPU Time"] == 21_000
    # a library frame is not a program line: the optimizer's kernels go to the script's line
    assert rows["train.py:52"]["Operations"] == 1 and rows["train.py:52"]["Total GPU Time"] == 5_000
    assert len(rows) == 2 and "3 of 4 GPU operations" in t.notes[0]


def test_without_samples_it_says_so(tmp_path: Path) -> None:
    with ReportBuilder(tmp_path / "e.gpuscope").open() as r:
        t = launch_sum(r)
    assert t.rows == [] and "stack samples" in t.notes[0]
