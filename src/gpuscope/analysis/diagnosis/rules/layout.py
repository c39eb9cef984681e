"""Convolutions on NCHW tensors, which channels_last would run without layout conversions.

PyTorch keeps images in NCHW by default; cuDNN's fastest convolution kernels (on Hopper and Ampere
all the tensor-core implicit GEMMs) take NHWC. On NCHW tensors cuDNN either converts around an
NHWC kernel (``nchwToNhwcKernel`` before, ``nhwcToNchwKernel`` after: a read and a write of the
activations each) or runs a kernel written for NCHW (``..._nchwkcrs_nchw_...``, ``..._nhwckrsc_nchw_...``,
``implicit_convolve_sgemm``), and batch norm runs its NCHW kernels (``bn_fw_tr_1C11_kernel_NCHW``).
``model.to(memory_format=torch.channels_last)`` with channels_last inputs removes the conversions
and lets every convolution and batch norm take its NHWC kernel.

The model, per kernel the step waits on (critical, :mod:`..breakdown`):

- a conversion kernel is removed: all of its time is saved;
- an NCHW convolution or batch-norm kernel with a roofline point (FLOPs and bytes from the operator
  shapes, :mod:`..steady_work`) is taken to reach ``TARGET_EFFICIENCY`` of its roof as an NHWC kernel,
  when it is below: it saves ``t - roof / TARGET_EFFICIENCY``; one without FLOPs and bytes is counted
  as saving nothing (said in the evidence), so that the estimate is the conversions alone.
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

import numpy as np

from ..context import Context, Process, data_dict, fmt_ns, per_step_text
from ..finding import Finding
from ..kernel_flags import name_flags
from ..kernel_names import is_layout_conversion, is_nchw_convolution, is_nchw_norm
from ..rule import ProcessRule
from ..steady_work import ceilings, op_calls, roof_ns, steady_work
from .kernels import TARGET_EFFICIENCY


def _layout_kind(name: str) -> str:
    """``conversion``, ``conv`` (NCHW), ``norm`` (NCHW) or "" by the kernel's name."""
    return ("conversion" if is_layout_conversion(name) else "conv" if is_nchw_convolution(name)
            else "norm" if is_nchw_norm(name) else "")


class LayoutSavings(NamedTuple):
    """Per steady kernel (:func:`..steady_work.steady_work`'s rows), what channels_last would save: a
    conversion's whole time, an NCHW kernel's time above its NHWC target; 0 elsewhere and off the
    critical path."""

    kind: np.ndarray  # per kernel: conversion, conv, norm or ""
    saved_ns: np.ndarray
    modelled: int  # NCHW convolution and batch-norm launches with a roofline point
    unmodelled: int  # those without FLOPs and bytes, counted as saving nothing


def layout_savings(ctx: Context, p: Process) -> LayoutSavings | None:
    """What channels_last saves per kernel of ``p``'s steady steps, or None where no convolution ran
    on NCHW tensors (an NCHW batch norm alone, a BatchNorm1d, has nothing to convert). Computed once
    per process: the compile estimate of :mod:`.fusion` counts it too."""
    key = ("layout_savings", p.pid)
    if key not in ctx.cache:
        ctx.cache[key] = _layout_savings(ctx, p)
    return ctx.cache[key]  # type: ignore[no-any-return]


def _layout_savings(ctx: Context, p: Process) -> LayoutSavings | None:
    k = steady_work(ctx, p)
    if not len(k):
        return None
    kind = name_flags(ctx, p, _layout_kind, object)
    if not ((kind == "conversion") | (kind == "conv")).any():
        return None
    c = ceilings(ctx)
    critical = k["critical"].to_numpy(bool)
    dur = k["dur_ns"].to_numpy(np.float64)
    saved = np.where((kind == "conversion") & critical, dur, 0.0)
    modelled = unmodelled = 0
    for i in np.flatnonzero(((kind == "conv") | (kind == "norm")) & critical):
        row = k.iloc[i]
        prec = row["precision"] if isinstance(row["precision"], str) else None
        roof = roof_ns(c, row["flops"], row["matrix_flops"], row["bytes"], prec,
                       tensor=prec in ("tf32", "bf16", "fp16", "fp8")) if prec else None
        if roof is None:
            unmodelled += 1
            continue
        modelled += 1
        saved[i] = max(0.0, dur[i] - roof / TARGET_EFFICIENCY)
    return LayoutSavings(kind, saved, modelled, unmodelled)


class ChannelsLast(ProcessRule):
    name = "channels_last"
    description = ("Convolutions and batch norms on NCHW tensors, with the layout conversions cuDNN runs around "
                   "them: channels_last removes the conversions and takes the NHWC kernels.")

    def process(self, ctx: Context, p: Process) -> Finding | None:
        found = layout_savings(ctx, p)
        if found is None:
            return None
        k = steady_work(ctx, p)
        kind, modelled, unmodelled = found.kind, found.modelled, found.unmodelled
        dur = k["dur_ns"].to_numpy(np.float64)
        converted = float(found.saved_ns[kind == "conversion"].sum())
        faster = float(found.saved_ns[kind != "conversion"].sum())
        ns = p.per_step(converted + faster)
        if p.share(ns) < ctx.min_share:
            return None
        per = {what: p.per_step(float(dur[kind == what].sum())) for what in ("conversion", "conv", "norm")}
        evidence = [
            f"layout conversions (nchwToNhwc / nhwcToNchw) {per_step_text(p, per['conversion'])}; NCHW convolutions "
            f"{fmt_ns(per['conv'])} and NCHW batch norms {fmt_ns(per['norm'])} per step",
            "top: " + "; ".join(f"{str(n)[:80]} ({fmt_ns(p.per_step(float(t)))})" for n, t in
                                k[kind != ""].groupby("name")["dur_ns"].sum().sort_values(ascending=False).head(3).items()),
            f"estimate: the conversions the step waits on ({fmt_ns(p.per_step(converted))} per step) are removed"
            + (f"; {modelled} NCHW convolution and batch-norm launches reach {TARGET_EFFICIENCY:.0%} of their roof as "
               f"NHWC kernels ({fmt_ns(p.per_step(faster))} per step)" if modelled else "")
            + (f"; {unmodelled} launches without FLOPs and bytes count as no faster (record operator shapes, --trace "
               "torch-shapes, for their roofline)" if unmodelled else ""),
        ]
        shapes = self._convolutions(ctx, k, kind)
        if shapes:
            evidence.append("convolutions behind the NCHW kernels (sampled operators): " + shapes)
        op_ids = k.loc[kind != "", "op_id"].astype(int).tolist()
        location = ctx.kernel_location(p, ctx.steady_kernels(p)[0], op_ids, "the convolution layers")
        return Finding(
            rule=self.name, pid=p.pid, saving_ns=ns, share=p.share(ns),
            title=f"NCHW convolutions with layout conversions ({fmt_ns(per['conversion'])} {p.unit}): use channels_last",
            evidence=evidence, location=location,
            fix=("Convert the model and its inputs to channels_last: model = model.to(memory_format=torch.channels_last) "
                 "and x = x.to(memory_format=torch.channels_last) (or contiguous(memory_format=...)) where the batch is "
                 "made; convolutions and batch norms then run their NHWC kernels without conversions."),
            data=data_dict(saving_ns=ns, conversion_ns=per["conversion"], nchw_conv_ns=per["conv"],
                           nchw_norm_ns=per["norm"], modelled_launches=modelled),
        )

    @staticmethod
    def _convolutions(ctx: Context, k: object, kind: np.ndarray) -> str:
        """The most frequent convolution calls (name and input shapes) whose kernels were NCHW, where
        operators were sampled."""
        import pandas as pd

        assert isinstance(k, pd.DataFrame)
        ids = k.loc[(kind == "conv") & k["torch_op_id"].notna().to_numpy(bool), "torch_op_id"]
        calls = op_calls(ctx, [int(i) for i in ids.unique()])
        count: Counter[str] = Counter()
        for i in ids:
            call = calls.get(int(i))
            if call is not None:
                shapes = [s for s in call[1][:2] if s is not None]
                count[f"{call[0]} {' x '.join(str(s) for s in shapes)}"] += 1
        return "; ".join(f"{text} ({n} launches)" for text, n in count.most_common(3))
