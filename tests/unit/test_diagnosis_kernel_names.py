"""What kernel names say: matmul or not, tensor cores or CUDA cores (names from recorded runs)."""

from __future__ import annotations

import pytest

from gpuscope.analysis.diagnosis.kernel_names import float32_without_tensor_cores, is_attention, is_matmul

CUDA_CORES = [
    "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize256x128x8_stage3_warpsize4x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas",
    "void cutlass::Kernel2<cutlass_80_simt_sgemm_128x64_8x5_nt_align1>(cutlass_80_simt_sgemm_128x64_8x5_nt_align1::Params)",
    "ampere_sgemm_128x64_nn",
    "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, cutlass::arch::Sm80, true>)",
    "void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, false, true>(int, int, int)",
]
TENSOR_CORES = [
    "nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT",
    "sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16_stage4_warpsize2x2x1_tensor16x8x8_execute_kernel",
    "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_nn",
    "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4>(Params)",
    "fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t>)",
]
NOT_MATMUL = [
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >",
    "void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, false, float, float>",
    "triton_poi_fused_gelu_view_2",
]


@pytest.mark.parametrize("name", CUDA_CORES)
def test_float32_on_cuda_cores(name: str) -> None:
    assert is_matmul(name) and float32_without_tensor_cores(name)


@pytest.mark.parametrize("name", TENSOR_CORES)
def test_tensor_cores(name: str) -> None:
    assert is_matmul(name) and not float32_without_tensor_cores(name)


@pytest.mark.parametrize("name", NOT_MATMUL)
def test_not_a_matmul(name: str) -> None:
    assert not is_matmul(name) and not float32_without_tensor_cores(name)


def test_attention() -> None:
    assert is_attention(CUDA_CORES[3]) and not is_attention(CUDA_CORES[0])
