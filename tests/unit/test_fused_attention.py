"""The fused-attention rule: attention written as product, scale, softmax and product kernels is
found, its saving is the passes over the score matrix (the products kept when their FLOPs are not
known), and attention that is already fused, or a softmax that is not between two products, is not
a finding."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from diagnosis_sim import Sim

from gpuscope.analysis.diagnosis import diagnose
from gpuscope.analysis.diagnosis.rules.attention import MAX_BETWEEN
from gpuscope.trace.report import Report

US = 1_000
GEMM = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
COPY = "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda>"
SCALE = "void at::native::vectorized_elementwise_kernel<8, at::native::BUnaryFunctor<c10::BFloat16, MulFunctor>>"
SOFTMAX = "void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 10, false, false>"
FLASH = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t>>"


def _diagnose(path: Path, body: Callable[[Sim], None], steps: int = 8) -> list:  # type: ignore[type-arg]
    sim = Sim(path)
    sim.kernel("init", 10 * US)
    sim.cpu(100_000_000)
    for _ in range(steps + 1):
        body(sim)
        sim.step()
    with sim.open() as report:
        return diagnose(report).findings


def _naive(sim: Sim) -> None:
    """One attention block: q/k copies, scores, scale, softmax, v copy, product, output projection."""
    sim.kernel(COPY, 30 * US, launch_cost=3 * US)
    sim.kernel(GEMM, 100 * US, launch_cost=3 * US)
    sim.kernel(SCALE, 80 * US, launch_cost=3 * US)
    sim.kernel(SOFTMAX, 120 * US, launch_cost=3 * US)
    sim.kernel(COPY, 20 * US, launch_cost=3 * US)
    sim.kernel(GEMM, 100 * US, launch_cost=3 * US)
    sim.kernel(GEMM, 50 * US, launch_cost=3 * US)


def test_hand_written_attention_is_the_top_finding_with_the_passes_over_the_scores(tmp_path: Path) -> None:
    (top, *_) = _diagnose(tmp_path / "r.gpuscope", _naive)
    assert top.rule == "fused_attention"
    # the chain (copy, product, scale, softmax, copy, product) is 450 µs; the fused kernel is given the
    # two products' 200 µs (no FLOPs in this report): 250 µs of a step of about 500 µs
    assert abs(top.saving_ns - 250 * US) < 5 * US, top.saving_ns
    assert 0.45 < top.share < 0.52
    assert "scaled_dot_product_attention" in top.fix
    assert any("FLOPs are not in this report" in e for e in top.evidence)


def test_fused_attention_and_a_classifier_softmax_are_not_findings(tmp_path: Path) -> None:
    def fused(sim: Sim) -> None:
        sim.kernel(GEMM, 100 * US, launch_cost=3 * US)
        sim.kernel(FLASH, 150 * US, launch_cost=3 * US)
        sim.kernel(GEMM, 50 * US, launch_cost=3 * US)

    def head(sim: Sim) -> None:  # logits then softmax, nothing multiplies the probabilities
        sim.kernel(GEMM, 300 * US, launch_cost=3 * US)
        sim.kernel(SOFTMAX, 120 * US, launch_cost=3 * US)
        sim.kernel("void at::native::reduce_kernel<512, 1>", 20 * US, launch_cost=3 * US)

    for name, body in (("fused", fused), ("head", head)):
        findings = _diagnose(tmp_path / f"{name}.gpuscope", body)
        assert not [f for f in findings if f.rule == "fused_attention"], name


def test_too_much_between_the_softmax_and_a_product_is_not_a_chain(tmp_path: Path) -> None:
    def spread(sim: Sim) -> None:
        sim.kernel(GEMM, 100 * US, launch_cost=3 * US)
        for _ in range(MAX_BETWEEN + 1):
            sim.kernel(SCALE, 40 * US, launch_cost=3 * US)
        sim.kernel(SOFTMAX, 120 * US, launch_cost=3 * US)
        sim.kernel(GEMM, 100 * US, launch_cost=3 * US)

    assert not [f for f in _diagnose(tmp_path / "r.gpuscope", spread) if f.rule == "fused_attention"]


def test_recorded_hand_written_attention(recorded: Callable[[str], Path]) -> None:
    """The H100 recording of tests/workloads/naive_attention_bf16.py (no operator shapes): SDPA
    measured -77%; the finding is first, at the program's line."""
    with Report.open(recorded("program_naive_attention_bf16")) as report:
        top = diagnose(report).findings[0]
    assert top.rule == "fused_attention"
    assert 0.5 < top.share < 0.8
    assert "tests/workloads/naive_attention_bf16.py:" in top.location
