"""What a kernel's name says about it: a matrix multiply or convolution, and whether it runs on
tensor cores.

The names come from cuBLAS, cuBLASLt, CUTLASS, cuDNN and PyTorch's own kernels; their conventions:
``sgemm``, ``simt`` and ``ffma`` (fused float multiply-add on the CUDA cores) mean float32 on CUDA
cores; ``f32f32_f32f32_f32`` is a float32 xmma kernel whose multiply is float32 too (with TF32 it
reads ``tf32f32``); ``tensorop``, ``hmma``/``imma``, ``wgmma``, the ``s1688``/``s16816`` shapes, ``tf32``,
``bf16``/``f16`` and cuBLAS's ``nvjet`` kernels run on tensor cores.
"""

from __future__ import annotations

import re
from functools import lru_cache

# Each predicate is asked once per kernel, and a run of ten million kernels has a few hundred names
# (some of them kilobytes of template arguments): answers are kept per name. The bound keeps a run
# of many distinct names (generated kernels) from growing the cache without end.
_NAMES = 65536

_MATMUL = re.compile(r"gemm|conv|fprop|dgrad|wgrad|fmha|attention|nvjet|xmma|matmul", re.IGNORECASE)
_TENSOR_CORES = re.compile(
    r"tf32|tensorop|hmma|imma|wgmma|s1688|s16816|h1688|h16816|i8816|bf16|f16|fp16|half|e4m3|e5m2|nvjet|gmma",
    re.IGNORECASE,
)
_FLOAT32 = re.compile(r"sgemm|simt|ffma|f32f32_f32f32|_f32_|fp32|float", re.IGNORECASE)
_HELPERS = re.compile(r"splitKreduce|reduce_kernel|elementwise|memcpy|memset", re.IGNORECASE)


@lru_cache(maxsize=_NAMES)
def is_matmul(name: str) -> bool:
    """Return whether ``name`` is a matrix multiply, convolution or attention kernel."""
    return bool(_MATMUL.search(name)) and not _HELPERS.search(name)


@lru_cache(maxsize=_NAMES)
def uses_tensor_cores(name: str) -> bool:
    """Return whether the name says the kernel runs on tensor cores."""
    return bool(_TENSOR_CORES.search(name))


@lru_cache(maxsize=_NAMES)
def float32_without_tensor_cores(name: str) -> bool:
    """Return whether ``name`` is a float32 matmul/convolution/attention kernel on CUDA cores, one
    that TF32 or lower precision would move to tensor cores."""
    return is_matmul(name) and not uses_tensor_cores(name) and bool(_FLOAT32.search(name))


@lru_cache(maxsize=_NAMES)
def is_attention(name: str) -> bool:
    """Return whether the name is a fused attention kernel (TF32 does not apply; bf16/fp16 do)."""
    return bool(re.search(r"fmha|attention|flash", name, re.IGNORECASE))


_ELEMENTWISE = re.compile(r"elementwise_kernel|elementwise_grid_stride|unrolled_elementwise|vectorized_elementwise",
                          re.IGNORECASE)
# CuPy's ufunc kernels: ``cupy_<ufunc>__<operand types>`` (``cupy_multiply__float32_float32_float32``;
# ``float``, ``int``, ``bool`` for Python scalars), one pass over their arrays each
_CUPY_UFUNC = re.compile(r"^cupy_[a-z0-9_]+?__(?:(?:float|int|uint|bool|complex)\d*_?)+$")


@lru_cache(maxsize=_NAMES)
def is_elementwise(name: str) -> bool:
    """Return whether ``name`` is one of PyTorch's elementwise kernels (one pass over its tensors:
    arithmetic, activations, casts, copies), or one of CuPy's ufunc kernels."""
    return bool(_ELEMENTWISE.search(name) or _CUPY_UFUNC.match(name))


# -- memory layout ---------------------------------------------------------------------------------
# cuDNN's transposes between PyTorch's default NCHW layout and the NHWC layout its fastest kernels take
_LAYOUT_CONVERSION = re.compile(r"nchwToNhwc|nhwcToNchw|nchw2nhwc|nhwc2nchw", re.IGNORECASE)
_CONVOLUTION = re.compile(r"conv|fprop|dgrad|wgrad|implicit_gemm|winograd", re.IGNORECASE)
# cuDNN and CUTLASS convolution kernels name their tensor layouts (``nchwkcrs_nchw``: NCHW input,
# KCRS filter, NCHW output); ``implicit_convolve_sgemm`` and friends are cuDNN's NCHW-only kernels
_NCHW_CONVOLUTION = re.compile(r"nchw|implicit_convolve_sgemm|explicit_convolve_sgemm", re.IGNORECASE)
# batch norm on NCHW tensors: cuDNN's ``bn_fw_tr_1C11_kernel_NCHW``, ``bn_bw_1C11_kernel_NCHW`` ...
_NCHW_NORM = re.compile(r"(bn_|batch_?norm).*NCHW|NCHW.*(bn_|batch_?norm)", re.IGNORECASE)


@lru_cache(maxsize=_NAMES)
def is_layout_conversion(name: str) -> bool:
    """Return whether ``name`` is one of cuDNN's NCHW <-> NHWC conversion kernels
    (``nchwToNhwcKernel``, ``nhwcToNchwKernel``)."""
    return bool(_LAYOUT_CONVERSION.search(name))


@lru_cache(maxsize=_NAMES)
def is_nchw_convolution(name: str) -> bool:
    """Return whether ``name`` is a convolution kernel whose name says it reads or writes NCHW
    tensors (``..._nchwkcrs_nchw_...``, ``..._nhwckrsc_nchw_...``, ``implicit_convolve_sgemm``)."""
    return (bool(_CONVOLUTION.search(name)) or "convolve" in name.lower()) and bool(_NCHW_CONVOLUTION.search(name)) \
        and not is_layout_conversion(name)


@lru_cache(maxsize=_NAMES)
def is_nchw_norm(name: str) -> bool:
    """Return whether ``name`` is a batch-norm kernel on NCHW tensors (``..._NCHW``)."""
    return bool(_NCHW_NORM.search(name))


# -- precision -------------------------------------------------------------------------------------
# TF32 on tensor cores: xmma's ``tf32f32`` / ``xf32``, CUTLASS's single-precision tensor-op shapes
# (``s1688gemm``, ``s16816gemm``) and cuBLAS's nvjet kernels on float32 operands (``nvjet_sm90_sss``,
# ``nvjet_sm90_tss``), unless the name also says a 16-bit input
_TF32 = re.compile(r"tf32|xf32|s1688|s16816|nvjet_sm\d+_[st]ss_", re.IGNORECASE)
_HALF = re.compile(r"bf16|f16|fp16|half|h1688|h16816|e4m3|e5m2", re.IGNORECASE)


@lru_cache(maxsize=_NAMES)
def is_tf32_matmul(name: str) -> bool:
    """Return whether ``name`` is a float32 matmul or convolution kernel running TF32 on tensor cores."""
    return is_matmul(name) and bool(_TF32.search(name)) and not _HALF.search(name)


# -- attention -------------------------------------------------------------------------------------
_ATTENTION_BACKENDS = (
    ("efficient", re.compile(r"fmha_cutlass|MemEffAttention|mem_eff", re.IGNORECASE)),
    ("cudnn", re.compile(r"cudnn_generated_fort_native_sdpa|fort_native_sdpa", re.IGNORECASE)),
    ("flash", re.compile(r"flash_fwd|flash_bwd|pytorch_flash|flash_attn", re.IGNORECASE)),
)


@lru_cache(maxsize=_NAMES)
def attention_backend(name: str) -> str | None:
    """Return which fused attention backend a kernel belongs to: ``efficient`` (PyTorch's
    memory-efficient CUTLASS kernels, ``fmha_cutlassF``/``fmha_cutlassB``), ``flash``
    (``pytorch_flash::flash_fwd_kernel``, ``flash_bwd``), ``cudnn``
    (``cudnn_generated_fort_native_sdpa_*``); None for other kernels."""
    for backend, pattern in _ATTENTION_BACKENDS:
        if pattern.search(name):
            return backend
    return None


@lru_cache(maxsize=_NAMES)
def is_attention_backward(name: str) -> bool:
    """Return whether a fused attention kernel is a backward one (``fmha_cutlassB``, ``flash_bwd``,
    ``..._bprop_...``)."""
    return bool(re.search(r"fmha_cutlassB|flash_bwd|bprop|backward", name, re.IGNORECASE))


# -- normalization ---------------------------------------------------------------------------------
_NORMALIZATION = re.compile(r"layer_norm|batch_norm|group_norm|rms_norm|bn_fw|bn_bw|softmax", re.IGNORECASE)


@lru_cache(maxsize=_NAMES)
def is_normalization(name: str) -> bool:
    """Return whether ``name`` is a normalization or softmax kernel of PyTorch or cuDNN (a
    reduction and an elementwise pass over its tensor, which torch.compile fuses with its
    elementwise neighbours)."""
    return bool(_NORMALIZATION.search(name)) and not name.startswith("triton")
