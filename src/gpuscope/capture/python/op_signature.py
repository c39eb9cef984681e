"""What the operator recorder knows of an operator overload, and the JSON text of a call's signature.

The recorder (torch_ops.py) reads each call's arguments by the overload's *plan*, worked out from
its schema on its first call, and keeps a call's shapes, dtypes and scalar arguments as Python
objects; they become the JSON text of the ``torch_op`` columns (docs/report-format.md) once per
distinct signature, when the agent takes the rows. Standard library only.
"""

from __future__ import annotations

import json
import math
from typing import Any

# What an argument is, from the operator's schema: a tensor (or none), a list of tensors, a value
# that decides the work (recorded in ``scalars``), something else (a generator, a storage: left out),
# or not known (a higher-order operator has no schema: tensors are recognized by their type), or the
# process group of a c10d operator (recorded in ``scalars`` by its name and ranks, groups.py).
TENSOR, TENSOR_LIST, SCALAR, IGNORED, UNKNOWN, GROUP = 0, 1, 2, 3, 4, 5
_SCALAR_TYPES = {"int", "float", "bool", "number", "complex", "str", "Device", "SymInt", "SymFloat", "SymBool"}


class Plan:
    """What the handler needs to know of one operator overload, worked out on its first call."""

    __slots__ = ("func", "name", "kinds", "names", "keyword_kinds")

    def __init__(self, func: Any) -> None:
        self.func = func  # plans are found by id(func): keep it alive so that its id stays its own
        schema = getattr(func, "_schema", None)
        if schema is None:  # a higher-order operator: no schema, arguments looked at one by one
            self.name = f"hop::{func.name()}"
            self.kinds: tuple[int, ...] = ()
            self.names: tuple[str, ...] = ()
            self.keyword_kinds: dict[str, int] = {}
            return
        self.name = schema.name
        self.names = tuple(a.name for a in schema.arguments)
        self.kinds = tuple(kind_of(str(a.type)) for a in schema.arguments)
        self.keyword_kinds = dict(zip(self.names, self.kinds))


def kind_of(type_name: str) -> int:
    """Return the kind of a schema argument type (``Optional[List[int]]``, ``Tensor``, ...)."""
    if type_name.endswith("c10d.ProcessGroup"):
        return GROUP
    if "Tensor" in type_name:
        return TENSOR_LIST if type_name.startswith(("List[", "Optional[List[")) else TENSOR
    while type_name.startswith(("Optional[", "List[")):
        type_name = type_name[type_name.index("[") + 1 : -1]
    return SCALAR if type_name in _SCALAR_TYPES else IGNORED


class SignatureText:
    """Turns a call's signature (plan, shapes, dtypes, scalars, output shapes) into JSON text."""

    def __init__(self) -> None:
        self._dtype_names: dict[Any, str] = {}

    def encode(self, plan: Plan, shapes: tuple[Any, ...], dtypes: tuple[Any, ...], scalars: tuple[Any, ...],
               outs: tuple[Any, ...]) -> tuple[str, str, str, str, str]:
        """Return name, shapes, dtypes, out_shapes and scalars (JSON) of a signature."""
        values = {}
        for k, v in scalars:
            value = self.scalar(v)
            if value is not None:
                values[k] = value
        return (
            plan.name,
            json.dumps([shape_of(s) for s in shapes], separators=(",", ":")),
            json.dumps([self.dtype(d) for d in dtypes], separators=(",", ":")),
            json.dumps([shape_of(s) for s in outs], separators=(",", ":")),
            json.dumps(values, separators=(",", ":")),
        )

    def dtype(self, d: Any) -> Any:
        """Return a dtype's name (``float32``), a list of them for a list of tensors, None for none."""
        if d is None:
            return None
        if type(d) is tuple:
            return [self.dtype(x) for x in d]
        name = self._dtype_names.get(d)
        if name is None:
            name = self._dtype_names[d] = str(d).removeprefix("torch.")
        return name

    def scalar(self, v: Any) -> Any:
        """Return a JSON value for a non-tensor argument; None for those without a meaningful one."""
        if isinstance(v, (bool, int, str)):
            return v
        if isinstance(v, float):
            return v if math.isfinite(v) else str(v)
        if isinstance(v, complex):
            return str(v)
        if isinstance(v, (tuple, list)):
            return [self.scalar(x) for x in v]
        kind = type(v).__name__
        if kind == "dtype":
            return self.dtype(v)
        if kind in ("device", "layout", "memory_format"):
            return str(v).removeprefix("torch.")
        if kind in ("SymInt", "SymBool", "SymFloat"):
            return str(v)
        return None  # generators, callables, opaque objects


def shape_of(s: Any) -> Any:
    """Return a shape as a list of ints, a list of those for a list of tensors, None for none."""
    if s is None:
        return None
    if type(s) is tuple and (not s or type(s[0]) is not int):  # a list of tensors (or of none)
        return [shape_of(x) for x in s]
    return [int(x) for x in s]
