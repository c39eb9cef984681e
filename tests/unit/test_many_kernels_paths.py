"""The paths that take a run of millions of kernels at once give what one kernel at a time gives:
the roof time of many kernels (the precision rule's estimate), and the kernel-name checks answered
once per name."""

from __future__ import annotations

import numpy as np
import pytest

from gpuscope.analysis.roofline.ceilings import Ceilings
from gpuscope.analysis.diagnosis import kernel_names
from gpuscope.analysis.diagnosis.steady_work import roof_ns, roofs_ns

H100ISH = Ceilings("test GPU", dram_bytes_per_s=3.0e12,
                   flops={"fp32": 60e12, "tensor_tf32": 400e12, "tensor_bf16": 900e12})


@pytest.mark.parametrize("ceilings", [H100ISH, Ceilings("no roofs"), Ceilings("no DRAM", flops=dict(H100ISH.flops))])
@pytest.mark.parametrize(("precision", "tensor"), [("fp32", False), ("tf32", True), ("bf16", True), ("fp8", True),
                                                   (None, False)])
def test_roofs_of_many_kernels_are_those_of_each(ceilings: Ceilings, precision: str | None, tensor: bool) -> None:
    rng = np.random.default_rng(7)
    n = 400
    flops = rng.uniform(0, 1e12, n)
    matrix = flops * rng.uniform(0, 1, n)
    nbytes = rng.uniform(0, 1e9, n)
    flops[::7] = np.nan  # no work model
    matrix[::5] = np.nan  # no matrix part known
    nbytes[::11] = np.nan
    flops[::13], nbytes[::13], matrix[::13] = 0.0, 0.0, 0.0  # no work at all: a zero roof time
    many = roofs_ns(ceilings, flops, matrix, nbytes, precision, tensor=tensor)
    one = [roof_ns(ceilings, f, m, b, precision, tensor=tensor) for f, m, b in zip(flops, matrix, nbytes)]
    assert [None if np.isnan(v) else float(v) for v in many] == one
    assert any(v is not None for v in one) == bool(ceilings.dram_bytes_per_s and ceilings.peak(precision, tensor))


def test_name_checks_answer_the_same_from_their_cache() -> None:
    names = ["ampere_sgemm_128x64_nn", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1",
             "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
             "fmha_cutlassF_f16_aligned_64x64_rf_sm80", "cudnn::bn_fw_tr_1C11_kernel_NCHW", "triton_red_fused_softmax_0"]
    checks = [kernel_names.is_matmul, kernel_names.uses_tensor_cores, kernel_names.float32_without_tensor_cores,
              kernel_names.is_attention, kernel_names.is_elementwise, kernel_names.is_normalization,
              kernel_names.attention_backend]
    first = [[check(n) for check in checks] for n in names]
    assert [[check(n) for check in checks] for n in names] == first  # answered from the cache
    assert [[check.__wrapped__(n) for check in checks] for n in names] == first  # as the check itself answers
    assert first[0][:3] == [True, False, True] and first[1][:2] == [True, True] and first[2][4]
    assert first[3][3] and first[3][6] == "efficient" and first[4][5] and not first[5][5]
