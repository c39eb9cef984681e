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

_MATMUL = re.compile(r"gemm|conv|fprop|dgrad|wgrad|fmha|attention|nvjet|xmma|matmul", re.IGNORECASE)
_TENSOR_CORES = re.compile(
    r"tf32|tensorop|hmma|imma|wgmma|s1688|s16816|h1688|h16816|i8816|bf16|f16|fp16|half|e4m3|e5m2|nvjet|gmma",
    re.IGNORECASE,
)
_FLOAT32 = re.compile(r"sgemm|simt|ffma|f32f32_f32f32|_f32_|fp32|float", re.IGNORECASE)
_HELPERS = re.compile(r"splitKreduce|reduce_kernel|elementwise|memcpy|memset", re.IGNORECASE)


def is_matmul(name: str) -> bool:
    """Return whether ``name`` is a matrix multiply, convolution or attention kernel."""
    return bool(_MATMUL.search(name)) and not _HELPERS.search(name)


def uses_tensor_cores(name: str) -> bool:
    """Return whether the name says the kernel runs on tensor cores."""
    return bool(_TENSOR_CORES.search(name))


def float32_without_tensor_cores(name: str) -> bool:
    """Return whether ``name`` is a float32 matmul/convolution/attention kernel on CUDA cores, one
    that TF32 or lower precision would move to tensor cores."""
    return is_matmul(name) and not uses_tensor_cores(name) and bool(_FLOAT32.search(name))


def is_attention(name: str) -> bool:
    """Return whether the name is a fused attention kernel (TF32 does not apply; bf16/fp16 do)."""
    return bool(re.search(r"fmha|attention|flash", name, re.IGNORECASE))


_ELEMENTWISE = re.compile(r"elementwise_kernel|elementwise_grid_stride|unrolled_elementwise|vectorized_elementwise",
                          re.IGNORECASE)


def is_elementwise(name: str) -> bool:
    """Return whether ``name`` is one of PyTorch's elementwise kernels (one pass over its tensors:
    arithmetic, activations, casts, copies)."""
    return bool(_ELEMENTWISE.search(name))
