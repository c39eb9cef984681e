"""PyTorch memory (``--trace memory``): which of its two recorders a process gets.

With CUDA, the caching allocator's own history (cuda_memory.py): every allocation and free of the
GPU, read at the end or at an out-of-memory error. Without CUDA, the CPU storages PyTorch operators
create and free (torch_memory.py), recorded as they happen.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from . import cuda_memory
from .torch_memory import TorchMemory

if TYPE_CHECKING:
    from ..collectors import Context

MEMORY_ENTRIES_ENV = "GPUSCOPE_MEMORY_ENTRIES"  # the CUDA allocator's ring of actions (cuda_memory.py)


def start(ctx: Context, torch: Any = None) -> cuda_memory.CudaMemory | TorchMemory:
    """Start recording the memory of the imported ``torch``; return the recorder (CUDA's where
    the allocator's history can be turned on, otherwise the CPU one)."""
    entries = int(os.environ.get(MEMORY_ENTRIES_ENV) or cuda_memory.MAX_ENTRIES)
    cuda = cuda_memory.CudaMemory(ctx.clock_offset_ns, ctx.stacks, ctx.diag, entries)
    if cuda.install(torch):
        return cuda
    cpu = TorchMemory(ctx.clock_offset_ns, ctx.stacks, ctx.diag)
    cpu.install(torch)
    return cpu
