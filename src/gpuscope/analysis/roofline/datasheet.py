"""Vendor datasheet peaks of common NVIDIA GPUs, keyed by the device name the driver reports.

Dense peaks (no structured sparsity) at boost clock, FLOP/s, and DRAM bandwidth in bytes/s, from
NVIDIA's product datasheets. Keys of ``flops``: ``fp64`` and ``fp32`` (CUDA cores), ``tensor_tf32``,
``tensor_bf16``, ``tensor_fp16``, ``tensor_fp8``, ``tensor_fp64`` (tensor cores). A GPU's measured
ceilings (``gpuscope roofline --calibrate``) are shown beside these.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

T = 1e12


@dataclass(frozen=True)
class Datasheet:
    """A GPU model's published peaks."""

    model: str
    dram_bytes_per_s: float
    flops: dict[str, float] = field(default_factory=dict)


def _hopper(model: str, dram: float, fp64: float, fp32: float, tf32: float) -> Datasheet:
    # Hopper's tensor peaks: BF16 and FP16 twice TF32, FP8 twice BF16; FP64 tensor twice FP64
    return Datasheet(model, dram, {"fp64": fp64 * T, "fp32": fp32 * T, "tensor_fp64": 2 * fp64 * T,
                                   "tensor_tf32": tf32 * T, "tensor_bf16": 2 * tf32 * T,
                                   "tensor_fp16": 2 * tf32 * T, "tensor_fp8": 4 * tf32 * T})


def _ampere_a100(model: str, dram: float) -> Datasheet:
    return Datasheet(model, dram, {"fp64": 9.7 * T, "fp32": 19.5 * T, "tensor_fp64": 19.5 * T,
                                   "tensor_tf32": 156 * T, "tensor_bf16": 312 * T, "tensor_fp16": 312 * T})


# (pattern on the device name, datasheet); the first match wins, so variants come before the base model.
DATASHEETS: list[tuple[str, Datasheet]] = [
    (r"H200 NVL", _hopper("H200 NVL", 4.8 * T, 30, 60, 417.5)),
    (r"H200", _hopper("H200 SXM", 4.8 * T, 34, 67, 494.7)),
    (r"H100 NVL", _hopper("H100 NVL", 3.9 * T, 30, 60, 417.5)),
    (r"H100 PCIe", _hopper("H100 PCIe", 2.0 * T, 25.6, 51, 378)),
    (r"H100", _hopper("H100 SXM", 3.35 * T, 34, 67, 494.7)),
    (r"A100.*(80GB PCIe|PCIE-80GB)", _ampere_a100("A100 80GB PCIe", 1.935 * T)),
    (r"A100.*PCIE", _ampere_a100("A100 40GB PCIe", 1.555 * T)),
    (r"A100.*80GB", _ampere_a100("A100 SXM4 80GB", 2.039 * T)),
    (r"A100", _ampere_a100("A100 SXM4 40GB", 1.555 * T)),
    (r"L40S", Datasheet("L40S", 0.864 * T, {"fp32": 91.6 * T, "tensor_tf32": 183 * T, "tensor_bf16": 362 * T,
                                            "tensor_fp16": 362 * T, "tensor_fp8": 733 * T})),
    (r"\bL4\b", Datasheet("L4", 0.3 * T, {"fp32": 30.3 * T, "tensor_tf32": 60 * T, "tensor_bf16": 121 * T,
                                          "tensor_fp16": 121 * T, "tensor_fp8": 242 * T})),
    (r"\bA10\b", Datasheet("A10", 0.6 * T, {"fp32": 31.2 * T, "tensor_tf32": 62.5 * T, "tensor_bf16": 125 * T,
                                            "tensor_fp16": 125 * T})),
    (r"V100", Datasheet("V100 SXM2", 0.9 * T, {"fp64": 7.8 * T, "fp32": 15.7 * T, "tensor_fp16": 125 * T})),
    (r"\bT4\b", Datasheet("T4", 0.32 * T, {"fp32": 8.1 * T, "tensor_fp16": 65 * T})),
]


def datasheet(device_name: str) -> Datasheet | None:
    """Return the datasheet of the GPU named ``device_name`` (as CUPTI or torch names it), if known."""
    for pattern, sheet in DATASHEETS:
        if re.search(pattern, device_name, re.IGNORECASE):
            return sheet
    return None
