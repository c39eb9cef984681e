"""layer_sum on the hand-made PyTorch run of tests/report_builder.py (TORCH_OPS says where each
operation belongs and why), with exact numbers worked out by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
from report_builder import TORCH_OPS, ReportBuilder, torch_training

from gpuscope.analysis.ranges.layers import layer_sum

GPU_TOTAL = sum(end - start for _, _, _, start, end, _ in TORCH_OPS)  # 3730 ns
IN_STEPS = GPU_TOTAL - 10  # the tail kernel ran after the last step mark


def _rows(table) -> dict[str, dict]:
    return {r["Name"]: r for r in table.records()}


def test_layer_rows_with_api_calls(tmp_path: Path) -> None:
    with torch_training(tmp_path / "t.gpuscope") as report:
        table = layer_sum(report)
    rows = _rows(table)
    expected = {  # name: (kind, calls, GPU self, kernels, fwd self, fwd total, bwd self, bwd total,
                  #        fwd CPU, bwd CPU, top kernel)
        "Net.enc.fc": ("module", 1, 1300, 2, 500, 500, 800, 800, 1500, 2000, "gemm"),
        "Net.head": ("module", 2, 1200, 3, 600, 600, 600, 600, 2000, 1000, "gemm"),
        "DataLoader.__next__": ("dataloader", 1, 400, 0, None, None, None, None, None, None, None),
        "Net": ("module", 2, 260, 3, 200, 1100, 60, 1580, 9000, 7200, "embed"),
        "Net.enc": ("module", 1, 220, 2, 100, 600, 120, 920, 3000, 5000, "relu_bwd"),
        "SGD.step": ("optimizer", 1, 200, 1, None, None, None, None, None, None, "multi_tensor"),
        "backward": ("autograd", 1, 90, 2, None, None, None, None, None, None, "fill"),
        "(not in a module)": (None, None, 30, 2, None, None, None, None, None, None, "init"),
        "SGD.zero_grad": ("zero_grad", 1, 30, 1, None, None, None, None, None, None, "zero"),
    }
    keys = ["Kind", "Calls", "GPU Self", "Kernels", "Fwd GPU Self", "Fwd GPU Total", "Bwd GPU Self",
            "Bwd GPU Total", "Fwd CPU", "Bwd CPU", "Top Kernel"]
    assert {name: tuple(r[k] for k in keys) for name, r in rows.items()} == expected
    assert table.column("Name") == list(expected)  # by GPU self time, then name
    assert sum(table.column("GPU Self")) == GPU_TOTAL
    # share of the GPU time of the operations launched in steps: all but the tail kernel
    assert rows["Net.enc.fc"]["Share"] == pytest.approx(100 * 1300 / IN_STEPS)
    assert rows["(not in a module)"]["Share"] == pytest.approx(100 * 20 / IN_STEPS)
    assert sum(table.column("Share")) == pytest.approx(100.0)


def test_layer_rows_without_api_calls(tmp_path: Path) -> None:
    """Launch times without threads: the memcpy is placed at its GPU start (inside Net.enc's forward),
    and the tail kernel of thread 3 falls in the forward range that never ended."""
    with torch_training(tmp_path / "t.gpuscope", api=False) as report:
        table = layer_sum(report)
    rows = _rows(table)
    assert sum(table.column("GPU Self")) == GPU_TOTAL
    assert (rows["Net.enc"]["Fwd GPU Self"], rows["Net.enc"]["Fwd GPU Total"]) == (100 + 400, 600 + 400)
    assert rows["DataLoader.__next__"]["GPU Self"] == 0
    assert rows["Net.head"]["Fwd GPU Self"] == 600 + 10
    assert rows["(not in a module)"]["GPU Self"] == 20
    # the backward operations stay with their modules: their ranges start later than loss.backward()'s
    assert (rows["Net"]["Bwd GPU Self"], rows["backward"]["GPU Self"]) == (60, 90)
    assert any("No CUDA API calls" in n for n in table.notes)


def test_without_steps_the_share_is_of_all_gpu_time(tmp_path: Path) -> None:
    b = ReportBuilder(tmp_path / "r.gpuscope")
    b.range("M", 0, 100, 1, category="forward")
    b.kernel("a", 1000, 1300, tid=1, launch=50)
    b.kernel("b", 2000, 2100, tid=1, launch=200)
    with b.open() as report:
        rows = _rows(layer_sum(report))
    assert rows["M"]["Share"] == pytest.approx(75.0) and rows["(not in a module)"]["Share"] == pytest.approx(25.0)


def test_reports_without_torch_ranges_say_how_to_record_them(mlp_api) -> None:
    table = layer_sum(mlp_api)  # NVTX ranges only
    assert table.rows == []
    assert table.notes == [
        "No PyTorch ranges in this report: record module, optimizer and step ranges with --trace torch."
    ]
