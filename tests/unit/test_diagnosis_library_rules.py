"""The rules for what library models need, each on a simulated run with its problem planted and the
operator samples a default recording holds: channels_last (NCHW convolutions and their layout
conversions), precision (float32/TF32 matmuls under bf16 autocast), sdpa_backend (an explicit
causal-shaped mask that keeps attention off flash), the fusion rule's model by bytes, and the
launch-bound saving of a GPU that is busy nearly all the step. Expected savings are worked out
from the datasheet roofs of the simulated H100 and the rules' stated models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from diagnosis_sim import MAIN_TID, Sim
from report_builder import add_torch_op

from gpuscope.analysis.roofline.datasheet import datasheet
from gpuscope.analysis.diagnosis import Diagnosis, Finding, diagnose
from gpuscope.analysis.diagnosis.rules.attention import FUSED_EFFICIENCY
from gpuscope.analysis.diagnosis.rules.idle import BUSY_GPU_MAX_SHARE
from gpuscope.analysis.diagnosis.rules.kernels import TARGET_EFFICIENCY, TENSOR_CORE_SPEEDUP
from gpuscope.analysis.roofline.work.matrix import causal_pairs
from gpuscope.trace.report import Report

US = 1_000
MS = 1_000_000
H100 = datasheet("NVIDIA H100")
assert H100 is not None
TF32, BF16, FP32 = H100.flops["tensor_tf32"], H100.flops["tensor_bf16"], H100.flops["fp32"]
DRAM = H100.dram_bytes_per_s

ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>"
TF32_GEMM = "sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16_stage4_warpsize2x2x1_tensor16x8x8_execute_kernel"
SGEMM = "ampere_sgemm_128x64_nn"
NCHW_CONV = ("sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x64x32_stage5_warpsize2x2x1_g1"
             "_tensor16x8x8_execute_kernel__5x_cudnn")
NHWC_CONV = ("sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize64x128x32_warpgroupsize1x1x1_g1"
             "_execute_segment_k_off_kernel__5x_cudnn")
TO_NHWC = "void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>"
TO_NCHW = "void cudnn::engines_precompiled::nhwcToNchwKernel<float, float, float, true, false, (cudnnKernelDataType_t)0>"
BN_NCHW = "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1, true>"
MEM_EFFICIENT = ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, "
                 "cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)")


def _run(path: Path, body: Callable[[Sim], None], steps: int = 6) -> Diagnosis:
    """A long warm-up step, then ``steps`` steps of ``body``."""
    sim = Sim(path)
    sim.kernel("init", 10 * US)
    sim.cpu(100 * MS)
    for _ in range(steps + 1):
        body(sim)
        sim.step()
    with sim.open() as report:
        return diagnose(report)


def _only(diag: Diagnosis, rule: str) -> Finding:
    found = [f for f in diag.findings if f.rule == rule]
    assert len(found) == 1, [(f.rule, f.title) for f in diag.findings]
    return found[0]


def _none(diag: Diagnosis, rule: str) -> None:
    assert not [f for f in diag.findings if f.rule == rule], [(f.rule, f.title) for f in diag.findings]


def op_kernel(sim: Sim, op: str, kernel: str, duration: int, shapes: list[object], dtypes: list[object],
              out_shapes: list[object] | None = None, scalars: dict[str, object] | None = None) -> None:
    """Launch ``kernel`` from inside a recorded call of operator ``op`` (a ``torch_op`` row)."""
    start = sim.host
    sim.kernel(kernel, duration)
    add_torch_op(sim.b, op, start, sim.host - 1, MAIN_TID, shapes=json.dumps(shapes), dtypes=json.dumps(dtypes),
                 out_shapes=json.dumps(out_shapes or []), scalars=json.dumps(scalars or {}))


# -- precision ------------------------------------------------------------------------------------------
def test_tf32_kernels_by_name_take_the_ratio_of_the_roofs(tmp_path: Path) -> None:
    """Without operator shapes a TF32 kernel is taken to gain the smaller of what the roofs promise:
    the TF32 to BF16 peaks, or half the bytes."""
    def body(sim: Sim) -> None:
        for _ in range(5):
            sim.kernel(TF32_GEMM, 2 * MS)
        sim.kernel(ELEMENTWISE, 100 * US)

    diag = _run(tmp_path / "r.gpuscope", body)
    f = _only(diag, "precision")
    assert f is diag.findings[0]
    assert f.saving_ns == pytest.approx(10 * MS * (1 - max(TF32 / BF16, 0.5)), rel=0.01)
    assert "autocast" in f.fix and "changes numerics" in f.title
    assert f.data["tf32_ns"] == pytest.approx(10 * MS, rel=0.01) and f.data["float32_ns"] == 0
    _none(diag, "no_tensor_cores")  # TF32 already runs on tensor cores


def test_float32_on_cuda_cores_counts_beyond_tf32(tmp_path: Path) -> None:
    """no_tensor_cores takes float32 to TF32 (its 4x); precision counts only what bf16 adds, so the
    two never count the same time twice."""
    def body(sim: Sim) -> None:
        for _ in range(5):
            sim.kernel(SGEMM, 2 * MS)
        sim.kernel(ELEMENTWISE, 100 * US)

    diag = _run(tmp_path / "r.gpuscope", body)
    tensor, precision = _only(diag, "no_tensor_cores"), _only(diag, "precision")
    tf32_ns = 10 * MS / TENSOR_CORE_SPEEDUP
    assert tensor.saving_ns == pytest.approx(10 * MS - tf32_ns, rel=0.01)
    assert precision.saving_ns == pytest.approx(tf32_ns * (1 - max(TF32 / BF16, 0.5)), rel=0.01)
    assert diag.findings[0] is tensor
    assert any("beyond what TF32 saves" in e for e in precision.evidence)


def test_precision_from_the_operators_flops_and_bytes(tmp_path: Path) -> None:
    """A float32 mm of 4096^3 on TF32 kernels at 0.5 ms: its roofs in TF32 and in bf16 (half the
    bytes); the kernel keeps its share of the roof, at most TARGET_EFFICIENCY of it."""
    n, t = 4096, 500 * US
    flops, nbytes = 2.0 * n**3, 3.0 * n * n * 4

    def body(sim: Sim) -> None:
        for _ in range(4):
            op_kernel(sim, "aten::mm", TF32_GEMM, t, [[n, n], [n, n]], ["float32", "float32"], [[n, n]])

    diag = _run(tmp_path / "r.gpuscope", body)
    f = _only(diag, "precision")
    now = max(flops / TF32, nbytes / DRAM) * 1e9
    new = max(flops / BF16, nbytes / 2 / DRAM) * 1e9
    t_new = max(t * new / now, new / TARGET_EFFICIENCY)
    launches = f.data["critical_ns"] / t  # per step, those the step waits on (not the run's very last)
    assert launches == pytest.approx(4, abs=0.2)
    assert f.saving_ns == pytest.approx(launches * (t - t_new), rel=0.01)
    assert f.data["modelled_launches"] > 0


def test_precision_is_not_proposed_for_a_small_part_of_the_step(tmp_path: Path) -> None:
    def body(sim: Sim) -> None:
        sim.kernel(TF32_GEMM, 1 * MS)
        for _ in range(8):
            sim.kernel(ELEMENTWISE, 1 * MS)

    _none(_run(tmp_path / "r.gpuscope", body), "precision")


def test_bf16_matmuls_are_not_a_precision_finding(tmp_path: Path) -> None:
    """A kernel whose operator ran bf16 is not float32, whatever its name says."""
    def body(sim: Sim) -> None:
        for _ in range(4):
            op_kernel(sim, "aten::mm", "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", 1 * MS, [[4096, 4096], [4096, 4096]],
                      ["bfloat16", "bfloat16"], [[4096, 4096]])

    _none(_run(tmp_path / "r.gpuscope", body), "precision")


# -- channels_last ----------------------------------------------------------------------------------------
def _nchw_block(sim: Sim) -> None:
    sim.kernel(TO_NHWC, 200 * US)
    sim.kernel(NHWC_CONV, 1 * MS)
    sim.kernel(TO_NCHW, 150 * US)
    sim.kernel(BN_NCHW, 300 * US)
    sim.kernel(ELEMENTWISE, 100 * US)


def test_channels_last_by_names_saves_the_conversions(tmp_path: Path) -> None:
    diag = _run(tmp_path / "r.gpuscope", _nchw_block)
    f = _only(diag, "channels_last")
    assert f.saving_ns == pytest.approx(350 * US, rel=0.02)  # the conversions; the rest has no FLOPs here
    assert f.data["conversion_ns"] == pytest.approx(350 * US, rel=0.02)
    assert f.data["nchw_norm_ns"] == pytest.approx(300 * US, rel=0.02)
    assert "channels_last" in f.fix and "memory_format" in f.fix
    assert any("count as no faster" in e for e in f.evidence)


def test_channels_last_models_nchw_convolutions_from_their_roofline(tmp_path: Path) -> None:
    """A 3x3 convolution of 256 channels at 56x56, batch 64, on an NCHW kernel at 1.6 ms: as an NHWC
    kernel it reaches TARGET_EFFICIENCY of its TF32 roof."""
    x, w, t = [64, 256, 56, 56], [256, 256, 3, 3], 1600 * US
    flops = 2.0 * 64 * 56 * 56 * 256 * 256 * 9
    nbytes = 4.0 * (2 * 64 * 256 * 56 * 56 + 256 * 256 * 9)

    def body(sim: Sim) -> None:
        op_kernel(sim, "aten::cudnn_convolution", NCHW_CONV, t, [x, w], ["float32", "float32"], [x],
                  {"stride": [1, 1], "padding": [1, 1], "dilation": [1, 1], "groups": 1})
        sim.kernel(ELEMENTWISE, 100 * US)

    diag = _run(tmp_path / "r.gpuscope", body)
    f = _only(diag, "channels_last")
    roof = max(flops / TF32, nbytes / DRAM) * 1e9
    assert f.saving_ns == pytest.approx(t - roof / TARGET_EFFICIENCY, rel=0.01)
    assert any("aten::cudnn_convolution [64, 256, 56, 56]" in e for e in f.evidence)


def test_channels_last_kernels_are_not_a_finding(tmp_path: Path) -> None:
    def body(sim: Sim) -> None:
        sim.kernel(NHWC_CONV, 1 * MS)
        sim.kernel("void at::native::batch_norm_transform_input_channels_last_kernel<float, float, float, 4>", 300 * US)

    _none(_run(tmp_path / "r.gpuscope", body), "channels_last")


def test_recorded_nchw_cnn_is_launch_bound_first(recorded: Callable[[str], Path]) -> None:
    """The H100 recording of a small NCHW CNN in float32 (tests/workloads/infer_cnn_small.py): its
    NCHW convolutions and conversions are found, but the GPU idles most of the step, so the
    conversions it waits on are few and a CUDA graph (measured +85%) stays first."""
    from gpuscope.analysis.diagnosis.context import Context
    from gpuscope.analysis.diagnosis.rules.layout import ChannelsLast

    with Report.open(recorded("program_infer_cnn_small")) as report:
        ctx = Context(report, min_share=0.0)
        (found,) = ChannelsLast().evaluate(ctx)
        diag = diagnose(report)
    assert found.data["conversion_ns"] > 0 and found.data["nchw_conv_ns"] > 0 and found.data["nchw_norm_ns"] > 0
    assert found.saving_ns < found.data["conversion_ns"]  # only the conversions the step waited on
    assert diag.findings[0].rule == "launch_bound"


# -- sdpa_backend ------------------------------------------------------------------------------------------
Q = [8, 16, 2048, 64]


def _attention(mask: list[int] | None, dtype: str = "bfloat16", kernel: str = MEM_EFFICIENT,
               op: str = "aten::_scaled_dot_product_efficient_attention", causal: bool = False) -> Callable[[Sim], None]:
    def body(sim: Sim) -> None:
        sim.kernel(ELEMENTWISE, 200 * US)
        shapes: list[object] = [Q, Q, Q, mask]
        op_kernel(sim, op, kernel, 3 * MS, shapes, [dtype, dtype, dtype, dtype if mask else None],
                  [Q, [8, 16, 2048]], {"is_causal": causal, "dropout_p": 0.0, "compute_log_sumexp": False})
        sim.kernel(ELEMENTWISE, 200 * US)
    return body


def test_causal_shaped_mask_on_the_memory_efficient_kernel(tmp_path: Path) -> None:
    """bf16 attention with a [1, 1, L, L] additive mask: is_causal=True takes flash, which does about
    half the pairs at FUSED_EFFICIENCY of the BF16 roof."""
    diag = _run(tmp_path / "r.gpuscope", _attention([1, 1, 2048, 2048]))
    f = _only(diag, "sdpa_backend")
    b, h, n, e = Q
    pairs = b * h * causal_pairs(n, n)
    flash_ns = pairs * (2 * e + 2 * e) / (FUSED_EFFICIENCY * BF16) * 1e9
    assert f.saving_ns == pytest.approx(3 * MS - flash_ns, rel=0.01)
    assert f is diag.findings[0]
    assert "is_causal=True" in f.fix and "[1, 1, 2048, 2048]" in " ".join(f.evidence)


@pytest.mark.parametrize("case", ["padding_mask", "no_mask", "float32", "flash"])
def test_attention_that_is_not_a_causal_mask_on_the_efficient_kernel(tmp_path: Path, case: str) -> None:
    body = {
        "padding_mask": _attention([8, 1, 2048, 2048]),  # one mask per sequence: padding, not causal
        "no_mask": _attention(None),
        "float32": _attention([1, 1, 2048, 2048], dtype="float32"),  # no flash in float32 whatever the mask
        "flash": _attention(None, kernel="void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64>>",
                            op="aten::_scaled_dot_product_flash_attention", causal=True),
    }[case]
    _none(_run(tmp_path / f"{case}.gpuscope", body), "sdpa_backend")


# -- fusion by bytes --------------------------------------------------------------------------------------
N = 1 << 26  # elements of each float32 tensor


def _chain(slow: float = 1.0) -> Callable[[Sim], None]:
    """x * y + z, then sigmoid: three passes over 268 MB tensors, each at 2.7 TB/s (``slow`` times longer)."""
    def body(sim: Sim) -> None:
        v, f = [N], ["float32", "float32"]
        sim.kernel(TF32_GEMM, 300 * US)
        op_kernel(sim, "aten::mul", ELEMENTWISE, int(slow * 300 * US), [v, v], f, [v])
        op_kernel(sim, "aten::add", ELEMENTWISE, int(slow * 300 * US), [v, v], f, [v])
        op_kernel(sim, "aten::sigmoid", ELEMENTWISE, int(slow * 200 * US), [v], f[:1], [v])
        sim.kernel(TF32_GEMM, 300 * US)
    return body


@pytest.mark.parametrize("slow", [1.0, 2.0])
def test_fusion_by_bytes_reads_inputs_and_writes_outputs_once(tmp_path: Path, slow: float) -> None:
    """The fused kernel moves x, y, z and the result once, at the pace the chain's largest pass
    reached (2.7 TB/s, or half that when every pass took twice as long): fusing saves the passes it
    does not make, not the distance of the others from the DRAM roof."""
    diag = _run(tmp_path / "r.gpuscope", _chain(slow))
    f = _only(diag, "unfused_elementwise")
    t = 4.0 * N  # one tensor
    fused = (3 * t + 3 * t + 2 * t) - 2 * (t + t)  # x, y, z read and the result written once
    pace = min(DRAM, 3 * t / (slow * 300 * US) * 1e9)
    assert f.saving_ns == pytest.approx(slow * 800 * US - max(fused / pace * 1e9, slow * 200 * US), rel=0.01)
    assert f.saving_ns == pytest.approx(slow * 800 * US * (1 - fused / (8 * t)), rel=0.01)  # the same passes saved
    assert f.data["byte_chains_per_step"] == 1
    assert any("by their bytes" in e for e in f.evidence)


def test_fusion_by_bytes_takes_a_residual_add_and_its_norm(tmp_path: Path) -> None:
    """Two kernels (the name model wants three of 10 µs): an add then a layer norm."""
    rows, width = 8192, 768
    x = [rows, width]

    def body(sim: Sim) -> None:
        sim.kernel(TF32_GEMM, 100 * US)
        op_kernel(sim, "aten::add", ELEMENTWISE, 40 * US, [x, x], ["float32", "float32"], [x])
        op_kernel(sim, "aten::native_layer_norm", "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel"
                  "<float, float, false>", 40 * US, [x, None, [width], [width]], ["float32", None, "float32", "float32"],
                  [x, [rows, 1], [rows, 1]])
        sim.kernel(TF32_GEMM, 100 * US)

    f = _only(_run(tmp_path / "r.gpuscope", body), "unfused_elementwise")
    assert 0 < f.saving_ns < 80 * US
    assert f.data["kernels_per_step"] == 2


# -- launch-bound on a busy GPU ---------------------------------------------------------------------------
@pytest.mark.parametrize("big", [20, 15])
def test_launch_bound_is_capped_on_a_gpu_busy_nearly_all_the_step(tmp_path: Path, big: int) -> None:
    """40 short kernels launched one by one after a synchronization (a 10 µs gap after each), then
    ``big`` long ones: with 20 the GPU is busy over 90% of the step and the launch gaps (about 7%)
    claim at most BUSY_GPU_MAX_SHARE; with 15 (busy under 90%) they claim all of it."""
    def body(sim: Sim) -> None:
        for _ in range(40):
            sim.kernel(ELEMENTWISE, 5 * US, launch_cost=15 * US)
        for _ in range(big):
            sim.kernel(TF32_GEMM, 200 * US, launch_cost=5 * US)
        sim.sync(("/home/user/project/train.py", 42, "train_step"))

    diag = _run(tmp_path / "r.gpuscope", body)
    f = _only(diag, "launch_bound")
    parts = diag.processes[0].mean_parts()
    busy = sum(v for k, v in parts.items() if k.startswith("busy_")) / parts["duration_ns"]
    uncapped = (parts["idle_launch"] - (40 + big) * 1_000) / parts["duration_ns"]
    assert (busy > 0.9) == (big == 20) and uncapped > BUSY_GPU_MAX_SHARE
    if big == 20:
        assert f.share == pytest.approx(BUSY_GPU_MAX_SHARE, rel=0.01)
        assert any("capped" in e for e in f.evidence)
    else:
        assert f.share == pytest.approx(uncapped, rel=0.05)


def test_a_training_batch_norm_keeps_its_second_pass_in_a_fused_chain() -> None:
    from gpuscope.analysis.diagnosis.rules.fusion import _two_pass_bytes

    names = np.array(["void cudnn::bn_fw_tr_1C11_kernel_NCHW<float>", "void at::native::relu_kernel",
                      "void cudnn::bn_bw_1C11_kernel_new<float>", "void cudnn::bn_fw_tr_1C11_singleread<float>",
                      "void cudnn::bn_fw_inf_1C11_kernel_NCHW<float>"], object)
    b = np.array([100.0, 80.0, 60.0, 40.0, 20.0])
    w = np.array([50.0, 40.0, 20.0, 20.0, 10.0])
    # first in its chain: read once more (50); further in: written out and read once more (2 x 40);
    # single-read and inference norms make one pass
    assert _two_pass_bytes(names, b, w) == 50.0 + 2 * 40.0
    assert _two_pass_bytes(names[1:2], b[1:2], w[1:2]) == 0.0


def test_compiling_a_model_with_nchw_convolutions_counts_the_layout_it_takes(tmp_path: Path) -> None:
    """Inductor lays convolutions out channels_last when it compiles them (layout optimization, on by
    default): the compile fix's estimate is its chains' saving plus what channels_last saves outside
    them, each kernel counted once."""
    def both(sim: Sim) -> None:
        _nchw_block(sim)
        _chain()(sim)

    diag = _run(tmp_path / "both.gpuscope", both)
    fused = _only(diag, "unfused_elementwise")
    layout = _only(diag, "channels_last")
    alone = _only(_run(tmp_path / "chain.gpuscope", _chain()), "unfused_elementwise")
    assert fused.data["layout_ns"] > 0
    assert fused.saving_ns == pytest.approx(alone.saving_ns + fused.data["layout_ns"], rel=0.01)
    # the layout part is channels_last's estimate (its conversions lie outside the chain here)
    assert fused.data["layout_ns"] == pytest.approx(layout.saving_ns, rel=0.01)
    assert any("layout optimization" in e for e in fused.evidence)
    assert alone.data["layout_ns"] == 0 and not any("layout optimization" in e for e in alone.evidence)
