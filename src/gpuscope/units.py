"""Human units for tables: durations, sizes, percentages, counts."""

from __future__ import annotations

from typing import Any, Literal

# What the numbers of a table column are: each has its human and its machine form below.
Unit = Literal["ns", "bytes", "percent", "count", "text", "id", "flops", "flops_per_s", "bytes_per_s", "number"]


def duration(ns: float) -> str:
    """Format nanoseconds with a unit that keeps three or four significant digits."""
    a = abs(ns)
    if a < 1e3:
        return f"{ns:.0f} ns"
    if a < 1e6:
        return f"{ns / 1e3:.3g} µs" if a < 1e5 else f"{ns / 1e3:.1f} µs"
    if a < 1e9:
        return f"{ns / 1e6:.3g} ms" if a < 1e8 else f"{ns / 1e6:.1f} ms"
    return f"{ns / 1e9:.3f} s"


def size(nbytes: float) -> str:
    """Format bytes in decimal units (1 MB = 10**6 bytes, as Nsight Systems does)."""
    a = abs(nbytes)
    for limit, unit in ((1e3, "B"), (1e6, "kB"), (1e9, "MB"), (1e12, "GB")):
        if a < limit:
            scale = limit / 1e3
            return f"{nbytes:.0f} B" if unit == "B" else f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes / 1e12:.3g} TB"


def scaled(value: float, unit: str) -> str:
    """Format a quantity with a decimal prefix and three significant digits: ``989 TFLOP/s``."""
    a = abs(value)
    for limit, prefix in ((1e3, ""), (1e6, "k"), (1e9, "M"), (1e12, "G"), (1e15, "T"), (1e18, "P")):
        if a < limit:
            return f"{value / (limit / 1e3):.3g} {prefix}{unit}"
    return f"{value / 1e18:.3g} E{unit}"


def human(value: Any, unit: Unit) -> str:
    """Format a raw table value for people."""
    if value is None:
        return "-"
    if unit == "ns":
        return duration(float(value))
    if unit == "bytes":
        return size(float(value))
    if unit == "percent":
        return f"{float(value):.1f}%"
    if unit == "count":
        return f"{int(value):,}"
    if unit in _RATE:
        return scaled(float(value), _RATE[unit])
    if unit == "number":
        return f"{float(value):.3g}"
    return str(value)


_RATE = {"flops": "FLOP", "flops_per_s": "FLOP/s", "bytes_per_s": "B/s"}


def machine(value: Any, unit: Unit) -> Any:
    """Return a raw table value for csv/json: integer ns and bytes, percent to 0.1."""
    if value is None:
        return None
    if unit in ("ns", "bytes", "count", "id", "flops", "flops_per_s", "bytes_per_s"):
        return int(round(float(value)))
    if unit == "number":
        return round(float(value), 3)
    if unit == "percent":
        return round(float(value), 1)
    return value


SUFFIX = {"ns": " (ns)", "bytes": " (B)", "percent": " (%)", "flops": " (FLOP)", "flops_per_s": " (FLOP/s)",
          "bytes_per_s": " (B/s)"}


def machine_label(label: str, unit: Unit) -> str:
    """Return a column label with its unit, as csv/json headers carry it: ``Total Time (ns)``."""
    return label + SUFFIX.get(unit, "")
