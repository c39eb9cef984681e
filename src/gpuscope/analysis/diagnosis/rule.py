"""The shape of a diagnosis rule: a name, a description, the data it needs, ``skip`` and ``evaluate``.

To add a rule, subclass :class:`Rule` in a module of ``rules/`` and list it in ``rules.RULES``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from .context import Context, Process
    from .finding import Finding


class Rule:
    """A diagnosis rule. ``needs`` names data of :meth:`Context.missing` (``gpu``, ``steps``,
    ``torch``, ``cpu_samples``, ``nvml``, ``roofline``); a rule whose data is missing is skipped with
    the reason, and the other rules still run."""

    name: ClassVar[str]
    description: ClassVar[str]
    needs: ClassVar[tuple[str, ...]] = ("gpu",)

    def skip(self, ctx: Context) -> str | None:
        """Return why the rule cannot run on this report (one line), or None when it can."""
        for need in self.needs:
            reason = ctx.missing(need)
            if reason:
                return reason
        return None

    def evaluate(self, ctx: Context) -> list[Finding]:
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
