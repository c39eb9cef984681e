"""The collectors ``--trace`` can name."""

from __future__ import annotations

import ctypes

from ..errors import GpuscopeError

KNOWN_TRACES = {
    "cuda": "kernels, memory copies and sets, synchronizations, devices (CUPTI)",
    "cuda-graph": "each CUDA graph launch as one operation, instead of one per kernel of the graph (less overhead)",
    "cuda-api": "every CUDA runtime and driver API call (CUPTI; costs more in launch-bound programs)",
    "nvtx": "NVTX ranges and marks of any library: torch.cuda.nvtx, C/C++ code (CUPTI's NVTX injection)",
    "torch": "PyTorch module forward, optimizer, zero_grad, loss.backward, DataLoader waits, steps",
    "torch-backward": "the backward of every PyTorch module (autograd hooks; about 4x the cost of forward ranges)",
    "torch-ops": "every PyTorch (ATen) operator, forward and backward, with input shapes, dtypes and arguments "
                 "(tens of µs per operator on a slow CPU)",
    "torch-shapes": "PyTorch operators as torch-ops, in a few short sample windows of steady steps only; their FLOPs "
                    "and bytes are carried to every launch of the same kernels (the roofline without torch-ops)",
    "cpu": "Python stacks of every thread sampled at 1 kHz (GPUSCOPE_SAMPLE_HZ), threads' CPU time",
    "host": "CPU utilization per core, and CPU, memory and threads of the program's processes (10 Hz)",
    "nvml": "GPU utilization, memory, power, clocks, temperature, PCIe throughput through NVML (20 Hz)",
    "none": "no collector: run the program and record only its process",
}
DEFAULT_TRACE = ["cuda", "nvtx", "torch", "host", "nvml"]


def gpu_present() -> bool:
    """Return whether this machine has an NVIDIA driver (libcuda loads); creates no CUDA context."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def parse_trace(spec: str | None) -> list[str]:
    """Return the collectors named in a ``--trace`` value, checking each name."""
    if spec is None:
        return list(DEFAULT_TRACE)
    names = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [n for n in names if n not in KNOWN_TRACES]
    if unknown or not names:
        known = ", ".join(sorted(KNOWN_TRACES))
        raise GpuscopeError(f"unknown --trace value {','.join(unknown) or spec!r}; choose from {known}")
    if "none" in names:
        return []
    if "torch-backward" in names and "torch" not in names:
        names.insert(names.index("torch-backward"), "torch")
    if ("cuda-api" in names or "cuda-graph" in names) and "cuda" not in names:
        names.insert(0, "cuda")
    if "torch-ops" in names and "torch-shapes" in names:  # every operator, not samples of them
        names.remove("torch-shapes")
    return names
