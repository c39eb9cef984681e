"""Samples inside PyTorch operators when operators were recorded in sample windows only (the default
without a GPU, ``torch-shapes``): inside a window the recorded operators say; outside, a sample whose
innermost frame is PyTorch's own Python counts as in an operator, one in the program's code does not."""

from __future__ import annotations

from pathlib import Path

from report_builder import ReportBuilder, add_stack, add_torch_op

from gpuscope.analysis.diagnosis.cpu_context import CpuContext

LINEAR = "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py"
USER = "/home/me/train.py"


def _report(path: Path, windows: bool) -> CpuContext:
    b = ReportBuilder(path)
    b.writer.con.execute("UPDATE process SET start_ns = 0, end_ns = 100_000_000 WHERE pid = 100")
    in_torch = add_stack(b, [(USER, 10, "<module>"), (LINEAR, 125, "forward")])
    in_user = add_stack(b, [(USER, 10, "<module>"), (USER, 20, "tokenize")])
    for i in range(1, 5):
        b.mark("step", i * 10_000_000, 100)
    add_torch_op(b, "aten::addmm", 11_000_000, 12_000_000, 100)  # inside the window
    if windows:
        b.writer.con.execute("INSERT INTO torch_op_window VALUES (100, 10000000, 20000000, 1, 'end of step 1 to "
                             "end of step 2')")
    samples = [(11_500_000, in_torch), (15_000_000, in_torch), (25_000_000, in_torch), (26_000_000, in_user)]
    for ts, stack in samples:
        b.writer.con.execute("INSERT INTO cpu_sample VALUES (?, 100, 100, ?, 500000)", [ts, stack])
    b.open().close()
    from gpuscope.trace.report import Report

    return CpuContext(Report.open(path))


def test_outside_the_windows_pytorch_frames_count_as_operators(tmp_path: Path) -> None:
    (p,) = _report(tmp_path / "w.gpuscope", windows=True).processes
    in_op = dict(zip(p.samples["ts_ns"], p.samples["in_op"]))
    # in the window: the recorded operator decides (the second sample is between operators)
    assert in_op[11_500_000] and not in_op[15_000_000]
    # outside it: PyTorch's Python innermost is an operator; the program's own code is not
    assert in_op[25_000_000] and not in_op[26_000_000]


def test_every_operator_recorded_decides_alone(tmp_path: Path) -> None:
    (p,) = _report(tmp_path / "all.gpuscope", windows=False).processes
    in_op = dict(zip(p.samples["ts_ns"], p.samples["in_op"]))
    assert in_op[11_500_000] and not in_op[15_000_000] and not in_op[25_000_000] and not in_op[26_000_000]
