"""What kernel names say: matmul or not, tensor cores or CUDA cores (names from recorded runs)."""

from __future__ import annotations

import pytest

from gpuscope.analysis.diagnosis.kernel_names import (
    attention_backend,
    float32_without_tensor_cores,
    is_attention,
    is_attention_backward,
    is_elementwise,
    is_layout_conversion,
    is_matmul,
    is_nchw_convolution,
    is_nchw_norm,
    is_tf32_matmul,
)

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


# names from recorded H100 runs (program_infer_cnn_small, program_conv_train_bf16, program_python_tokenize,
# gpt_eager) and the kernels the library models' reports name
NCHW_CONVOLUTIONS = [
    "sm80_xmma_fprop_implicit_gemm_f32f32_f32f32_f32_nchwkcrs_nchw_tilesize32x32x8_stage3_warpsize1x2x1_g1_ffma_aligna4"
    "_alignc4_execute_kernel__5x_cudnn",
    "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x64x32_stage5_warpsize2x2x1_g1"
    "_tensor16x8x8_execute_kernel__5x_cudnn",
    "void implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, false, false, true>(int, int, int)",
]
NHWC_CONVOLUTIONS = [
    "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize64x128x32_warpgroupsize1x1x1_g1"
    "_execute_segment_k_off_kernel__5x_cudnn",
    "sm90_xmma_wgrad_indexed_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_warpgroupsize1x1x1_g1"
    "_execute_segment_k_on_kernel__5x_cudnn",
]


@pytest.mark.parametrize("name", NCHW_CONVOLUTIONS)
def test_nchw_convolutions(name: str) -> None:
    assert is_nchw_convolution(name) and not is_layout_conversion(name)


@pytest.mark.parametrize("name", NHWC_CONVOLUTIONS)
def test_nhwc_convolutions(name: str) -> None:
    assert not is_nchw_convolution(name)


def test_layout_conversions_and_nchw_batch_norm() -> None:
    for name in ("void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, true, "
                 "(cudnnKernelDataType_t)2>(cudnn::engines_precompiled::nchw2nhwc_params_t<float>)",
                 "void cudnn::engines_precompiled::nhwcToNchwKernel<float, float, float, true, false, "
                 "(cudnnKernelDataType_t)0>(cudnn::engines_precompiled::nhwc2nchw_params_t<float>)"):
        assert is_layout_conversion(name) and not is_nchw_convolution(name)
    assert is_nchw_norm("void cudnn::bn_fw_inf_1C11_kernel_NCHW<float, float, true, 1>(float, float, cudnnTensorStruct)")
    assert not is_nchw_norm("void at::native::batch_norm_collect_statistics_channels_last_kernel<at::native::Var, "
                            "c10::BFloat16, float, 4>")


@pytest.mark.parametrize("name, tf32", [
    (TENSOR_CORES[1], True),  # xmma tf32f32
    (TENSOR_CORES[3], True),  # CUTLASS s1688 tensor op on float32
    ("nvjet_sm90_sss_128x128_64x4_1x2_h_bz_coopA_NNT", True),
    (TENSOR_CORES[0], False),  # nvjet_sm90_tst: bf16
    (TENSOR_CORES[2], False),  # ampere_bf16_s16816gemm_bf16
    (CUDA_CORES[0], False),
])
def test_tf32_matmuls(name: str, tf32: bool) -> None:
    assert is_tf32_matmul(name) == tf32


@pytest.mark.parametrize("name, backend, backward", [
    (CUDA_CORES[3], "efficient", False),
    ("fmha_cutlassB_f32_aligned_64x64_k32_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<cutlass::arch::Sm80, "
     "float, true, false, false, 64, 64, 32, false>::Params)", "efficient", True),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t>>",
     "flash", False),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0", "cudnn",
     False),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64_1x4x1_cga1x1x1_kernel0_0", "cudnn",
     True),
    (TENSOR_CORES[0], None, False),
])
def test_attention_backends(name: str, backend: str | None, backward: bool) -> None:
    assert attention_backend(name) == backend
    assert is_attention_backward(name) == backward


@pytest.mark.parametrize(("name", "elementwise"), [
    ("void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>", True),
    ("cupy_multiply__float32_float32_float32", True),  # CuPy's ufunc kernels, from a recorded run
    ("cupy_multiply__float_float32_float32", True),  # a Python scalar operand
    ("cupy_negative__float32_float32", True),
    ("cupy_sum", False),  # a reduction's name carries no operand types
    ("triton_poi_fused_add_0", False),
])
def test_elementwise_kernels(name: str, elementwise: bool) -> None:
    assert is_elementwise(name) is elementwise
