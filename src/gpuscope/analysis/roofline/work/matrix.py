"""The work of matrix products, convolutions (forward and backward) and attention (forward and
backward); the conventions are in :mod:`.work_model`."""

from __future__ import annotations

import math

from .call import Call, Work, numel

ATTENTION_SOFTMAX_FLOPS = 5  # per query-key pair, forward
ATTENTION_BACKWARD_FLOPS = 9  # per pair: the softmax recomputed (5) and its gradient (4)
MATMULS = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "mv", "addmv", "dot", "vdot", "_scaled_mm", "_int_mm"}


def matmul_work(c: Call) -> Work | None:
    """Matrix products: ``2·M·N·K`` (times the batch), plus ``M·N`` for a bias or ``beta·C`` term."""
    base = c.name.removeprefix("aten::")
    if base in ("mm", "_scaled_mm", "_int_mm"):
        a, b, bias = c.arg(0), c.arg(1), None
    elif base in ("addmm", "baddbmm", "addbmm", "addmv"):
        bias, a, b = c.arg(0), c.arg(1), c.arg(2)
    else:  # bmm, mv, dot, vdot
        a, b, bias = c.arg(0), c.arg(1), None
    if a is None or b is None:
        return None
    if base in ("dot", "vdot"):
        m = n = 1
        k, batch = a[0], 1
    elif base in ("mv", "addmv"):
        (m, k), n, batch = a, 1, 1
    elif base in ("bmm", "baddbmm", "addbmm"):
        batch, m, k = a
        n = b[2]
    else:
        (m, k), n, batch = a, b[1], 1
    matrix = 2.0 * batch * m * n * k
    extra = 0.0
    if bias is not None:  # beta·C + alpha·AB: one add per output element
        extra = float(m * n * (batch if base == "baddbmm" else 1))
    return c.work("matmul", matrix + extra, matrix)


# -- convolution -----------------------------------------------------------------------------------
CONVOLUTIONS = {  # name: (bias position or None, transposed: True/False/None = from scalars)
    "convolution": (2, None), "_convolution": (2, None), "convolution_overrideable": (2, None),
    "cudnn_convolution": (None, False), "cudnn_convolution_transpose": (None, True),
    "mkldnn_convolution": (2, False), "_slow_conv2d_forward": (3, False),
    "conv1d": (2, False), "conv2d": (2, False), "conv3d": (2, False),
    "conv_transpose1d": (2, True), "conv_transpose2d": (2, True), "conv_transpose3d": (2, True),
    "_nnpack_spatial_convolution": (2, False), "slow_conv_dilated2d": (3, False),
}  # fmt: skip


def _spatial(c: Call, x: list[int], w: list[int], transposed: bool) -> tuple[int, list[int], list[int]]:
    """Return (batch, input positions per image, output positions per image) of a convolution."""
    dims = len(w) - 2
    batch = x[0] if len(x) == dims + 2 else 1
    in_sp = x[-dims:]
    out = c.out(0)
    if out is not None and len(out) >= dims:
        return batch, in_sp, out[-dims:]

    def per_dim(key: str, default: int) -> list[int]:
        v = c.scalars.get(key, default)
        return list(v) * (dims if len(v) == 1 else 1) if isinstance(v, list) else [v] * dims

    stride, pad, dil = per_dim("stride", 1), per_dim("padding", 0), per_dim("dilation", 1)
    ks = w[2:]
    if transposed:
        opad = per_dim("output_padding", 0)
        out_sp = [(i - 1) * s - 2 * p + d * (k - 1) + op + 1
                  for i, s, p, d, k, op in zip(in_sp, stride, pad, dil, ks, opad)]
    else:
        out_sp = [(i + 2 * p - d * (k - 1) - 1) // s + 1 for i, s, p, d, k in zip(in_sp, stride, pad, dil, ks)]
    return batch, in_sp, out_sp


def conv_work(c: Call) -> Work | None:
    """A convolution: ``2 · output positions · weight elements`` (input positions when transposed),
    plus one add per output element for a bias."""
    bias_at, transposed = CONVOLUTIONS[c.name.removeprefix("aten::")]
    x, w = c.arg(0), c.arg(1)
    if x is None or w is None or len(w) < 3:
        return None
    t = c.flag("transposed") if transposed is None else transposed
    batch, in_sp, out_sp = _spatial(c, x, w, t)
    positions = batch * math.prod(in_sp if t else out_sp)
    matrix = 2.0 * positions * numel(w)
    out_channels = w[1] * int(c.scalars.get("groups", 1)) if t else w[0]
    bias = batch * out_channels * math.prod(out_sp) if bias_at is not None and c.arg(bias_at) is not None else 0
    return c.work("conv", matrix + bias, matrix)


def conv_backward_work(c: Call) -> Work | None:
    """``convolution_backward``: the forward's matrix work for each of the input and weight gradients
    asked for (``output_mask``), and one add per output element for the bias gradient."""
    go, x, w = c.arg(0), c.arg(1), c.arg(2)
    if go is None or x is None or w is None or len(w) < 3:
        return None
    t = c.flag("transposed")
    mask = c.scalars.get("output_mask") or [True, True, bool(c.scalars.get("bias_sizes"))]
    dims = len(w) - 2
    batch = x[0] if len(x) == dims + 2 else 1
    out_sp, in_sp = go[-dims:], x[-dims:]
    positions = batch * math.prod(in_sp if t else out_sp)
    matrix = 2.0 * positions * numel(w) * (int(bool(mask[0])) + int(bool(mask[1])))
    bias = batch * go[-dims - 1] * math.prod(out_sp) if len(mask) > 2 and mask[2] else 0
    return c.work("conv", matrix + bias, matrix)


# -- attention -------------------------------------------------------------------------------------
ATTENTIONS = {  # name: (position of query, layout, backward)
    "_scaled_dot_product_flash_attention": (0, "bhle", False),
    "_scaled_dot_product_flash_attention_for_cpu": (0, "bhle", False),
    "_scaled_dot_product_efficient_attention": (0, "bhle", False),
    "_scaled_dot_product_cudnn_attention": (0, "bhle", False),
    "_flash_attention_forward": (0, "blhe", False),
    "_efficient_attention_forward": (0, "blhe", False),
    "_scaled_dot_product_flash_attention_backward": (1, "bhle", True),
    "_scaled_dot_product_flash_attention_for_cpu_backward": (1, "bhle", True),
    "_scaled_dot_product_efficient_attention_backward": (1, "bhle", True),
    "_scaled_dot_product_cudnn_attention_backward": (1, "bhle", True),
    "_flash_attention_backward": (1, "blhe", True),
    "_efficient_attention_backward": (1, "blhe", True),
}


def causal_pairs(q_len: int, k_len: int) -> int:
    """Return the query-key pairs a top-left-aligned causal mask keeps: query i sees keys 0..i."""
    if q_len <= k_len:
        return q_len * (q_len + 1) // 2
    return k_len * (k_len + 1) // 2 + (q_len - k_len) * k_len


def attention_work(c: Call) -> Work | None:
    """Attention forward (two products and the softmax per query-key pair) or backward (five
    products, the softmax recomputed and its gradient)."""
    at, layout, backward = ATTENTIONS[c.name.removeprefix("aten::")]
    q, k, v = c.arg(at), c.arg(at + 1), c.arg(at + 2)
    if q is None or k is None or v is None or len(q) != 4:
        return None
    if layout == "bhle":
        heads, q_len, e, k_len, ev = q[0] * q[1], q[2], q[3], k[2], v[3]
    else:
        heads, q_len, e, k_len, ev = q[0] * q[2], q[1], q[3], k[1], v[3]
    causal = c.flag("is_causal") or c.scalars.get("custom_mask_type", 0) in (1, 2)
    pairs = heads * (causal_pairs(q_len, k_len) if causal else q_len * k_len)
    if backward:
        matrix = float(pairs * (6 * e + 4 * ev))
        return c.work("attention", matrix + ATTENTION_BACKWARD_FLOPS * pairs, matrix)
    matrix = float(pairs * (2 * e + 2 * ev))
    return c.work("attention", matrix + ATTENTION_SOFTMAX_FLOPS * pairs, matrix)
