"""Per-layer attribution on a small GPT recorded on the H200 (tests/device/workloads/transformer.py:
4 blocks, AdamW, 3 warm-up + 5 timed steps), against torch.profiler's attribution of the same
program, and the same model with each block under torch.compile."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from conftest import FIXTURES

from gpuscope.analysis.ranges.layers import kernels_per_range, layer_sum
from gpuscope.analysis.steps.table import step_sum
from gpuscope.trace.report import Report

_spec = importlib.util.spec_from_file_location("device_check", Path(__file__).parents[1] / "device" / "check.py")
check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check)  # type: ignore[union-attr]

BLOCKS = [f"GPT.blocks.{i}" for i in range(4)]


def test_kernels_per_module_match_torch_profiler(recorded) -> None:
    result = check.layers(str(recorded("gpt_eager")), str(FIXTURES / "gpt_eager.torch_trace.json.gz"))
    assert result["ok"], result["mismatched"]
    assert result["modules_matched"] == 46  # every module call of a step
    assert result["gpuscope_kernels_per_step_in_modules"] == result["torch_kernels_per_step_in_modules"] == 181
    assert abs(result["layers_over_step_busy"] - 1) < 0.05
    assert result["modules_over_step_busy"] > 0.8


def test_every_block_has_forward_and_backward_time(recorded) -> None:
    with Report.open(recorded("gpt_eager")) as r:
        counts = kernels_per_range(r)
        rows = {row[0]: row for row in layer_sum(r).rows}
    for block in BLOCKS:
        assert rows[block][2] == 8  # calls: one per step
        fwd_total, bwd_total = rows[block][7], rows[block][9]
        assert fwd_total > 0 and bwd_total > fwd_total  # backward does about twice the work
        # the linear layers inside: one GEMM forward, two backward (input and weight gradients), per step
        for lin in ("attn.qkv", "mlp.up"):
            assert counts[(f"{block}.{lin}", "forward")] == 8
    # parameterless GELU has no backward range: its backward kernels count to its MLP
    assert ("GPT.blocks.0.mlp.act", "backward") not in counts


def test_blocks_under_torch_compile(recorded) -> None:
    with Report.open(recorded("gpt_compiled")) as r:
        rows = {row[0]: row for row in layer_sum(r).rows}
        steps = step_sum(r)
        names = set(r.ranges()["name"])
    for block in BLOCKS:
        assert rows[block][6] > 0 and rows[block][8] > 0  # forward and backward GPU time of the block
        assert f"{block}.attn" not in names  # inside the compiled block: one range, no submodules
    warm = [row for row in steps.rows if row[1].isdigit() and row[7] == "yes"]
    assert [row[1] for row in warm] == ["1"]  # compilation happens in the first step
