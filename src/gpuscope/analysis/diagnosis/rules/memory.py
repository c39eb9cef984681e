"""GPU memory far from full: a larger batch would fit and spread each step's fixed costs."""

from __future__ import annotations

from ...memory.peak import peak_bytes
from ..context import Context, data_dict, fmt_bytes, fmt_ns
from ..finding import Finding
from ..rule import Rule
from .idle import graph_capturable

MOSTLY_UNUSED = 0.5  # peak use below this share of the memory
HEADROOM = 0.8  # share of the memory a larger batch may plan to fill
MAX_FACTOR = 4


class GpuMemory(Rule):
    name = "gpu_memory"
    description = ("GPU memory far from full (the program's own peak reserved memory with --trace memory, else "
                   "NVML's used memory of all processes, against the device's): a larger batch would fit, and the "
                   "per-step costs that do not grow with the batch (launch overhead, host syncs) would be spread "
                   "over more samples.")
    needs = ("gpu",)

    def skip(self, ctx: Context) -> str | None:
        """Skipped without GPU work, or without the program's memory peak and NVML's counters alike."""
        reason = super().skip(ctx)
        if reason or _own_peaks(ctx):
            return reason
        return ctx.missing("nvml")

    def evaluate(self, ctx: Context) -> list[Finding]:
        own = _own_peaks(ctx)
        peaks = dict(ctx.report.sql(
            """SELECT CAST(regexp_extract(name, 'gpu(\\d+)\\.', 1) AS INTEGER), max(value) FROM host_counter
               WHERE name LIKE 'gpu%.memory_used_bytes' GROUP BY ALL"""))
        totals = dict(ctx.report.sql("SELECT id, max(global_memory_bytes) FROM device GROUP BY id"))
        out = []
        for p in ctx.processes:
            devices = sorted(int(d) for d in p.timeline.ops["device_id"].dropna().unique())
            for device in devices:
                peak, total = own.get((p.pid, device), peaks.get(device)), totals.get(device)
                source = ("the program's own peak reserved by PyTorch's allocator" if (p.pid, device) in own
                          else "NVML, all processes")
                if not peak or not total or peak >= MOSTLY_UNUSED * total:
                    continue
                factor = max(2, min(MAX_FACTOR, int(HEADROOM * total / peak)))
                parts = p.breakdown.mean_parts()
                step = p.base_ns  # the step without the profiler: its host parts less what collection added
                busy = sum(v for k, v in parts.items() if k.startswith("busy_"))
                _, _, graphed = graph_capturable(ctx, p)
                framework = p.per_step(float(graphed.sum()))
                own_cpu = p.own(max(0.0, parts["idle_cpu"] - framework))
                # what grows with the batch: GPU work, loading data and the program's own per-sample code;
                # what does not: launching, PyTorch's own code, synchronizations
                grows = own_cpu + p.own(parts["idle_data"]) + parts["idle_transfer"]
                fixed = max(0.0, step - busy - grows)
                bigger = max(factor * busy, fixed) + factor * grows
                share = max(0.0, 1 - bigger / (factor * step)) if step else 0.0
                ns = share * step
                if share < ctx.min_share:
                    continue
                out.append(Finding(
                    rule=self.name, pid=p.pid, saving_ns=ns, share=p.share(ns), work_changing=True,
                    title=f"GPU {device} memory mostly unused: peak {fmt_bytes(peak)} of {fmt_bytes(total)} "
                          f"({peak / total:.0%}); a {factor}x larger batch fits",
                    evidence=[f"peak memory in use ({source}) {fmt_bytes(peak)} of {fmt_bytes(total)}",
                              f"per step the GPU works {fmt_ns(busy)}, and idles {fmt_ns(fixed)} on launch overhead, "
                              "PyTorch's own code and host syncs, which do not grow with the batch",
                              f"estimate: a {factor}x batch step takes max({factor} x GPU work, the fixed host time) "
                              f"plus {factor}x the data loading and per-sample host work: {fmt_ns(bigger)} for "
                              f"{factor}x the samples, {share:.0%} less time per sample; this changes the work, "
                              "so it is ranked apart"],
                    location="the batch size",
                    fix=(f"Increase the batch size (about {factor}x fits; scale the learning rate or use fewer "
                         "gradient-accumulation steps), or use the room for a larger model or longer sequences."),
                    data=data_dict(peak_bytes=float(peak), total_bytes=float(total), factor=factor, saving_ns=ns,
                                   per_sample_share=round(share, 4)),
                ))
        return out


def _own_peaks(ctx: Context) -> dict[tuple[int, int], int]:
    """The program's own peak per (pid, GPU) from its memory events: the highest of reserved and allocated."""
    key = ("gpu_memory", "own_peaks")
    if key not in ctx.cache:
        reserved = {(int(p), int(d)): int(v) for p, d, v in ctx.report.sql(
            """SELECT pid, device_id, max(reserved_bytes) FROM memory_event
               WHERE device_id >= 0 AND reserved_bytes IS NOT NULL GROUP BY ALL""")}
        allocated = {k: v for k, v in peak_bytes(ctx.report).items() if k[1] >= 0}
        # the larger of PyTorch's reserved memory and the CUDA-level allocations (CUPTI's records, other libraries')
        ctx.cache[key] = {k: max(allocated.get(k, 0), reserved.get(k, 0)) for k in allocated.keys() | reserved.keys()}
    return ctx.cache[key]
