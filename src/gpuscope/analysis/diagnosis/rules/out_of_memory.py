"""The program ran out of GPU memory: what was live, by layer, and what would have fit, with numbers."""

from __future__ import annotations

from ...memory.oom import oom_states
from ..context import Context, data_dict, fmt_bytes
from ..finding import Finding
from ..rule import Rule


class OutOfMemory(Rule):
    name = "out_of_memory"
    description = ("The program ran out of GPU memory (recorded with --trace memory): the request, the memory "
                   "free, reserved and allocated at the failure, the layers holding most, and what would fit: "
                   "expandable_segments where fragmentation is the cause, activation checkpointing of the "
                   "layers that hold most, or a smaller micro-batch with gradient accumulation.")
    needs = ("gpu",)

    def skip(self, ctx: Context) -> str | None:
        """Skipped without GPU work or without an out-of-memory error."""
        reason = super().skip(ctx)
        if reason or ctx.report.count("memory_oom"):
            return reason
        hint = ctx.report.not_recorded().get("memory")
        return f"no out-of-memory state in this report: {hint}" if hint else "the program did not run out of memory"

    def evaluate(self, ctx: Context) -> list[Finding]:
        out = []
        for s in oom_states(ctx.report):
            evidence = [f"asked for {fmt_bytes(s.requested)} with {fmt_bytes(s.free)} free on GPU {s.device} "
                        f"(of {fmt_bytes(s.total)}); PyTorch held {fmt_bytes(s.reserved)}, of which "
                        f"{fmt_bytes(s.allocated)} in use and {fmt_bytes(s.cached_unused)} cached but unused"]
            evidence += [f"held by {name}: {fmt_bytes(b)}" for name, b in s.by_layer[:5]]
            evidence += [f"live: {fmt_bytes(x.nbytes)} from {x.layer}" + (f" at {x.location}" if x.location else "")
                         for x in s.live[:5]]
            fixes = []
            if s.fragmentation:
                fixes.append(f"Fragmentation is the cause: {fmt_bytes(s.cached_unused)} was cached but unused, "
                             "enough with the free memory; set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.")
            elif s.shortfall:
                layers = s.checkpoint_layers()
                if layers:
                    names = ", ".join(n for n, _ in layers)
                    fixes.append(f"Activation checkpointing of {names} (torch.utils.checkpoint) frees up to "
                                 f"{fmt_bytes(sum(b for _, b in layers))}, against the {fmt_bytes(s.shortfall)} "
                                 "missing.")
                k = s.micro_batch_divisor()
                if k is not None and k > 1:
                    fixes.append(f"A micro-batch of 1/{k} of the batch with {k} gradient-accumulation steps fits "
                                 f"(what grows with the batch, {fmt_bytes(s.requested)} asked plus the layers' "
                                 f"activations, over {k}).")
                if not fixes:
                    fixes.append(f"The request alone exceeds what the GPU could give ({fmt_bytes(s.shortfall)} "
                                 "missing): shrink that tensor (its shape, dtype) or shard it.")
            out.append(Finding(
                rule=self.name, pid=s.pid, saving_ns=0.0, share=0.0, advisory=True,
                title=f"out of GPU {s.device} memory: {fmt_bytes(s.requested)} asked, "
                      f"{fmt_bytes(s.shortfall)} missing",
                evidence=evidence, location=s.live[0].layer if s.live else "the allocation that failed",
                fix=" ".join(fixes),
                data=data_dict(requested_bytes=float(s.requested), free_bytes=float(s.free),
                               reserved_bytes=float(s.reserved), allocated_bytes=float(s.allocated),
                               shortfall_bytes=float(s.shortfall), fragmentation=s.fragmentation,
                               micro_batch_divisor=s.micro_batch_divisor(),
                               checkpoint=[n for n, _ in s.checkpoint_layers()],
                               held_by_layer={n: float(b) for n, b in s.by_layer[:10]}),
            ))
        return out
