"""The diagnosis rules, one per fix, in the order they run (GEMM loops before the idle rules that
leave their gaps to them). Each reads the sides of a report it names (``sides``: with GPU work,
without, or both). Adding a rule: a :class:`..rule.Rule` subclass in a module here, and a line below."""

from __future__ import annotations

from ..rule import Rule
from .attention import FusedAttention, SdpaBackend
from .copies import PageableCopies, StreamOverlap, SyncCopies
from .data_loader import DataLoading
from .fusion import UnfusedElementwise
from .gemm_loops import SmallGemms
from .hot_line import HotLine
from .idle import LaunchBound
from .idle_cores import CpuIdleCores
from .kernels import BelowRoofline, NoTensorCores
from .layout import ChannelsLast
from .memory import GpuMemory
from .out_of_memory import OutOfMemory
from .precision import Precision
from .startup import Startup
from .straggler import ExposedComm, Straggler
from .sync import HostSync

RULES: list[Rule] = [
    Straggler(),
    ExposedComm(),
    SmallGemms(),
    HotLine(),
    LaunchBound(),
    HostSync(),
    DataLoading(),
    PageableCopies(),
    SyncCopies(),
    StreamOverlap(),
    NoTensorCores(),
    Precision(),
    ChannelsLast(),
    FusedAttention(),
    SdpaBackend(),
    UnfusedElementwise(),
    BelowRoofline(),
    GpuMemory(),
    OutOfMemory(),
    Startup(),
    # the CPU side only (reports without GPU work)
    CpuIdleCores(),
]


def rule_names() -> list[str]:
    """The names of every rule, in order."""
    return [r.name for r in RULES]
