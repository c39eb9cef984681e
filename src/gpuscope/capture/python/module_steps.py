"""Which steps record PyTorch module ranges: all of the first ones, then one in every few.

A module range costs the program about 12 µs per module call on an H100 host (the wrapper, two
clock reads and two launch anchors, and the pairing of the log by the flush thread under the GIL;
bench/results/real_clients.md). A Hugging Face model calls hundreds of modules per token, so that
ranges in every step made ``generate`` a fifth slower. Layers repeat from step to step as kernels
do, so the ranges of some steps tell where the GPU time of every step goes: ranges are recorded in
the first ``first`` steps (warm-up and the first steady ones), then in one step of every ``every``.
Outside those steps the wrapper passes every call straight to PyTorch but the outermost one on the
main thread, which is a range of category ``model`` (torch_hooks.OUTER): the time the host spent in
the model, which the diagnosis reads in every step (the launch-bound rule tells PyTorch's own code
from the program's by it, the CPU breakdown counts it as forward time), without the layers inside.

Steps are counted as the capture window counts them (process/window.py): the program's own step
marks (``gpuscope.step()``, else optimizer steps), or, in a program with neither, its outermost
module calls; a better source starting the count again starts the first steps again. The layer
tables read only the steps that have module ranges (analysis/ranges/layers.py), and the summary says how
many steps had them.

``GPUSCOPE_MODULE_STEPS``: ``all`` records every step; ``sample`` records the first 20 steps and then
one in 10; ``first=N,every=M`` sets both. The default samples where CUPTI records the GPU's work
(the layers' GPU time comes from kernels, which repeat) and records every step on the CPU alone
(there the layers' time comes from the Python samples taken inside their ranges, which are sparse
already). Standard library only; nothing here raises into the program.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

POLICY_ENV = "GPUSCOPE_MODULE_STEPS"


@dataclass(frozen=True)
class ModuleSteps:
    """Record module ranges in steps ``0 .. first - 1``, then in step ``first + k * every``."""

    first: int = 20
    every: int = 10

    @property
    def all(self) -> bool:
        return self.every <= 1

    def records(self, step: int) -> bool:
        """Whether the step numbered ``step`` (0 for the first) records module ranges."""
        return self.all or step < self.first or (step - self.first) % self.every == 0

    def describe(self) -> str:
        return "every step" if self.all else f"the first {self.first} steps, then one in {self.every}"

    @classmethod
    def parse(cls, text: str) -> ModuleSteps:
        """``all``, or ``first=N,every=M`` (either may be left out); ValueError on anything else."""
        text = text.strip().lower()
        if text in ("all", "every", "1"):
            return cls(first=0, every=1)
        if text == "sample":
            return cls()
        values = {"first": cls.first, "every": cls.every}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, _, value = part.partition("=")
            if key.strip() not in values or not value.strip().isdigit():
                raise ValueError(f"{POLICY_ENV}: expected 'all', 'sample' or 'first=N,every=M', got {text!r}")
            values[key.strip()] = int(value)
        return cls(first=values["first"], every=max(values["every"], 1))


DEFAULT = ModuleSteps(first=0, every=1)  # every step: on the CPU alone
SAMPLED = ModuleSteps()  # the first 20 steps, then one in 10: where CUPTI records the GPU's work


def from_env(diag: Callable[[str, str], None], default: ModuleSteps = DEFAULT) -> ModuleSteps:
    """The policy of ``GPUSCOPE_MODULE_STEPS``, or ``default`` (said as a warning where it is wrong)."""
    text = os.environ.get(POLICY_ENV)
    if not text:
        return default
    try:
        return ModuleSteps.parse(text)
    except ValueError as exc:
        diag("warning", f"{exc}; using the default ({default.describe()})")
        return default


class StepGate:
    """Counts the steps and says, at each step's end, whether the next one records module ranges."""

    def __init__(self, policy: ModuleSteps) -> None:
        self.policy = policy
        self.on = policy.records(0)
        self.steps = 0  # steps ended, as counted now
        self.recorded = 0  # steps ended that recorded module ranges (over every count, restarts included)
        self.ended = 0  # steps ended (over every count)

    def step_ended(self, count: int) -> bool:
        """The step numbered ``count - 1`` of the current count ended (the window's count after it, which
        starts again at a better step source); return whether the next step records ranges."""
        self.ended += 1
        self.recorded += self.on
        self.steps = count
        self.on = self.policy.records(count)
        return self.on

    def counts(self) -> dict[str, int]:
        """For the ``ranges`` collector row: steps ended, those with module ranges, and the policy."""
        return {"module_steps": self.ended, "module_steps_recorded": self.recorded,
                "module_steps_first": self.policy.first, "module_steps_every": self.policy.every}
