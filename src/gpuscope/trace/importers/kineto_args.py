"""PyTorch profiler operator arguments (``Input Dims``, ``Input type``, ``Concrete Inputs``) in the
form of gpuscope's ``torch_op`` columns, so that the work model reads imported operators as it
reads recorded ones.

The profiler names an argument's type by its C++ dtype (``float``, ``c10::BFloat16``, ``long int``)
for a tensor, ``TensorList`` for a list of tensors, and ``Scalar``, ``ScalarList``, ``GenericList``
or ``""`` for other arguments; it gives no argument names, so the non-tensor arguments the work
model reads (strides and groups of a convolution, the causal flag of attention) are named here by
the operator's ATen schema.
"""

from __future__ import annotations

import json
import re
from typing import Any

# C++ dtype names as the profiler writes them -> torch dtype names (as gpuscope's recorder stores).
DTYPES = {
    "float": "float32", "double": "float64", "c10::Half": "float16", "c10::BFloat16": "bfloat16",
    "long int": "int64", "long": "int64", "int": "int32", "short int": "int16", "short": "int16",
    "signed char": "int8", "unsigned char": "uint8", "bool": "bool",
    "c10::complex<float>": "complex64", "c10::complex<double>": "complex128",
    "c10::complex<c10::Half>": "complex32",
    "c10::Float8_e4m3fn": "float8_e4m3fn", "c10::Float8_e5m2": "float8_e5m2",
    "c10::Float8_e4m3fnuz": "float8_e4m3fnuz", "c10::Float8_e5m2fnuz": "float8_e5m2fnuz",
    "c10::Float8_e8m0fnu": "float8_e8m0fnu",
}  # fmt: skip

# The argument names of the operators whose non-tensor arguments the work model reads (ATen schemas).
SCHEMAS: dict[str, tuple[str, ...]] = {
    "aten::convolution": ("input", "weight", "bias", "stride", "padding", "dilation", "transposed",
                          "output_padding", "groups"),
    "aten::_convolution": ("input", "weight", "bias", "stride", "padding", "dilation", "transposed",
                           "output_padding", "groups", "benchmark", "deterministic", "cudnn_enabled",
                           "allow_tf32"),
    "aten::cudnn_convolution": ("self", "weight", "padding", "stride", "dilation", "groups", "benchmark",
                                "deterministic", "allow_tf32"),
    "aten::convolution_backward": ("grad_output", "input", "weight", "bias_sizes", "stride", "padding",
                                   "dilation", "transposed", "output_padding", "groups", "output_mask"),
    "aten::_scaled_dot_product_flash_attention": ("query", "key", "value", "dropout_p", "is_causal",
                                                  "return_debug_mask", "scale"),
    "aten::_scaled_dot_product_efficient_attention": ("query", "key", "value", "attn_bias",
                                                      "compute_log_sumexp", "dropout_p", "is_causal", "scale"),
    "aten::_scaled_dot_product_cudnn_attention": ("query", "key", "value", "attn_bias", "compute_log_sumexp",
                                                  "dropout_p", "is_causal", "return_debug_mask", "scale"),
}  # fmt: skip


def _concrete(text: Any) -> Any:
    """A concrete input as the profiler writes it (``"1"``, ``"[1, 1]"``, ``"False"``) as a value."""
    if not isinstance(text, str) or text == "":
        return None
    lowered = {"True": "true", "False": "false", "None": "null"}.get(text, text)
    try:
        return json.loads(lowered)
    except ValueError:
        return text


def op_columns(name: str, args: dict[str, Any]) -> tuple[str | None, str | None, str | None, str | None]:
    """Return ``shapes``, ``dtypes``, ``out_shapes`` and ``scalars`` (JSON text, None where the event
    has no input shapes) of one ``cpu_op`` event's ``args``."""
    dims = args.get("Input Dims", args.get("Input dims"))
    if dims is None:
        return None, None, None, None
    types = args.get("Input type", args.get("Input types")) or []
    shapes: list[Any] = []
    dtypes: list[Any] = []
    for i, dim in enumerate(dims):
        ty = types[i] if i < len(types) else ""
        dtype = DTYPES.get(ty)
        if dtype is not None and isinstance(dim, list):
            shapes.append(dim)
            dtypes.append(dtype)
        elif ty == "TensorList" and isinstance(dim, list):
            shapes.append([d for d in dim if isinstance(d, list)])
            dtypes.append([None] * len(shapes[-1]))
        else:
            shapes.append(None)
            dtypes.append(None)
    scalars: dict[str, Any] = {}
    schema = SCHEMAS.get(name)
    concrete = args.get("Concrete Inputs")
    if schema and isinstance(concrete, list):
        for arg, text in zip(schema, concrete):
            value = _concrete(text)
            if value is not None:
                scalars[arg] = value
    return json.dumps(shapes), json.dumps(dtypes), "[]", json.dumps(scalars)


# What the names of copies and sets say, and the CUDA calls that wait for the device.
_MEMCPY = re.compile(r"Memcpy (\w+) \((\w+) -> (\w+)\)")
_MEMSET = re.compile(r"Memset \((\w+)\)")
SYNC_APIS = frozenset({
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaThreadSynchronize", "cudaEventSynchronize",
    "cudaMemcpy", "cudaMemcpy2D", "cudaMemcpy3D", "cudaMemcpyPeer", "cudaMemcpyFromSymbol",
    "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize", "cuMemcpy", "cuMemcpyDtoH",
    "cuMemcpyHtoD", "cuMemcpyDtoD", "cuMemcpyPeer",
})  # fmt: skip


def copy_kind(name: str) -> tuple[str | None, str | None, str | None]:
    """Return the copy kind and the source and destination memory kinds named by a copy's name
    (``Memcpy HtoD (Pageable -> Device)``); Nones where the name says nothing."""
    m = _MEMCPY.match(name)
    return m.groups() if m else (None, None, None)  # type: ignore[return-value]


def set_kind(name: str) -> str | None:
    """Return the memory kind named by a set's name (``Memset (Device)``), or None."""
    m = _MEMSET.match(name)
    return m.group(1) if m else None
