"""The fixes gpuscope can apply from outside a program, and which diagnosis findings each answers.

A :class:`Fix` is a switch: environment variables set for the launched process, and/or a patch that
the bootstrap installs there before the program's first line (``patch``: its name in
:mod:`..capture.trial`). ``rules`` are the diagnosis rules whose findings it answers; ``changes_numerics``
says the program computes in another precision with it (its results are compared with a looser
tolerance, ``precision``). Findings of the other rules need an edit of the program and are listed
as not tried, with the line the finding names.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..analysis.diagnosis.finding import Finding
from ..errors import GpuscopeError

DEFAULT_WORKERS = 4  # DataLoader workers where the finding does not say how many


def _workers(finding: Finding | None) -> dict[str, Any]:
    """The DataLoader settings for ``finding``: its own count of workers (the data_loader finding's), else
    at most :data:`DEFAULT_WORKERS`, one core left to the loop."""
    named = int((finding.data if finding else {}).get("workers") or 0)
    cores = os.cpu_count() or 2
    return {"num_workers": named or max(1, min(DEFAULT_WORKERS, cores - 1)), "prefetch_factor": 4}


def _fragmented(finding: Finding) -> bool:
    return bool(finding.data.get("fragmentation"))


@dataclass(frozen=True)
class Fix:
    """One fix applied from outside the program."""

    name: str
    title: str  # what it does, as code a user would write
    rules: tuple[str, ...]  # the diagnosis rules whose findings it answers
    patch: str | None = None  # the start-up patch of inprocess.py, if any
    env: dict[str, str] = field(default_factory=dict)  # variables set (PYTORCH_CUDA_ALLOC_CONF: merged)
    changes_numerics: bool = False
    precision: str | None = None  # the precision it computes in, for the tolerance of the comparison
    params: Callable[[Finding | None], dict[str, Any]] | None = None  # settings taken from the finding
    answers: Callable[[Finding], bool] | None = None  # a finding of its rules it does not answer: False

    @property
    def how(self) -> str:
        """How it is applied, in words."""
        parts = [f"{k}={v}" for k, v in self.env.items()]
        if self.patch:
            parts.append("patched in at start-up")
        return "; ".join(parts)

    def applies_to(self, finding: Finding) -> bool:
        """Whether this fix answers ``finding``."""
        return finding.rule in self.rules and (self.answers is None or self.answers(finding))

    def settings(self, finding: Finding | None) -> dict[str, Any]:
        """The patch's settings for the finding it answers (None: named with ``--fix``)."""
        return self.params(finding) if self.params is not None else {}

    def as_dict(self) -> dict[str, Any]:
        """Plain data of the declaration."""
        return {"name": self.name, "title": self.title, "rules": list(self.rules), "how": self.how,
                "changes_numerics": self.changes_numerics}


FIXES: tuple[Fix, ...] = (
    Fix("tf32", 'torch.set_float32_matmul_precision("high"); cudnn.allow_tf32 = True',
        ("no_tensor_cores", "precision"), patch="tf32", changes_numerics=True, precision="tf32"),
    Fix("cudnn_benchmark", "torch.backends.cudnn.benchmark = True", ("below_roofline", "channels_last"),
        patch="cudnn_benchmark"),
    Fix("bf16_autocast", "torch.autocast(bfloat16) around the model's top-level forward",
        ("precision", "no_tensor_cores"), patch="bf16_autocast", changes_numerics=True, precision="bfloat16"),
    Fix("dataloader_workers", "DataLoader(num_workers=N, persistent_workers=True, prefetch_factor=4, "
        "pin_memory=True on a GPU); torch.set_num_threads(cores - N) where PyTorch's threads and the workers "
        "outnumber the cores", ("data_loader",), patch="dataloader", params=_workers),
    Fix("pin_memory", "DataLoader(pin_memory=True)", ("pageable_copies",), patch="pin_memory"),
    Fix("compile", "torch.compile(model)", ("unfused_elementwise", "launch_bound"), patch="compile"),
    Fix("compile_reduce_overhead", 'torch.compile(model, mode="reduce-overhead")', ("launch_bound",),
        patch="compile_reduce_overhead"),
    Fix("channels_last", "model and 4-D inputs in torch.channels_last", ("channels_last",), patch="channels_last"),
    Fix("expandable_segments", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", ("out_of_memory",),
        env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, answers=_fragmented),
)
BY_NAME = {f.name: f for f in FIXES}


def fix_named(name: str) -> Fix:
    """The fix called ``name``; GpuscopeError naming the known ones otherwise."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise GpuscopeError(f"unknown fix {name!r}; choose from {', '.join(BY_NAME)}") from None


def fixes_for(finding: Finding) -> list[Fix]:
    """The fixes that answer ``finding``, in registry order (none: it needs a code change)."""
    return [f for f in FIXES if f.applies_to(finding)]


@dataclass(frozen=True)
class Planned:
    """A fix to try: with the finding it answers best (the largest estimated saving), if any."""

    fix: Fix
    finding: Finding | None
    settings: dict[str, Any]

    @property
    def estimate(self) -> float | None:
        """The estimated gain: the share of the step the finding says it saves (None: no finding)."""
        return self.finding.share if self.finding is not None else None


@dataclass(frozen=True)
class Plan:
    """What ``try`` runs: the fixes, and the top findings that need an edit of the program."""

    tried: list[Planned]
    needs_edit: list[Finding]


def actionable(findings: Iterable[Finding]) -> list[Finding]:
    """The findings a fix of the steady step could answer, ranked as the diagnosis ranked them."""
    return [f for f in findings if not (f.advisory or f.work_changing or f.one_time)]


def plan(findings: list[Finding], top: int, named: list[str] | None = None) -> Plan:
    """The fixes for the ``top`` actionable findings (or the fixes ``named``, each with the best
    finding of the whole diagnosis it answers), and the top findings no fix answers."""
    ranked = actionable(findings)
    chosen: dict[str, Planned] = {}
    needs_edit: list[Finding] = []
    if named:
        for name in named:
            fix = fix_named(name)
            best = max((f for f in ranked if fix.applies_to(f)), key=lambda f: f.share, default=None)
            chosen.setdefault(name, Planned(fix, best, fix.settings(best)))
        return Plan(list(chosen.values()), [])
    for finding in ranked[:top]:
        fixes = fixes_for(finding)
        if not fixes:
            needs_edit.append(finding)
        for fix in fixes:
            have = chosen.get(fix.name)
            if have is None or (have.finding is not None and finding.share > have.finding.share):
                chosen[fix.name] = Planned(fix, finding, fix.settings(finding))
    return Plan(list(chosen.values()), needs_edit)
