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

``sdpa_backend`` reads which backend ``F.scaled_dot_product_attention`` took, from its operators
(``aten::_scaled_dot_product_efficient_attention``, ``_flash_attention``, ``_cudnn_attention``,
``_scaled_dot_product_attention_math``) and its kernels (``fmha_cutlassF``/``fmha_cutlassB``:
memory-efficient; ``flash_fwd``/``flash_bwd``: flash; ``cudnn_generated_fort_native_sdpa``: cuDNN).
Flash attention takes no mask tensor: an explicit ``attn_mask`` sends bf16 and fp16 attention to the
memory-efficient kernel (or, on Hopper with recent PyTorch, to cuDNN's attention with a mask), which
reads the mask and computes every query-key pair. Where only the public operator
(``aten::scaled_dot_product_attention``) was recorded, the backend is that of the kernels that ran. Where that mask is
causal-shaped (square, ``L == S`` the query and key lengths, the same for every sequence and head:
its leading dimensions are 1) ``is_causal=True`` instead takes flash, which skips the pairs above the
diagonal. The model: the causal flash kernel does the memory-efficient kernels' matrix FLOPs (forward
and backward) times ``causal_pairs(L, S) / (L x S)`` (about half) at ``FUSED_EFFICIENCY`` of the
tensor-core roof of their precision; the saving is the efficient kernels' critical time less that.
Where the kernels' FLOPs are not known (cuDNN's), the same kernels on the causal pairs alone: their
time times ``causal_pairs(L, S) / (L x S)``.
"""

from __future__ import annotations

import re
from functools import lru_cache

from typing import TYPE_CHECKING

import numpy as np

from ...roofline.ceilings import for_report
from ...roofline.work.matrix import causal_pairs
from ..context import Context, Process, data_dict, fmt_ns, per_step_text
from ..finding import Finding
from ..kernel_flags import name_codes, per_code
from ..kernel_names import attention_backend, is_attention, is_elementwise, is_matmul
from ..rule import Rule

if TYPE_CHECKING:
    import pandas as pd

MAX_BETWEEN = 3
# FlashAttention-2 class kernels reach about half of the dense tensor-core peak in the forward pass
# (FlashAttention-2 paper: 50-73% on A100; PyTorch's kernels on H100 sit lower), so half the roof
# is the time the fused kernel is given
FUSED_EFFICIENCY = 0.5
_SOFTMAX = re.compile(r"softmax", re.IGNORECASE)
_COPY = re.compile(r"copy", re.IGNORECASE)


@lru_cache(maxsize=65536)  # asked once per kernel; a run has a few hundred names
def _is_product(name: str) -> bool:
    return is_matmul(name) and not is_attention(name) and not re.search(r"conv|fprop|dgrad|wgrad", name, re.I)


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


def attention_chains(ctx: Context, p: Process) -> list[tuple[int, int, int]]:
    """The chains of hand-written attention in the process's steady kernels (positions in
    :meth:`Context.steady_kernels`): (first kernel, first product, second product). Computed once
    per process (the fusion rule leaves these kernels to this rule)."""
    key = ("attention_chains", p.pid)
    if key not in ctx.cache:
        ctx.cache[key] = _find_chains(ctx, p)
    out: list[tuple[int, int, int]] = ctx.cache[key]
    return out


def _find_chains(ctx: Context, p: Process) -> list[tuple[int, int, int]]:
    return chains(*name_codes(ctx, p), ctx.steady_kernels(p)[1])


def chains(codes: np.ndarray, texts: list[str], step: np.ndarray) -> list[tuple[int, int, int]]:
    """The hand-written attention chains of kernels named ``texts[codes[i]]``, each in steady step
    ``step[i]``: (first kernel, first product, second product), as :func:`attention_chains` gives
    them. A softmax with a product on each side (only elementwise kernels between, in its step)
    makes a chain, which takes the copies just before its first product; chains do not overlap."""
    softmax = per_code(codes, texts, lambda n: bool(_SOFTMAX.search(n)))
    if not softmax.any():
        return []
    product = per_code(codes, texts, _is_product)
    elementwise = per_code(codes, texts, is_elementwise)
    copy = per_code(codes, texts, lambda n: bool(_COPY.search(n)) and is_elementwise(n))
    at = np.flatnonzero(softmax)
    before, after = _neighbours(at, step, product, elementwise, -1), _neighbours(at, step, product, elementwise, +1)
    found = (before >= 0) & (after >= 0)
    # how far each chain's first product reaches back over copies of its step (before the kernels
    # taken by the chain before it, which only the walk below knows)
    a_all = before[found]
    reach = np.zeros(len(a_all), np.int64)
    going = np.ones(len(a_all), bool)
    for d in range(1, MAX_BETWEEN + 1):
        x = a_all - d
        going &= x >= 0
        x = np.maximum(x, 0)
        going &= (step[x] == step[a_all]) & copy[x]
        reach += going
    out = []
    taken = -1
    for i, a, b, r in zip(at[found].tolist(), a_all.tolist(), after[found].tolist(), reach.tolist()):
        if i <= taken:
            continue
        out.append((max(a - r, min(a, taken + 1)), a, b))
        taken = b
    return out


def _neighbours(at: np.ndarray, step: np.ndarray, product: np.ndarray, elementwise: np.ndarray,
                direction: int) -> np.ndarray:
    """Per kernel of ``at``, the index of the matrix product next to it (before it for -1, after it
    for +1) with only elementwise kernels between, in the same step; -1 where there is none (in numpy, for
    every kernel at once)."""
    out = np.full(len(at), -1, np.int64)
    going = np.ones(len(at), bool)
    n = len(step)
    for d in range(1, MAX_BETWEEN + 2):
        j = at + direction * d
        going &= (j >= 0) & (j < n)
        jj = np.clip(j, 0, max(n - 1, 0))
        going &= step[jj] == step[at]
        hit = going & product[jj]
        out[hit] = j[hit]
        going &= ~product[jj] & elementwise[jj]
    return out


def span_rows(values: pd.Series, spans: list[tuple[int, int]]) -> list[int]:
    """The values of rows ``[i, j)`` of each span, in order, as integers (one gather, not a slice of
    the frame per span: a long run has hundreds of thousands of spans)."""
    if not spans:
        return []
    at = np.concatenate([np.arange(i, j) for i, j in spans])
    return values.to_numpy()[at].astype(np.int64).tolist()


class FusedAttention(Rule):
    name = "fused_attention"
    description = ("Attention computed as separate kernels (product, scale/mask, softmax, product) that write "
                   "and re-read the score matrix, which one fused attention kernel would not.")

    def evaluate(self, ctx: Context) -> list[Finding]:
        out = []
        work: dict[str, tuple[float, str | None]] | None = None
        for p in ctx.processes:
            found = attention_chains(ctx, p)
            if not found:
                continue
            kern, _ = ctx.steady_kernels(p)
            codes, texts = name_codes(ctx, p)
            # each chain's durations from the two columns (no array of every steady kernel's duration)
            start, end = kern["start_ns"].to_numpy(), kern["end_ns"].to_numpy()
            if work is None:
                work = _work(ctx)
            peaks = for_report(ctx.report)
            saving, total, chains, modelled = 0.0, 0.0, 0, 0
            spans: list[tuple[int, int]] = []
            for first, a, b in found:
                chain_ns = float((end[first:b + 1] - start[first:b + 1]).astype(np.int64).sum())
                fused_ns = float(int(end[a] - start[a]) + int(end[b] - start[b]))
                wa, wb = work.get(texts[codes[a]]), work.get(texts[codes[b]])
                if wa and wb:
                    peak = peaks.peak(wa[1] or "bf16", tensor=True)
                    if peak:
                        fused_ns = min(fused_ns, (wa[0] + wb[0]) / (FUSED_EFFICIENCY * peak) * 1e9)
                        modelled += 1
                saving += max(0.0, chain_ns - fused_ns)
                total += chain_ns
                chains += 1
                spans.append((first, b + 1))
            ns = p.per_step(saving)
            if not chains or p.share(ns) < ctx.min_share:
                continue
            op_ids = span_rows(kern["op_id"], spans)  # only for a finding: millions of operations in a long run
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


# SDPA's backend operators: name -> (backend, position of the mask, layout of q/k/v)
SDPA_OPS = {
    "aten::_scaled_dot_product_efficient_attention": ("efficient", 3, "bhle"),
    "aten::_efficient_attention_forward": ("efficient", 3, "blhe"),
    "aten::_scaled_dot_product_flash_attention": ("flash", None, "bhle"),
    "aten::_flash_attention_forward": ("flash", None, "blhe"),
    "aten::_scaled_dot_product_cudnn_attention": ("cudnn", 3, "bhle"),
    "aten::_scaled_dot_product_attention_math": ("math", 3, "bhle"),
    # the public operator, where its backend's operator was not seen: the backend is the kernels'
    "aten::scaled_dot_product_attention": ("kernels", 3, "bhle"),
}
# backends that take an explicit mask and compute every query-key pair it covers
MASKED_BACKENDS = ("efficient", "cudnn")
EFFICIENT_OPS = ("aten::_scaled_dot_product_efficient_attention", "aten::_efficient_attention_forward",
                 "aten::_scaled_dot_product_efficient_attention_backward", "aten::_efficient_attention_backward")
FLASH_HEAD_SIZE = 256  # PyTorch's flash kernels take head sizes up to this (multiples of 8)


def _sdpa_call(name: str, shapes: list[object], dtypes: list[object], scalars: dict[str, object]) -> dict[str, object] | None:
    """What one SDPA backend call says: backend, q and k lengths, head size, dtype, mask shape, is_causal."""
    backend, mask_at, layout = SDPA_OPS[name]
    q, k = (shapes[0] if shapes else None), (shapes[1] if len(shapes) > 1 else None)
    if not (isinstance(q, list) and isinstance(k, list) and len(q) == 4 and len(k) == 4):
        return None
    q_len, k_len = (q[2], k[2]) if layout == "bhle" else (q[1], k[1])
    mask = shapes[mask_at] if mask_at is not None and mask_at < len(shapes) else None
    return {"backend": backend, "q_len": int(q_len), "k_len": int(k_len), "head": int(q[3]),
            "dtype": str(dtypes[0]) if dtypes else "", "mask": mask if isinstance(mask, list) else None,
            "causal": bool(scalars.get("is_causal") or scalars.get("custom_mask_type", 0) in (1, 2))}


def causal_shaped(call: dict[str, object]) -> bool:
    """Whether the call's mask could be a causal mask: square over the query and key lengths
    (``L == S``), and the same for every sequence and head (leading dimensions of 1)."""
    mask = call["mask"]
    if not isinstance(mask, list) or len(mask) < 2:
        return False
    q_len, k_len = call["q_len"], call["k_len"]
    return mask[-2] == mask[-1] == q_len == k_len and all(d == 1 for d in mask[:-2])


class SdpaBackend(Rule):
    name = "sdpa_backend"
    description = ("Which backend scaled_dot_product_attention took and why: an explicit causal-shaped mask that "
                   "sends bf16/fp16 attention to the memory-efficient kernel, where is_causal=True takes flash.")

    def evaluate(self, ctx: Context) -> list[Finding]:
        from ..steady_work import calls_named, ceilings, steady_work

        out = []
        for p in ctx.processes:
            calls = [c for c in (_sdpa_call(n, s, d, sc) for n, s, d, sc in calls_named(ctx, p.pid, tuple(SDPA_OPS)))
                     if c is not None]
            k = steady_work(ctx, p)
            codes, texts = name_codes(ctx, p)
            # launches per backend, counted by name (a run has millions of kernels and a few hundred names)
            launches = np.bincount(codes, minlength=len(texts)) if len(codes) else np.zeros(len(texts), np.int64)
            ran: dict[str, int] = {}
            for text, n in zip(texts, launches.tolist()):
                b = attention_backend(text)
                if b is not None and n:
                    ran[b] = ran.get(b, 0) + n
            kernels_backend = max(set(ran), key=ran.__getitem__) if ran else None
            for c in calls:
                if c["backend"] == "kernels":
                    c["backend"] = kernels_backend
            backend = next((b for b in MASKED_BACKENDS if any(c["backend"] == b for c in calls)), None)
            efficient = [c for c in calls if c["backend"] == backend]
            masked = [c for c in efficient if causal_shaped(c) and not c["causal"]]
            if not masked:
                continue
            half = [c for c in masked if c["dtype"] in ("bfloat16", "float16", "torch.bfloat16", "torch.float16")]
            if not half:
                continue  # float32 attention takes no flash kernel whatever the mask: the precision rule's
            mine = per_code(codes, texts, lambda n: attention_backend(n) == backend)
            if backend == "efficient":
                mine |= k["op_name"].isin(EFFICIENT_OPS).to_numpy(bool)
            if not mine.any():
                continue
            share = len(half) / len(efficient)  # of the efficient attention calls, those with such a mask
            c = ceilings(ctx)
            dur = k["dur_ns"].to_numpy(np.float64)
            critical = k["critical"].to_numpy(bool)
            call = half[0]
            ratio = causal_pairs(int(call["q_len"]), int(call["k_len"])) / float(call["q_len"] * call["k_len"])
            new, old_known, new_known = np.full(len(k), np.nan), 0.0, 0.0
            for i in np.flatnonzero(mine & critical):
                matrix, prec = k.at[i, "matrix_flops"], k.at[i, "precision"]
                peak = c.peak(prec if isinstance(prec, str) else "bf16", tensor=True)
                if np.isfinite(matrix) and matrix > 0 and peak:
                    new[i] = min(dur[i], matrix * ratio / (FUSED_EFFICIENCY * peak) * 1e9)
                    old_known += dur[i]
                    new_known += new[i]
            crit = mine & critical
            # launches without their own FLOPs (outside the sample windows, not carried) take the ratio of
            # those with; with none known (cuDNN's kernels carry no FLOPs here), the same kernel on the
            # causal pairs alone: its time times their share
            fill = crit & np.isnan(new)
            new[fill] = dur[fill] * (new_known / old_known if old_known else ratio)
            waited = float(dur[crit].sum()) * share
            saving = float((dur[crit] - new[crit]).sum()) * share
            ns = p.per_step(saving)
            if p.share(ns) < ctx.min_share:
                continue
            total = p.per_step(float(dur[mine].sum()))
            backends = ", ".join(f"{b} {n}" for b, n in sorted(
                {b: sum(1 for x in calls if x["backend"] == b) for b in {str(x["backend"]) for x in calls}}.items()))
            kernel_words = {"efficient": ("the memory-efficient kernel", "fmha_cutlass kernels"),
                            "cudnn": ("cuDNN's attention with a mask", "cuDNN attention kernels")}[backend]
            evidence = [
                f"scaled_dot_product_attention ran {kernel_words[0]}: {per_step_text(p, total)} in "
                f"{kernel_words[1]}; sampled calls: {backends}",
                f"{len(half)} of {len(efficient)} calls pass an explicit {call['dtype']} mask of shape "
                f"{call['mask']} over {call['q_len']} queries and {call['k_len']} keys (head size {call['head']}"
                + (f", which flash takes" if int(call["head"]) <= FLASH_HEAD_SIZE and int(call["head"]) % 8 == 0
                   else "") + "): with a mask tensor every query-key pair it covers is computed",
                (f"estimate: with is_causal=True flash does {ratio:.0%} of the query-key pairs, its FLOPs at "
                 f"{FUSED_EFFICIENCY:.0%} of the tensor-core roof" if old_known else
                 f"estimate: with is_causal=True the kernels do {ratio:.0%} of the query-key pairs, at the speed "
                 f"they ran") + f", for the {fmt_ns(p.per_step(waited))} per step the step waits on: "
                f"{fmt_ns(ns)} per step saved",
            ]
            op_ids = k.loc[mine, "op_id"].astype(int).tolist()
            location = ctx.kernel_location(p, ctx.steady_kernels(p)[0], op_ids, "scaled_dot_product_attention")
            out.append(Finding(
                rule=self.name, pid=p.pid, saving_ns=ns, share=p.share(ns),
                title=f"Attention with an explicit square mask computes every query-key pair ({fmt_ns(total)} "
                      f"{p.unit} in {kernel_words[1]}): pass is_causal=True instead of the mask",
                evidence=evidence, location=location,
                fix=("If the mask is causal (each query sees the keys up to its own position), drop it and call "
                     "F.scaled_dot_product_attention(q, k, v, is_causal=True): PyTorch then runs a causal kernel "
                     "(flash, or cuDNN's), which skips the masked half of the scores. A mask that is not causal "
                     "(padding, a block pattern) keeps the masked kernel; FlexAttention (torch.nn.attention.flex_attention) "
                     "skips the blocks such a mask hides."),
                data=data_dict(saving_ns=ns, kernel_ns=total, masked_calls=len(half), efficient_calls=len(efficient),
                               causal_ratio=round(ratio, 4)),
            ))
        return out
