"""Whether a calibration (``gpuscope roofline --calibrate``) can be trusted, and what the cache keeps.

A calibration runs its benchmarks several times over (each repeat measures every ceiling once, so a
load that comes and goes touches them all alike). Each ceiling is the median of its repeats, and its
spread is ``(max - min) / median``: above UNSTABLE_SPREAD the machine was not steady (another
program on it, clocks that moved), and the run says so.

A roof is a peak: a busy machine only ever measures lower. So the cache never trades a ceiling for a
lower one: per ceiling, this run's median replaces the cached value when it is higher by more than
CLOSE; when the two are within CLOSE of each other, the steadier measurement (smaller spread) wins
(a cached value without a spread, from an older gpuscope, counts as the less steady); else the
cached value stays. ``--replace`` keeps this run whatever the cache holds (a changed machine: a new
driver, a power cap). What was kept, and why, comes back as rows of :func:`calibration_table`.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from .ceilings import FLOP_KEYS, LABELS, UNSTABLE_SPREAD, Ceilings
from ..table import Column, Table

CLOSE = 0.05


@dataclass(frozen=True)
class Choice:
    """One ceiling's outcome: this run's median and spread, the cached value and spread (None when
    there was none), which one the cache keeps (``run`` or ``cached``) and why, in words."""

    key: str
    measured: float
    spread: float | None
    cached: float | None
    cached_spread: float | None
    kept: str
    why: str


def _values(c: Ceilings) -> dict[str, float]:
    """Every measured ceiling of ``c`` by key (``dram``, ``l2``, then FLOP_KEYS)."""
    out = {k: v for k, v in (("dram", c.dram_bytes_per_s), ("l2", c.l2_bytes_per_s)) if v}
    out.update({k: c.flops[k] for k in FLOP_KEYS if k in c.flops})
    return {k: v for k, v in out.items() if c.sources.get(k, "measured") == "measured"}


def _set(c: Ceilings, key: str, value: float) -> None:
    if key == "dram":
        c.dram_bytes_per_s = value
    elif key == "l2":
        c.l2_bytes_per_s = value
    else:
        c.flops[key] = value
    c.sources[key] = "measured"


def spreads(c: Ceilings) -> dict[str, float]:
    """Return the spread of each ceiling of a calibration over its repeats (empty for one made
    without repeats)."""
    return {k: float(v) for k, v in (c.details.get("spread") or {}).items()}


def combine(runs: list[Ceilings]) -> Ceilings:
    """Return one calibration from repeated runs of the same benchmarks: each ceiling the median
    over the runs that measured it, with its spread and its samples in ``details``."""
    if not runs:
        raise ValueError("no runs to combine")
    first = runs[-1]
    out = Ceilings(first.device, measured_at=first.measured_at, details=dict(first.details))
    samples: dict[str, list[float]] = {}
    for run in runs:
        for key, value in _values(run).items():
            samples.setdefault(key, []).append(value)
    spread = {}
    for key, values in samples.items():
        median = statistics.median(values)
        _set(out, key, median)
        spread[key] = (max(values) - min(values)) / median if median else 0.0
    out.details.update({"repeats": len(runs), "spread": spread, "samples": samples})
    return out


def _choose(new: float, new_spread: float | None, old: float | None, old_spread: float | None,
            force: bool) -> tuple[str, str]:
    if old is None:
        return "run", "nothing cached"
    if force:
        return "run", "--replace"
    if new > old * (1 + CLOSE):
        return "run", "higher than the cached value"
    if new < old * (1 - CLOSE):
        return "cached", "this run measured lower (a busier machine?)"
    steadier = new_spread is not None and (old_spread is None or new_spread <= old_spread)
    if steadier:
        return "run", "close to the cached value, and steadier"
    return "cached", "close to this run, and steadier"


def merge(cached: Ceilings | None, new: Ceilings, force: bool = False) -> tuple[Ceilings, list[Choice]]:
    """Return what the cache should hold after the calibration ``new`` (see the module docstring),
    and one :class:`Choice` per ceiling of ``new``. ``force``: every value of ``new`` replaces the cached one."""
    old = _values(cached) if cached is not None and cached.device == new.device else {}
    old_spread = spreads(cached) if cached is not None else {}
    new_spread = spreads(new)
    kept = replace(new, flops=dict(new.flops), sources=dict(new.sources), details=dict(new.details))
    kept_spread = dict(new_spread)
    at = dict((cached.details.get("measured_at_by_key") or {}) if cached is not None else {})
    choices = []
    for key, value in _values(new).items():
        prior = old.get(key)
        which, why = _choose(value, new_spread.get(key), prior, old_spread.get(key), force)
        choices.append(Choice(key, value, new_spread.get(key), prior, old_spread.get(key), which, why))
        if which == "cached" and prior is not None:
            _set(kept, key, prior)
            kept_spread[key] = old_spread[key] if key in old_spread else float("nan")
            at[key] = at.get(key) or (cached.measured_at if cached is not None else None)
        else:
            at[key] = new.measured_at
    for key, value in old.items():  # what this run did not measure stays
        if key not in _values(new):
            _set(kept, key, value)
            at[key] = at.get(key) or (cached.measured_at if cached is not None else None)
            if key in old_spread:
                kept_spread[key] = old_spread[key]
    kept.details["spread"] = {k: v for k, v in kept_spread.items() if v == v}
    kept.details["measured_at_by_key"] = at
    times = [t for t in at.values() if t]
    kept.measured_at = max(times) if times else new.measured_at  # the newest of what the cache holds
    kept.details.pop("samples", None)
    return kept, choices


def _scale(values: list[float | None], key: str) -> tuple[float, str]:
    top = max((v for v in values if v), default=0.0)
    scale, prefix = (1e12, "T") if top >= 1e12 else (1e9, "G")
    return scale, prefix + ("B/s" if key in ("dram", "l2") else "FLOP/s")


def calibration_table(new: Ceilings, choices: list[Choice]) -> Table:
    """This run's median and spread per ceiling beside the cached value, and which one the cache
    keeps; notes on an unstable run and on every ceiling the cache did not take from it."""
    rows = []
    for c in choices:
        scale, unit = _scale([c.measured, c.cached], c.key)
        rows.append((LABELS.get(c.key, c.key), c.measured / scale,
                     None if c.spread is None else 100.0 * c.spread,
                     None if c.cached is None else c.cached / scale, unit,
                     "this run" if c.kept == "run" else "cached", c.why))
    cols = [Column("Ceiling"), Column("This Run", "number"), Column("Spread", "percent"),
            Column("Cached", "number"), Column("Unit"), Column("Kept"), Column("Why")]
    repeats = new.details.get("repeats")
    notes = [f"Each ceiling is the median of {repeats} repeats; spread: (max - min) / median."] if repeats else []
    shaky = new.unstable()
    if shaky:
        worst = ", ".join(f"{LABELS.get(k, k)} {100 * v:.0f}%" for k, v in sorted(shaky.items(), key=lambda kv: -kv[1]))
        notes.append(f"Unstable machine: the repeats spread by more than {100 * UNSTABLE_SPREAD:.0f}% ({worst}); "
                     "another program or moving clocks disturbed them. Calibrate again when the machine is idle.")
    lower = [c for c in choices if c.kept == "cached"]
    if lower:
        notes.append(f"The cache keeps its own {', '.join(LABELS.get(c.key, c.key) for c in lower)}: a roof is a "
                     "peak and a busy machine measures lower; --replace keeps this run's values instead.")
    return Table("calibration", f"Calibration of {new.device}", cols, rows, notes)
