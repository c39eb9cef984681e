"""Matrix products, convolutions and attention in float32 or TF32 where bf16 autocast applies.

Under ``torch.autocast('cuda', dtype=torch.bfloat16)`` matrix products, convolutions and attention
run in bf16 on the tensor cores: twice the TF32 peak on Hopper and Ampere, about fifteen times the
float32 CUDA-core peak, and half the bytes. The fix changes numerics (an 8-bit mantissa), so it is
proposed only where those kernels are a large part of the step: at least ``LARGE_SHARE`` of the
step without the profiler.

A kernel is float32 or TF32 by its operator's dtypes (``torch_op`` rows, carried to the launches
outside the sample windows) or, without them, by its name (:mod:`..kernel_names`: ``sgemm``,
``ffma``, ``f32f32_f32f32``, ``simt`` on CUDA cores; ``tf32``, ``xf32``, ``s1688``, ``nvjet_sm90_sss``
on tensor cores). The model, per kernel the step waits on (critical, :mod:`..breakdown`), of time ``t``:

- with its FLOPs and bytes (operator shapes): the time at the roofs now, ``r_now`` (float32 at the
  CUDA-core peak, TF32 at the TF32 tensor peak, and its bytes at the DRAM bandwidth), and in bf16,
  ``r_bf16`` (the BF16 tensor peak, half the bytes). The kernel keeps its share of the roof, but
  reaches at most ``TARGET_EFFICIENCY`` of it: ``t_bf16 = max(t x r_bf16 / r_now, r_bf16 /
  TARGET_EFFICIENCY)``. Attention in float32 runs the memory-efficient kernel; in bf16 it takes
  flash attention, given ``FUSED_EFFICIENCY`` of the BF16 roof (:mod:`.attention`).
- without them: ``t_bf16 = t_tf32 x max(peak_tf32 / peak_bf16, 1/2)``, the smaller of the two gains
  (compute and bytes) the roofs promise whatever bounds the kernel, from the kernel's TF32 time
  ``t_tf32`` (``t`` for a TF32 kernel, ``t / 4`` for a float32 one, below).

Float32 kernels on CUDA cores are also ``no_tensor_cores``'s (enable TF32, ``t / 4``): for them this
rule counts what bf16 saves beyond TF32, ``max(0, t / 4 - t_bf16)``, so that the two findings never
count the same time twice and add up to the float32 to bf16 gain.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..context import Context, Process, data_dict, fmt_ns, per_step_text
from ..finding import Finding
from ..host_pace import paced_text
from ..kernel_flags import name_flags
from ..kernel_names import float32_without_tensor_cores, is_attention, is_tf32_matmul
from ..rule import Rule
from ..steady_work import ceilings, roofs_ns, steady_work
from .attention import FUSED_EFFICIENCY
from .gemm_loops import loop_op_ids
from .kernels import TARGET_EFFICIENCY, TENSOR_CORE_SPEEDUP

LARGE_SHARE = 0.25  # float32/TF32 matmul kernels under this share of the step: autocast is not proposed
MATRIX_KINDS = ("matmul", "conv", "attention")


# a kernel's class by its code: "" (neither), ``fp32`` (float32 on CUDA cores), ``tf32``; codes, not
# texts, per kernel: a run has millions, and texts compared one by one took a second
_NEITHER, _FP32, _TF32 = 0, 1, 2


def _name_class(name: str) -> int:
    """The class of a kernel by its name alone."""
    return _FP32 if float32_without_tensor_cores(name) else _TF32 if is_tf32_matmul(name) else _NEITHER


def _classes(k: pd.DataFrame, by_name: np.ndarray) -> np.ndarray:
    """Per kernel, the code of its class: ``fp32`` (float32 on CUDA cores), ``tf32``, or neither: from
    its operator's precision where known, else from its name (``by_name``: :func:`_name_class` of
    each kernel's name)."""
    out = by_name.copy()
    if not k["work_kind"].notna().any():  # no operator says (none recorded): the names say
        return out
    kind = k["work_kind"].astype(object).to_numpy()
    known = pd.Series(kind).isin(MATRIX_KINDS).to_numpy(bool)
    prec = k["precision"].astype(object).to_numpy()
    state = k["tensor_cores"].astype(object).to_numpy()
    fp32_name = out == _FP32
    fp32 = (state == "eligible-unused") | (kind == "attention") | fp32_name
    out[known] = _NEITHER  # bf16, fp16 ... by its dtypes, whatever the name says
    out[known & (prec == "fp32")] = np.where(fp32, _FP32, _TF32)[known & (prec == "fp32")]
    out[known & (prec == "tf32")] = _TF32
    return out


class Precision(Rule):
    name = "precision"
    description = ("Matmuls, convolutions and attention in float32 or TF32 that are a large part of the step: bf16 "
                   "autocast runs them at the BF16 tensor-core roof (changes numerics).")

    def evaluate(self, ctx: Context) -> list[Finding]:
        c = ceilings(ctx)
        target = "bf16" if c.peak("bf16", tensor=True) else "fp16" if c.peak("fp16", tensor=True) else None
        if target is None:
            return []
        out = []
        for p in ctx.processes:
            f = self._process(ctx, p, target)
            if f is not None:
                out.append(f)
        return out

    def _process(self, ctx: Context, p: Process, target: str) -> Finding | None:
        k = steady_work(ctx, p)
        if not len(k):
            return None
        cls = _classes(k, name_flags(ctx, p, _name_class, np.int8))
        looped = loop_op_ids(ctx, p)
        mine = (cls != _NEITHER) & ~k["op_id"].isin(looped).to_numpy(bool)
        total = p.per_step(float(k.loc[mine, "dur_ns"].sum()))
        if not mine.any() or p.share(total) < LARGE_SHARE:
            return None
        c = ceilings(ctx)
        peak_new = float(c.peak(target, tensor=True) or 0.0)
        # every kernel at once (a run has millions): the same arithmetic as one kernel at a time, and
        # the sums taken in the same order
        rows = np.flatnonzero(mine & k["critical"].to_numpy(bool))
        t = k["dur_ns"].to_numpy(np.float64)[rows]
        plain = cls[rows] == _FP32
        attention = (k["work_kind"].astype(object).to_numpy()[rows] == "attention")
        attention |= name_flags(ctx, p, is_attention)[rows]
        flops, matrix, nbytes = (k[col].to_numpy(np.float64)[rows] for col in ("flops", "matrix_flops", "bytes"))
        now = np.where(plain, roofs_ns(c, flops, matrix, nbytes, "fp32", tensor=False),
                       roofs_ns(c, flops, matrix, nbytes, "tf32", tensor=True))
        new = roofs_ns(c, flops, matrix, nbytes / 2, target, tensor=True)
        modelled_at = np.isfinite(now) & (now != 0) & np.isfinite(new) & (new != 0)
        modelled = int(modelled_at.sum())
        with np.errstate(divide="ignore", invalid="ignore"):
            t_model = np.where(attention, np.minimum(t, new / FUSED_EFFICIENCY),
                               np.maximum(t * new / now, new / TARGET_EFFICIENCY))
        base = np.where(plain, t / TENSOR_CORE_SPEEDUP, t)  # no_tensor_cores takes float32 to TF32
        # from TF32 (where no_tensor_cores leaves a float32 kernel): the smaller of the two gains
        peak_tf32 = c.peak("tf32", tensor=True)
        t_new = np.where(modelled_at, t_model,
                         base * (max(float(peak_tf32) / peak_new, 0.5) if peak_tf32 else 0.5))
        saving = float(np.cumsum(np.maximum(0.0, base - t_new))[-1]) if len(rows) else 0.0
        waited = float(np.cumsum(t)[-1]) if len(rows) else 0.0
        ns = p.per_step(saving)
        if p.share(ns) < ctx.min_share:
            return None
        # the steps replayed with these kernels at their TF32 times, then at their new ones
        ids, recorded = k["op_id"].to_numpy()[rows], np.where(t > 0, t, 1.0)
        replayed, paced = paced_text(ctx, p, pd.Series(np.minimum(t_new, base) / recorded, index=ids), ns,
                                     f"these kernels at their estimated {target} times",
                                     before=pd.Series(base / recorded, index=ids))
        return self._finding(ctx, p, k, cls, mine, ns, total, p.per_step(waited), modelled, target, replayed, paced)

    def _finding(self, ctx: Context, p: Process, k: pd.DataFrame, cls: np.ndarray, mine: np.ndarray, ns: float,
                 total: float, waited: float, modelled: int, target: str, replayed: float | None,
                 paced: str) -> Finding:
        c = ceilings(ctx)
        sel = k[mine]
        plain = p.per_step(float(sel.loc[cls[mine] == _FP32, "dur_ns"].sum()))
        tf32 = p.per_step(float(sel.loc[cls[mine] == _TF32, "dur_ns"].sum()))
        top = sel.groupby("name")["dur_ns"].sum().sort_values(ascending=False).head(3)
        label = "bf16" if target == "bf16" else "float16"
        roofs = ", ".join(f"{name} {float(v) / 1e12:.0f}" for name, v in (
            ("FP32", c.peak("fp32", False)), ("TF32", c.peak("tf32", True)), (label.upper(), c.peak(target, True))) if v)
        evidence = [
            f"float32 matmul, convolution and attention kernels take {per_step_text(p, total)}: "
            f"{fmt_ns(plain)} on CUDA cores (float32), {fmt_ns(tf32)} on tensor cores in TF32",
            "top: " + "; ".join(f"{str(n)[:80]} ({fmt_ns(p.per_step(float(t)))})" for n, t in top.items()),
            f"roofs of {c.device} (TFLOP/s): {roofs}; DRAM {float(c.dram_bytes_per_s or 0) / 1e12:.2f} TB/s",
            (f"estimate: {modelled} kernel launches by their FLOPs and bytes at the {label.upper()} roof (keeping "
             f"their share of the roof, at most {TARGET_EFFICIENCY:.0%}; attention at {FUSED_EFFICIENCY:.0%} as "
             "flash), the others by the ratio of the roofs"
             if modelled else
             "estimate: by the ratio of the roofs of the two precisions (record operator shapes, --trace "
             "torch-shapes, for a model from their FLOPs and bytes)")
            + f", for the {fmt_ns(waited)} per step the step waits on",
        ]
        if plain:
            evidence.append("for the float32 kernels on CUDA cores, counted beyond what TF32 saves (no_tensor_cores "
                            f"counts that: {TENSOR_CORE_SPEEDUP:.0f}x)")
        if paced:
            evidence.append(paced)
        op_ids = k.loc[mine, "op_id"].astype(int).tolist()
        location = ctx.kernel_location(p, ctx.steady_kernels(p)[0], op_ids, "float32 matmul and convolution layers")
        fix = (f"Run the forward pass under torch.autocast('cuda', dtype=torch.{'bfloat16' if target == 'bf16' else 'float16'})"
               " (the backward follows it; keep the loss and the optimizer as they are). This changes numerics: "
               f"{label} keeps 8 bits of mantissa, so compare the loss curve or the accuracy with the float32 run.")
        if target == "fp16":
            fix += " Train float16 with torch.amp.GradScaler."
        return Finding(
            rule=self.name, pid=p.pid, saving_ns=ns, share=p.share(ns),
            title=f"Float32 matmuls and convolutions ({fmt_ns(total)} {p.unit}): {label} autocast would run them at "
                  f"the {label.upper()} tensor-core roof (changes numerics)",
            evidence=evidence, location=location, fix=fix,
            data=data_dict(saving_ns=ns, kernel_ns=total, critical_ns=waited, float32_ns=plain, tf32_ns=tf32, modelled_launches=modelled,
                           target=target, replayed_ns=replayed),
        )
