"""The rules of the CPU-side diagnosis (reports without GPU operations), in the order they run.
Adding one: a :class:`.base.CpuRule` subclass in a module here, and a line below."""

from __future__ import annotations

from .base import CpuRule
from .data_loader import CpuDataLoader
from .hot_line import CpuHotLine
from .idle_cores import CpuIdleCores
from .startup import CpuStartup
from .straggler import CpuStraggler

CPU_RULES: list[CpuRule] = [
    CpuStraggler(),
    CpuDataLoader(),
    CpuHotLine(),
    CpuIdleCores(),
    CpuStartup(),
]

__all__ = ["CPU_RULES", "CpuRule"]
