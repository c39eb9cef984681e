"""GPU memory far from full: a larger batch would fit and spread each step's fixed costs."""

from __future__ import annotations

from ..context import Context, data_dict, fmt_bytes, fmt_ns
from ..finding import Finding
from ..rule import Rule

MOSTLY_UNUSED = 0.5  # peak use below this share of the memory
HEADROOM = 0.8  # share of the memory a larger batch may plan to fill
MAX_FACTOR = 4


class GpuMemory(Rule):
    name = "gpu_memory"
    description = ("GPU memory far from full (NVML's used memory against the device's): a larger batch would fit, "
                   "and the per-step costs that do not grow with the batch (launch overhead, host syncs) would be "
                   "spread over more samples.")
    needs = ("gpu", "nvml")

    def evaluate(self, ctx: Context) -> list[Finding]:
        peaks = dict(ctx.report.sql(
            """SELECT CAST(regexp_extract(name, 'gpu(\\d+)\\.', 1) AS INTEGER), max(value) FROM host_counter
               WHERE name LIKE 'gpu%.memory_used_bytes' GROUP BY ALL"""))
        totals = dict(ctx.report.sql("SELECT id, max(global_memory_bytes) FROM device GROUP BY id"))
        out = []
        for p in ctx.processes:
            devices = sorted(int(d) for d in p.timeline.ops["device_id"].dropna().unique())
            for device in devices:
                peak, total = peaks.get(device), totals.get(device)
                if not peak or not total or peak >= MOSTLY_UNUSED * total:
                    continue
                factor = max(2, min(MAX_FACTOR, int(HEADROOM * total / peak)))
                parts = p.breakdown.mean_parts()
                fixed = parts["idle_launch"] + parts["idle_sync"]
                ns = fixed * (1 - 1 / factor)
                if p.share(ns) < ctx.min_share:
                    continue
                out.append(Finding(
                    rule=self.name, pid=p.pid, saving_ns=ns, share=p.share(ns),
                    title=f"GPU {device} memory mostly unused: peak {fmt_bytes(peak)} of {fmt_bytes(total)} "
                          f"({peak / total:.0%}); a {factor}x larger batch fits",
                    evidence=[f"peak memory in use (NVML, all processes) {fmt_bytes(peak)} of {fmt_bytes(total)}",
                              f"per step the GPU idles {fmt_ns(fixed)} on launch overhead and host syncs, costs "
                              "that do not grow with the batch (CPU work, which often does, is left out)",
                              f"estimate: with a {factor}x batch they are spread over {factor}x the samples "
                              "(saving per sample, as a share of the step)"],
                    location="the batch size",
                    fix=(f"Increase the batch size (about {factor}x fits; scale the learning rate or use fewer "
                         "gradient-accumulation steps), or use the room for a larger model or longer sequences."),
                    data=data_dict(peak_bytes=float(peak), total_bytes=float(total), factor=factor, saving_ns=ns),
                ))
        return out
