"""Attention written as separate operators, which one fused attention kernel would replace.

``softmax(q @ k.T / sqrt(d)) @ v`` in eager PyTorch runs as a batched matrix product that writes
the score matrix (batch x heads x sequence x sequence) to memory, elementwise kernels that scale or
mask it, a softmax that reads and writes it again, copies of the operands into the layouts the
products want, and a second product that reads it once more. A fused attention kernel
(``F.scaled_dot_product_attention``: FlashAttention, memory-efficient or cuDNN attention) keeps each
block of scores on chip and never writes the matrix.

A *chain* is, in a steady step: a softmax kernel, a matrix product before it with at most
``MAX_BETWEEN`` elementwise kernels between them, and one after it the same way; the copy kernels
directly before the first product (operands made contiguous) belong to the chain too. The fused
kernel does the two products' FLOPs: where the report has them (operator shapes), it takes them
at ``FUSED_EFFICIENCY`` of the tensor-core roof of their precision; without them it is assumed
to take as long as the two products did, which only credits the passes over the scores.
"""

from __future__ import annotations

import re

import numpy as np

from ...ceilings import for_report
from ..context import Context, data_dict, fmt_ns
from ..finding import Finding
from ..kernel_names import is_attention, is_elementwise, is_matmul
from ..rule import Rule

MAX_BETWEEN = 3
# FlashAttention-2 class kernels reach about half of the dense tensor-core peak in the forward pass
# (FlashAttention-2 paper: 50-73% on A100; PyTorch's kernels on H100 sit lower), so half the roof
# is the time the fused kernel is given
FUSED_EFFICIENCY = 0.5
_SOFTMAX = re.compile(r"softmax", re.IGNORECASE)
_COPY = re.compile(r"copy", re.IGNORECASE)


def _is_product(name: str) -> bool:
    return is_matmul(name) and not is_attention(name) and not re.search(r"conv|fprop|dgrad|wgrad", name, re.I)


def _neighbour(names: list[str], i: int, step: np.ndarray, direction: int) -> int | None:
    """The index of the matrix product next to kernel ``i`` (before it for -1, after it for +1),
    with only elementwise kernels between, in the same step; None when there is none."""
    j = i + direction
    for _ in range(MAX_BETWEEN + 1):
        if j < 0 or j >= len(names) or step[j] != step[i]:
            return None
        if _is_product(names[j]):
            return j
        if not is_elementwise(names[j]):
            return None
        j += direction
    return None


def _work(ctx: Context) -> dict[str, tuple[float, str | None]]:
    """Per kernel name: FLOPs per launch and precision, from the roofline's points."""
    points = ctx.roofline
    if points is None:
        return {}
    out: dict[str, tuple[float, str | None]] = {}
    for r in points.itertuples(index=False):
        if r.kernels and r.flops and str(r.name) not in out:
            out[str(r.name)] = (float(r.flops) / float(r.kernels), r.precision if isinstance(r.precision, str) else None)
    return out


class FusedAttention(Rule):
    name = "fused_attention"
    description = ("Attention computed as separate kernels (product, scale/mask, softmax, product) that write "
                   "and re-read the score matrix, which one fused attention kernel would not.")

    def evaluate(self, ctx: Context) -> list[Finding]:
        out = []
        work: dict[str, tuple[float, str | None]] | None = None
        for p in ctx.processes:
            kern, step = ctx.steady_kernels(p)
            names = kern["name"].astype(str).tolist()
            if not any(_SOFTMAX.search(n) for n in set(names)):
                continue
            dur = (kern["end_ns"] - kern["start_ns"]).to_numpy(np.int64)
            if work is None:
                work = _work(ctx)
            peaks = for_report(ctx.report)
            saving, total, chains, modelled, op_ids = 0.0, 0.0, 0, 0, []
            taken = -1
            for i, name in enumerate(names):
                if i <= taken or not _SOFTMAX.search(name):
                    continue
                a, b = _neighbour(names, i, step, -1), _neighbour(names, i, step, +1)
                if a is None or b is None:
                    continue
                first = a
                while first - 1 > taken and step[first - 1] == step[a] and _COPY.search(names[first - 1]) \
                        and is_elementwise(names[first - 1]) and a - first < MAX_BETWEEN:
                    first -= 1
                chain_ns = float(dur[first:b + 1].sum())
                fused_ns = float(dur[a] + dur[b])
                wa, wb = work.get(names[a]), work.get(names[b])
                if wa and wb:
                    peak = peaks.peak(wa[1] or "bf16", tensor=True)
                    if peak:
                        fused_ns = min(fused_ns, (wa[0] + wb[0]) / (FUSED_EFFICIENCY * peak) * 1e9)
                        modelled += 1
                saving += max(0.0, chain_ns - fused_ns)
                total += chain_ns
                chains += 1
                op_ids += kern["op_id"].iloc[first:b + 1].astype(int).tolist()
                taken = b
            ns = p.per_step(saving)
            if not chains or p.share(ns) < ctx.min_share:
                continue
            location = ctx.kernel_location(p, kern, op_ids, "attention computed as separate kernels")
            model = (f"the fused kernel does the two products' FLOPs at {FUSED_EFFICIENCY:.0%} of the tensor-core "
                     f"roof ({modelled} of {chains} chains had FLOPs)" if modelled else
                     "the fused kernel is assumed to take as long as the two products (their FLOPs are not in this "
                     "report: record operator shapes for a closer estimate)")
            out.append(Finding(
                rule=self.name, pid=p.pid, saving_ns=ns, share=p.share(ns),
                title=f"Attention as separate kernels: score matrices written and read back ({chains / p.n_steps:.1f} "
                      "per step); use a fused attention kernel",
                evidence=[f"{chains / p.n_steps:.1f} chains per step of a matrix product, softmax and a second "
                          f"product, {fmt_ns(p.per_step(total))} per step in their kernels",
                          f"estimate: {model}: {fmt_ns(ns)} per step saved"],
                location=location,
                fix=("Compute attention with torch.nn.functional.scaled_dot_product_attention(q, k, v, "
                     "attn_mask=..., is_causal=...), which runs a fused FlashAttention / memory-efficient / cuDNN "
                     "kernel that never writes the score matrix; nn.MultiheadAttention and "
                     "nn.TransformerEncoderLayer use it already."),
                data=data_dict(saving_ns=ns, chains_per_step=chains / p.n_steps, modelled_chains=modelled),
            ))
        return out
