"""The arguments of one PyTorch operator call as the work model reads them, and its result.

Shapes, dtypes and scalars are the ``torch_op`` columns parsed from JSON (docs/report-format.md);
:class:`Call` gives the formulas of :mod:`.work_model` and :mod:`.work_matrix` what they share:
argument shapes by position, the precision and element size of the call, and the bytes it reads
and writes.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

PRECISIONS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")

_PRECISION = {
    "float64": "fp64", "double": "fp64", "float32": "fp32", "float": "fp32", "bfloat16": "bf16",
    "float16": "fp16", "half": "fp16", "float8_e4m3fn": "fp8", "float8_e5m2": "fp8",
    "float8_e4m3fnuz": "fp8", "float8_e5m2fnuz": "fp8", "float8_e8m0fnu": "fp8",
}  # fmt: skip
_SIZE = {
    "float64": 8, "double": 8, "float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2,
    "int64": 8, "long": 8, "int32": 4, "int": 4, "int16": 2, "short": 2, "int8": 1, "uint8": 1,
    "bool": 1, "complex64": 8, "complex128": 16, "uint16": 2, "uint32": 4, "uint64": 8,
}  # fmt: skip


@dataclass(frozen=True)
class Work:
    """What one operator call does: its kind, the precision of its floating-point work, the
    operations (``matrix_flops`` of them as matrix products) and the minimum bytes moved."""

    kind: str  # matmul, conv, attention, norm, softmax, elementwise, reduction, embedding, copy, optimizer
    precision: str | None  # fp64, fp32, bf16, fp16, fp8; None for integer and boolean data
    flops: float
    matrix_flops: float
    bytes: float

    def by_precision(self) -> dict[str, float]:
        """Return the operations keyed by precision (empty for integer work)."""
        return {self.precision: self.flops} if self.precision and self.flops else {}


def dtype_name(d: Any) -> str:
    """Return a dtype's name without ``torch.`` or ``c10::``, lower case (empty for None)."""
    return str(d).removeprefix("torch.").removeprefix("c10::").lower() if d is not None else ""


def precision_of(dtype: Any) -> str | None:
    """Return the precision key (fp32, bf16, ...) of a dtype name, None for non-float dtypes."""
    return _PRECISION.get(dtype_name(dtype))


def element_size(dtype: Any) -> int:
    """Return the bytes of one element of a dtype name (4 when unknown)."""
    name = dtype_name(dtype)
    if name.startswith("float8"):
        return 1
    return _SIZE.get(name, 4)


def numel(shape: Sequence[int] | None) -> int:
    """Return the number of elements of a shape (0 for None)."""
    return math.prod(shape) if shape is not None else 0


def is_shape(s: Any) -> bool:
    """Return whether ``s`` is one tensor's shape (a list of ints)."""
    return isinstance(s, list) and all(isinstance(x, int) for x in s)


def tensor_args(shapes: Sequence[Any], dtypes: Sequence[Any]) -> Iterator[tuple[list[int], Any]]:
    """Every tensor argument as (shape, dtype), lists of tensors flattened."""
    for i, s in enumerate(shapes):
        d = dtypes[i] if i < len(dtypes) else None
        if s is None or (s == [] and isinstance(d, list)):  # nothing, or an empty list of tensors
            continue
        if is_shape(s):
            yield s, d
        elif isinstance(s, list):
            for j, t in enumerate(s):
                if is_shape(t):
                    yield t, d[j] if isinstance(d, list) and j < len(d) else d


def output_shapes(out_shapes: Sequence[Any]) -> Iterator[list[int]]:
    """Every output tensor's shape, lists of tensors flattened."""
    for s in out_shapes:
        if is_shape(s):
            yield s
        elif isinstance(s, list):
            yield from (t for t in s if is_shape(t))


class Call:
    """One operator call's arguments, with the helpers the formulas share."""

    def __init__(self, name: str, shapes: Sequence[Any], dtypes: Sequence[Any], out_shapes: Sequence[Any],
                 scalars: dict[str, Any]) -> None:
        self.name, self.shapes, self.dtypes = name, list(shapes), list(dtypes)
        self.outs, self.scalars = list(out_shapes), scalars
        floats = [d for _, d in tensor_args(self.shapes, self.dtypes) if precision_of(d)]
        first = floats[0] if floats else next((d for _, d in tensor_args(self.shapes, self.dtypes)), None)
        self.precision = precision_of(first)
        self.size = element_size(first)

    def arg(self, i: int) -> list[int] | None:
        s = self.shapes[i] if i < len(self.shapes) else None
        return s if is_shape(s) else None

    def out(self, i: int = 0) -> list[int] | None:
        s = self.outs[i] if i < len(self.outs) else None
        return s if is_shape(s) else None

    def flag(self, key: str, default: bool = False) -> bool:
        return bool(self.scalars.get(key, default))

    def read_bytes(self, skip_first: bool = False) -> float:
        items = list(tensor_args(self.shapes, self.dtypes))
        return float(sum(numel(s) * element_size(d) for s, d in items[1 if skip_first else 0:]))

    def write_bytes(self) -> float:
        size = element_size(self.scalars["dtype"]) if dtype_name(self.scalars.get("dtype")) in _SIZE else self.size
        return float(sum(numel(s) for s in output_shapes(self.outs)) * size)

    def io_bytes(self) -> float:
        return self.read_bytes() + self.write_bytes()

    def work(self, kind: str, flops: float, matrix: float = 0.0, nbytes: float | None = None) -> Work:
        flops = flops if self.precision else 0.0
        return Work(kind, self.precision, float(flops), float(matrix if self.precision else 0.0),
                    self.io_bytes() if nbytes is None else float(nbytes))
