"""The work of a PyTorch operator from its shapes and dtypes: floating-point operations and the
minimum bytes it must move.

Conventions (one place to read them; the tests check each formula by hand):

- A multiply-add counts as two operations. A matrix product of ``[M, K] x [K, N]`` is ``2·M·N·K``;
  a bias or ``beta·C`` term adds ``M·N``. Transcendental functions (exp, erf, rsqrt, ...) count as
  one operation each; a formula counts its arithmetic (``gelu`` = 5 per element: see ELEMENTWISE).
- ``matrix_flops`` is the part done as matrix products (GEMM, convolution, attention's two
  products): the work tensor cores can take. The rest (softmax, bias, normalization) is ``flops -
  matrix_flops``.
- Minimum bytes: every tensor argument read once and every output written once, at its dtype's
  size; the bytes of an operator that could not do with less. Outputs count at the size of the
  first floating-point input (statistics such as layer norm's mean and rstd are small). Operators
  that only write their first argument (``fill_``, ``copy_``, ``zero_``) do not read it.
- Operators that only write a tensor (random numbers: ``randn``, ``normal_``, ``uniform_``, ...;
  fills: ``zeros``, ``ones_like``, ``full``, ...) do no useful arithmetic: 0 operations, and the
  bytes of the tensor they write (at the ``dtype`` they were given, else their input's, else
  float32), plus the tensor arguments they read (the ``p`` of ``bernoulli_``).
- Convolution counts the work of the direct algorithm: ``2 · output positions · weight elements``
  (and for a transposed convolution, input positions instead of output positions).
- Attention (``_scaled_dot_product_{flash,efficient,cudnn}attention_work`` and the kernels' own
  ``_flash_attention_*``, ``_efficient_attention_*``): forward ``2·P·E + 2·P·Ev`` matrix operations
  over the ``P`` query-key pairs (fewer under a causal mask: top-left aligned, as PyTorch's
  ``is_causal``) and 5 per pair for the softmax; backward five products (``QKᵀ`` recomputed, ``dV``,
  ``dP``, ``dQ``, ``dK``: ``P·(6E + 4Ev)``) and 9 per pair (recomputed softmax, its gradient).
- Normalization: layer norm 5 per element plus 1 for each of weight and bias; RMS norm 3 plus 1
  for the weight; batch norm 7 while training (statistics, normalization, affine) and 4 in
  inference; a backward pass counts twice its forward.
- Composite operators that PyTorch decomposes before they reach a backend (``matmul``,
  ``scaled_dot_product_attention``) have no model: the operators they decompose into carry their
  work. Under ``torch.inference_mode()`` autograd's keys are off, and the recorder's dispatch mode
  sees ``linear``, ``layer_norm``, ``group_norm``, ``rms_norm`` and ``batch_norm`` themselves (their
  decompositions then run inside them, unseen): these carry the work of what they decompose into
  (``linear`` that of ``addmm``: ``2·M·N·K`` plus ``M·N`` for a bias; the norms that of their
  ``native_`` forms).

Inputs are the ``torch_op`` columns (docs/report-format.md): ``shapes`` and ``dtypes`` have one
entry per argument (None for a non-tensor, a list for a list of tensors), ``out_shapes`` one per
output, ``scalars`` the non-tensor arguments by name.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from .call import PRECISIONS, Call, Work, element_size, numel, output_shapes, precision_of, tensor_args
from .matrix import (
    ATTENTIONS, CONVOLUTIONS, MATMULS, attention_work, causal_pairs, conv_backward_work, conv_work, matmul_work,
)

__all__ = ["PRECISIONS", "Work", "causal_pairs", "element_size", "is_writer", "numel", "op_work", "op_work_json",
           "precision_of"]

# Operations per output element of elementwise operators (the name without ``aten::``, a trailing
# ``_`` and a ``_foreach_`` prefix). Operators listed with 0 only move data.
ELEMENTWISE = {
    **dict.fromkeys(
        "add sub rsub mul div neg abs relu relu6 threshold threshold_backward maximum minimum clamp "
        "clamp_min clamp_max where masked_fill sqrt rsqrt reciprocal exp exp2 log log2 log10 log1p "
        "expm1 sin cos tan tanh erf erfinv sign floor ceil round trunc frac pow square fmod remainder "
        "lt le gt ge eq ne logical_not logical_and logical_or hardtanh leaky_relu max_elementwise "
        "min_elementwise floor_divide".split(), 1),
    **dict.fromkeys("addcmul addcdiv lerp native_dropout native_dropout_backward hardtanh_backward "
                    "leaky_relu_backward mul_scalar_add".split(), 2),
    **dict.fromkeys("sigmoid sigmoid_backward tanh_backward elu softplus hardsigmoid".split(), 3),
    **dict.fromkeys("silu hardswish hardswish_backward".split(), 4),
    "gelu": 5, "silu_backward": 6, "mish": 6, "gelu_backward": 8,
    **dict.fromkeys("copy _to_copy clone fill zero cat stack _unsafe_index constant_pad_nd "
                    "index_put scatter gather".split(), 0),
}  # fmt: skip
# Operators that only write a tensor: they create it, or overwrite their first argument (WRITER_INPLACE)
WRITERS = {
    **dict.fromkeys("randn rand normal randn_like rand_like bernoulli".split(), "random"),
    **dict.fromkeys("zeros ones full zeros_like ones_like full_like new_zeros new_ones new_full scalar_tensor".split(),
                    "fill"),
}  # fmt: skip
WRITER_INPLACE = {
    **dict.fromkeys("normal_ uniform_ bernoulli_ random_ exponential_ geometric_ cauchy_ log_normal_".split(), "random"),
    **dict.fromkeys("fill_ zero_".split(), "fill"),
}  # fmt: skip
_WRITE_ONLY_FIRST = {"copy_", "fill_", "zero_", "normal_", "uniform_", "bernoulli_", "random_"}
REDUCTION = {
    **dict.fromkeys("sum mean amax amin max min prod argmax argmin cumsum cumprod any all".split(), 1),
    **dict.fromkeys("norm linalg_vector_norm".split(), 2),
    **dict.fromkeys("var std var_mean std_mean logsumexp".split(), 3),
}  # fmt: skip
ADAM_FLOPS_PER_ELEMENT = 14  # moments 7, denominator 3, update 3, weight decay 1
SOFTMAX_FLOPS = 5  # per element: max, subtract, exp, sum, divide
SOFTMAX_BACKWARD_FLOPS = 4

# -- normalization, softmax, elementwise, reductions, embedding -------------------------------------
_NORMS = {  # name: (input position, weight position, bias position) of the affine parameters
    "native_layer_norm": (0, 2, 3), "native_layer_norm_backward": (1, 5, 6),
    "native_group_norm": (0, 1, 2), "native_group_norm_backward": (1, 4, None),
    "_fused_rms_norm": (0, 2, None), "_fused_rms_norm_backward": (1, 4, None),
    **dict.fromkeys(("native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
                     "cudnn_batch_norm", "miopen_batch_norm", "_batch_norm_with_update",
                     "_batch_norm_no_update"), (0, 1, 2)),
    **dict.fromkeys(("native_batch_norm_backward", "cudnn_batch_norm_backward", "batch_norm_backward",
                     "miopen_batch_norm_backward"), (1, 2, None)),
    # the composites, seen as themselves under inference_mode (arguments as their native forms')
    "layer_norm": (0, 2, 3), "group_norm": (0, 2, 3), "rms_norm": (0, 2, None), "batch_norm": (0, 1, 2),
}  # fmt: skip


def _linear(c: Call) -> Work | None:
    """``linear(input [..., K], weight [N, K], bias [N])``: the product of ``addmm``."""
    x, w, bias = c.arg(0), c.arg(1), c.arg(2)
    if x is None or w is None or len(w) != 2 or not x:
        return None
    k, n = x[-1], w[0]
    m = numel(x) // k if k else 0
    matrix = 2.0 * m * n * k
    return c.work("matmul", matrix + (float(m * n) if bias is not None else 0.0), matrix)


def _norm(c: Call) -> Work | None:
    base = c.name.removeprefix("aten::")
    x_at, w_at, b_at = _NORMS[base]
    x = c.arg(x_at)
    if x is None:
        return None
    backward = base.endswith("_backward")
    if "batch_norm" in base:
        inference = base.endswith(("no_training", "no_update")) or not c.flag("training", True)
        per = 7 if backward or not inference else 4
    else:
        per = (3 if "rms_norm" in base else 5) + (c.arg(w_at) is not None)
        per += b_at is not None and c.arg(b_at) is not None
    return c.work("norm", numel(x) * per * (2 if backward else 1))


def _softmax(c: Call) -> Work | None:
    x = c.arg(0)
    if x is None:
        return None
    per = SOFTMAX_BACKWARD_FLOPS if c.name.endswith("_backward_data") else SOFTMAX_FLOPS
    return c.work("softmax", numel(x) * per)


def _elementwise(c: Call, base: str) -> Work:
    per = ELEMENTWISE[base]
    n = sum(numel(s) for s in output_shapes(c.outs))
    if not n:  # an in-place operator that returns nothing (the _foreach_ ones)
        first = c.shapes[0] if c.shapes else None
        n = sum(numel(s) for s, _ in tensor_args([first], [None]))
    name = c.name.removeprefix("aten::")
    skip = name.removeprefix("_foreach_") in _WRITE_ONLY_FIRST
    writes = c.write_bytes() or (n * c.size if name.endswith("_") else 0.0)
    return c.work("copy" if per == 0 else "elementwise", n * per, nbytes=c.read_bytes(skip) + writes)


def is_writer(name: str) -> bool:
    """Return whether operator ``name`` (``aten::randn``) only writes a tensor (:data:`WRITERS`,
    :data:`WRITER_INPLACE`)."""
    base = name.removeprefix("aten::")
    return base in WRITERS or base in WRITER_INPLACE


def _writer(c: Call, base: str) -> Work:
    """A random-number or fill operator: no operations; the bytes of what it writes, plus the
    tensors it reads (not the one it overwrites, nor the one a ``_like`` operator takes its shape from)."""
    dtype = c.scalars.get("dtype")
    inplace = base in WRITER_INPLACE
    reads = 0.0
    if inplace:
        reads = c.read_bytes(skip_first=True)
    elif not base.endswith("_like") and not base.startswith("new_"):
        reads = c.read_bytes()  # normal(mean, std) and bernoulli(p) read their tensors
    tensors = any(True for _ in tensor_args(c.shapes, c.dtypes))
    # a factory without a dtype makes the default dtype (float32); element_size(None) is 4
    precision = precision_of(dtype) if dtype is not None else (c.precision if tensors else "fp32")
    size = element_size(dtype) if dtype is not None else c.size
    outs = list(output_shapes(c.outs))
    if not outs and inplace and c.arg(0) is not None:
        outs = [c.arg(0)]
    written = float(sum(numel(s) for s in outs) * size)
    return Work((WRITER_INPLACE | WRITERS)[base], precision, 0.0, 0.0, reads + written)


def _adam(c: Call) -> Work:
    params = c.shapes[0] if c.shapes else None
    n = sum(numel(s) for s, _ in tensor_args([params], [None]))
    written = sum(numel(s) * c.size for i in (0, 2, 3) for s, _ in tensor_args([c.shapes[i] if i < len(c.shapes) else None], [None]))
    return c.work("optimizer", n * ADAM_FLOPS_PER_ELEMENT, nbytes=c.read_bytes() + written)


def _reduction(c: Call, base: str) -> Work | None:
    x = c.arg(0)
    if x is None:
        return None
    return c.work("reduction", numel(x) * REDUCTION[base])


def _embedding(c: Call) -> Work | None:
    base = c.name.removeprefix("aten::")
    if base == "embedding":
        w, idx = c.arg(0), c.arg(1)
        if w is None or idx is None:
            return None
        rows = numel(idx) * w[-1] * element_size(c.dtypes[0])
        return c.work("embedding", 0, nbytes=numel(idx) * element_size(c.dtypes[1]) + 2 * rows)
    if base == "index_select":
        idx, out = c.arg(2), c.out(0)
        if idx is None or out is None:
            return None
        return c.work("embedding", 0, nbytes=numel(idx) * element_size(c.dtypes[2]) + 2 * numel(out) * c.size)
    grad, idx = c.arg(0), c.arg(1)  # embedding_dense_backward
    if grad is None or idx is None:
        return None
    rows = int(c.scalars.get("num_weights", 0)) * grad[-1] * c.size
    return c.work("embedding", numel(grad), nbytes=c.read_bytes() + rows)


_SOFTMAX = {"_softmax", "_log_softmax", "_softmax_backward_data", "_log_softmax_backward_data"}
_EMBEDDING = {"embedding", "embedding_dense_backward", "index_select"}


def op_work(name: str, shapes: Sequence[Any], dtypes: Sequence[Any], out_shapes: Sequence[Any],
            scalars: dict[str, Any] | None = None) -> Work | None:
    """Return the work of one call of operator ``name`` (``aten::mm``), or None when there is no
    model for it (or its arguments are not what the model expects)."""
    c = Call(name, shapes, dtypes, out_shapes, scalars or {})
    base = name.removeprefix("aten::")
    try:
        if base in MATMULS:
            return matmul_work(c)
        if base in CONVOLUTIONS:
            return conv_work(c)
        if base == "convolution_backward":
            return conv_backward_work(c)
        if base in ATTENTIONS:
            return attention_work(c)
        if base in _NORMS:
            return _norm(c)
        if base == "linear":
            return _linear(c)
        if base in _SOFTMAX:
            return _softmax(c)
        if base in _EMBEDDING:
            return _embedding(c)
        if base in WRITERS or base in WRITER_INPLACE:
            return _writer(c, base)
        if base in ("_fused_adam_", "_fused_adamw_", "_fused_adam", "_fused_adamw"):
            return _adam(c)
        key = base.removeprefix("_foreach_").rstrip("_")
        if key in ("max", "min") and sum(1 for _ in tensor_args(c.shapes, c.dtypes)) == 2:
            key = f"{key}_elementwise"
        if key in ELEMENTWISE:
            return _elementwise(c, key)
        if key in REDUCTION and not base.startswith("_foreach_"):
            return _reduction(c, key)
    except (TypeError, ValueError, IndexError, KeyError):  # arguments of an unexpected form
        return None
    return None


@lru_cache(maxsize=65536)
def op_work_json(name: str, shapes: str | None, dtypes: str | None, out_shapes: str | None,
                 scalars: str | None) -> Work | None:
    """:func:`op_work` on the JSON text of the ``torch_op`` columns (cached: calls repeat)."""
    return op_work(name, json.loads(shapes or "[]"), json.loads(dtypes or "[]"),
                   json.loads(out_shapes or "[]"), json.loads(scalars or "{}"))
