"""Rules on the kernels themselves: float32 matmuls off the tensor cores, and kernels far below
their roofline. Savings count only *critical* kernel time (:mod:`..breakdown`): a kernel the GPU
did not wait behind would only leave a longer gap when made faster."""

from __future__ import annotations

import pandas as pd

from ..context import Context, data_dict, fmt_ns
from ..finding import Finding
from ..host_pace import paced_text
from ..kernel_names import float32_without_tensor_cores, is_attention
from ..rule import Rule
from .gemm_loops import loop_op_ids

TENSOR_CORE_SPEEDUP = 4.0  # float32 on CUDA cores -> TF32/bf16 on tensor cores, typical for GEMMs (peak 7-8x)
LOW_EFFICIENCY = 0.3  # a kernel below this share of its roofline is "far below"
TARGET_EFFICIENCY = 0.6  # what a well-tuned kernel of the same class reaches
TOP = 3


def _critical_time(ctx: Context, pid_ops: pd.DataFrame) -> pd.Series:
    """Critical steady time per kernel name."""
    k = pid_ops[(pid_ops["kind"] == "kernel") & pid_ops["critical"].fillna(False).astype(bool)]
    return k.groupby("name", observed=True)["steady_ns"].sum()


class NoTensorCores(Rule):
    name = "no_tensor_cores"
    description = ("Float32 matmuls, convolutions and attention running on CUDA cores (sgemm, ffma, simt "
                   "kernels; or the roofline's 'eligible-unused'): TF32 or bf16 would use the tensor cores.")

    def evaluate(self, ctx: Context) -> list[Finding]:
        eligible: set[str] = set()
        if ctx.roofline is not None and "tensor_cores" in ctx.roofline:
            points = ctx.roofline
            eligible = set(points.loc[points["tensor_cores"] == "eligible-unused", "name"].astype(str))
        out = []
        for p in ctx.processes:
            ops = ctx.ops(p)
            ops = ops[~ops["op_id"].isin(loop_op_ids(ctx, p))]
            names = [n for n in ops.loc[ops["kind"] == "kernel", "name"].unique()
                     if n in eligible or float32_without_tensor_cores(n)]
            if not names:
                continue
            mine = ops[ops["name"].isin(names)]
            critical = _critical_time(ctx, mine)
            ns = p.per_step(float(critical.sum()) * (1 - 1 / TENSOR_CORE_SPEEDUP))
            if p.share(ns) < ctx.min_share:
                continue
            faster = pd.Series(1 / TENSOR_CORE_SPEEDUP, index=mine["op_id"].to_numpy())
            replayed, paced = paced_text(ctx, p, faster, ns,
                                         f"these kernels at {1 / TENSOR_CORE_SPEEDUP:.0%} of their time")
            total = p.per_step(float(mine["steady_ns"].sum()))
            busy = p.breakdown.mean_parts()
            busy_ns = sum(v for k, v in busy.items() if k.startswith("busy_"))
            top = mine.groupby("name", observed=True)["steady_ns"].sum().sort_values(ascending=False).head(TOP)
            attention = any(is_attention(n) for n in top.index)
            where = ctx.top_launch_range(mine["op_id"].to_numpy(), mine["steady_ns"].to_numpy(dtype="float64"))
            evidence = [f"{len(names)} float32 matmul kernels (by name) on CUDA cores take {fmt_ns(total)} per step, "
                        f"{total / busy_ns:.0%} of GPU busy time" if busy_ns else "",
                        "top: " + "; ".join(f"{n[:80]} ({fmt_ns(p.per_step(float(t)))})" for n, t in top.items()),
                        f"estimate: {TENSOR_CORE_SPEEDUP:.0f}x faster on tensor cores, for the "
                        f"{fmt_ns(p.per_step(float(critical.sum())))} per step the step waits on", paced]
            fix = ("Allow TF32 for float32 matmuls: torch.backends.cuda.matmul.allow_tf32 = True (or "
                   "torch.set_float32_matmul_precision('high')) and torch.backends.cudnn.allow_tf32 = True; "
                   "or run the model under torch.autocast('cuda', dtype=torch.bfloat16).")
            if attention:
                fix += " Attention in float32 stays on CUDA cores even with TF32: autocast to bf16 for flash attention."
            out.append(Finding(
                rule=self.name, pid=p.pid, saving_ns=ns, share=p.share(ns),
                title=f"Float32 matmuls without tensor cores: {fmt_ns(total)} {p.unit}",
                evidence=[e for e in evidence if e], location=f"launched mostly in {where}" if where else
                "float32 matmul layers", fix=fix,
                data=data_dict(kernel_ns=total, critical_ns=p.per_step(float(critical.sum())), saving_ns=ns,
                               kernels=list(top.index), replayed_ns=replayed),
            ))
        return out


_ROOF_FIX = {
    "memory": ("Move fewer bytes: fuse it with its neighbours (torch.compile), keep tensors contiguous, "
               "use bf16/fp16 activations; check for strided or uncoalesced access."),
    "compute": "Use tensor cores (TF32/bf16) and shapes that are multiples of 8/16; check the kernel's occupancy.",
    "latency": ("Give it more parallel work: a larger batch, fusing it with neighbouring kernels, or fewer "
                "dependent small launches (occupancy is low)."),
}


class BelowRoofline(Rule):
    name = "below_roofline"
    description = ("Kernels that reach under 30% of their roofline (attainable FLOP/s at their arithmetic "
                   "intensity): memory-bound, compute-bound or latency-bound ones with room to improve.")
    needs = ("gpu", "roofline")

    def evaluate(self, ctx: Context) -> list[Finding]:
        points = ctx.roofline
        assert points is not None
        low = points[(points["efficiency"] < LOW_EFFICIENCY) & points["bound"].isin(list(_ROOF_FIX))]
        low = low.sort_values("time_ns", ascending=False).drop_duplicates("name")
        out = []
        for p in ctx.processes:
            critical = _critical_time(ctx, ctx.ops(p))
            found = []
            for row in low.itertuples():
                crit = p.per_step(float(critical.get(str(row.name), 0.0)))
                ns = crit * (1 - float(row.efficiency) / TARGET_EFFICIENCY)
                if p.share(ns) >= ctx.min_share:
                    found.append((ns, crit, row))
            for ns, crit, row in sorted(found, key=lambda x: -x[0])[:TOP]:
                layer = getattr(row, "layer", None)
                out.append(Finding(
                    rule=self.name, pid=p.pid, saving_ns=ns, share=p.share(ns),
                    title=f"{row.bound.capitalize()}-bound kernel at {row.efficiency:.0%} of its roofline: "
                          f"{str(row.name)[:70]}",
                    evidence=[f"{int(row.kernels)} launches, {fmt_ns(float(row.time_ns))} in all; the step waits on "
                              f"{fmt_ns(crit)} of it per step",
                              f"arithmetic intensity {float(row.intensity):.2f} FLOP/byte, "
                              f"{float(row.achieved_flops_per_s) / 1e12:.2f} of "
                              f"{float(row.attainable_flops_per_s) / 1e12:.2f} TFLOP/s attainable",
                              f"estimate: reaching {TARGET_EFFICIENCY:.0%} of the roofline"],
                    location=str(layer) if layer and pd.notna(layer) else str(row.name)[:80],
                    fix=_ROOF_FIX[str(row.bound)],
                    data=data_dict(saving_ns=ns, efficiency=float(row.efficiency), bound=str(row.bound)),
                ))
        return out
