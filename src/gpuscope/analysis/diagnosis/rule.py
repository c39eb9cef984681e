"""The shape of a diagnosis rule: a name, a description, the side of a report it reads, the data it
needs, ``skip`` and ``evaluate``.

A report with GPU operations is read on its GPU side (:class:`.context.Context`: each step split
into GPU busy time by bound class and GPU idle time by cause); a report without them on its CPU
side (:class:`.cpu_context.CpuContext`: each step's wall time split into data loading, forward,
backward, optimizer and other Python). A rule names the sides it reads in ``sides``; a rule whose
fix exists on both (data loading, a straggler rank) is one rule that reads either.

To add a rule, subclass :class:`Rule` in a module of ``rules/`` and list it in ``rules.RULES``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from .context import Context, Process
    from .finding import Finding

GPU = "gpu"  # the side of a report with GPU operations
CPU = "cpu"  # the side of a report without them


class Rule:
    """A diagnosis rule. ``sides`` are the sides of a report it reads (:data:`GPU`, :data:`CPU`);
    ``needs`` names data of the context's ``missing`` (on the GPU side ``gpu``, ``steps``, ``torch``,
    ``cpu_samples``, ``nvml``, ``roofline``; on the CPU side ``cpu_samples``, ``torch``,
    ``torch_ops``, ``host``, ``steps``); a rule whose data is missing is skipped with the reason, and
    the other rules still run."""

    name: ClassVar[str]
    description: ClassVar[str]
    sides: ClassVar[tuple[str, ...]] = (GPU,)
    needs: ClassVar[tuple[str, ...]] = ("gpu",)

    def needs_on(self, side: str) -> tuple[str, ...]:
        """The data the rule needs on ``side`` (by default ``needs`` on either)."""
        return self.needs

    def skip(self, ctx: Any) -> str | None:
        """Return why the rule cannot run on this report (one line), or None when it can."""
        for need in self.needs_on(ctx.side):
            reason = ctx.missing(need)
            if reason:
                return reason
        return None

    def evaluate(self, ctx: Any) -> list[Finding]:
        """Return the findings of this rule (empty when it finds nothing worth fixing)."""
        raise NotImplementedError


class ProcessRule(Rule):
    """A rule that judges each process on its own: at most one finding per process (:meth:`process`)."""

    def evaluate(self, ctx: Context) -> list[Finding]:
        """Return the finding of each process that has one."""
        return [f for f in (self.process(ctx, p) for p in ctx.processes) if f is not None]

    def process(self, ctx: Context, p: Process) -> Finding | None:
        """Return the finding of process ``p``, or None."""
        raise NotImplementedError
