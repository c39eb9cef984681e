"""Whether a fix left the program's numbers as they were: its first losses, else its model's last output.

Where the program calls ``backward`` on scalar tensors (its losses), the first few are compared side
by side, relative difference per step; else the sample of the top module's last output that the run
kept (the same elements of each tensor), as the norm of the difference over the norm of the values.
The tolerance is that of the looser of the output's dtype and the precision the fix computes in
(TF32, bfloat16). A program whose own runs differ beyond it (no seed, a shuffling DataLoader) cannot
be judged: the comparison says so instead of blaming the fix.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

TOLERANCE = {"float64": 1e-9, "float32": 1e-4, "tf32": 5e-3, "float16": 1e-2, "bfloat16": 5e-2}
DEFAULT_DTYPE = "float32"


@dataclass(frozen=True)
class Agreement:
    """The comparison of one fix's numbers with the program's as written."""

    what: str  # "losses", "output", or "" (not compared)
    difference: float | None  # relative
    tolerance: float | None
    agrees: bool | None  # None: not compared
    note: str = ""
    fixed: tuple[float, ...] = ()  # the losses side by side (for "losses")
    written: tuple[float, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """Plain data."""
        return {"what": self.what or None, "difference": self.difference, "tolerance": self.tolerance,
                "agrees": self.agrees, "note": self.note, "losses_fixed": list(self.fixed),
                "losses_as_written": list(self.written)}


def tolerance(dtypes: Sequence[str], precision: str | None) -> float:
    """The relative tolerance of the loosest of ``dtypes`` and the fix's ``precision``."""
    names = [d for d in dtypes if d in TOLERANCE] or [DEFAULT_DTYPE]
    if precision in TOLERANCE:
        names.append(precision)  # type: ignore[arg-type]
    return max(TOLERANCE[n] for n in names)


def loss_difference(a: Sequence[float], b: Sequence[float]) -> float:
    """The largest relative difference of the losses both runs have, step by step."""
    n = min(len(a), len(b))
    if n == 0:
        raise ValueError("no losses to compare")
    return max(_relative(x, y) for x, y in zip(a[:n], b[:n]))


def output_difference(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> float:
    """The relative difference of two output samples (inf where their shapes differ)."""
    if len(a) != len(b) or not a:
        return math.inf
    worst = 0.0
    for x, y in zip(a, b):
        if x.get("shape") != y.get("shape") or len(x["values"]) != len(y["values"]):
            return math.inf
        diff = math.sqrt(sum((p - q) ** 2 for p, q in zip(x["values"], y["values"])))
        norm = math.sqrt(sum(q * q for q in y["values"]))
        if any(math.isnan(v) for v in x["values"]) != any(math.isnan(v) for v in y["values"]):
            return math.inf
        worst = max(worst, diff / norm if norm > 0 else diff)
    return worst


def _relative(x: float, y: float) -> float:
    if math.isnan(x) or math.isnan(y):
        return 0.0 if math.isnan(x) and math.isnan(y) else math.inf
    return abs(x - y) / max(abs(y), 1e-12)


def compare(fixed: dict[str, Any], written: Sequence[dict[str, Any]], precision: str | None) -> Agreement:
    """Compare the results of a run with a fix against the runs as written (the first of them; the
    others, when there are, tell how much the program's own runs differ)."""
    if not written:
        return Agreement("", None, None, None, "not compared: no run as written finished")
    base = written[0]
    fl, bl = fixed.get("losses") or [], base.get("losses") or []
    if fl and bl:
        tol = tolerance([], precision)
        noise = max((loss_difference(w.get("losses") or [], bl) for w in written[1:] if w.get("losses")),
                    default=0.0)
        if noise > tol:
            return Agreement("losses", None, tol, None, f"not compared: the program's own runs differ by {noise:.2g} "
                             "(seed it for a comparison)")
        diff = loss_difference(fl, bl)
        n = min(len(fl), len(bl))
        return Agreement("losses", diff, tol, diff <= tol, f"first {n} losses", tuple(fl[:n]), tuple(bl[:n]))
    fo, bo = fixed.get("output"), base.get("output")
    if fo and bo:
        tol = tolerance([t.get("dtype", "") for t in bo + fo], precision)
        noise = max((output_difference(w["output"], bo) for w in written[1:] if w.get("output")), default=0.0)
        if noise > tol:
            return Agreement("output", None, tol, None, f"not compared: the program's own runs differ by {noise:.2g} "
                             "(seed it for a comparison)")
        diff = output_difference(fo, bo)
        return Agreement("output", diff, tol, diff <= tol, "the top module's last output")
    return Agreement("", None, None, None, "not compared: no losses and no model output seen")
