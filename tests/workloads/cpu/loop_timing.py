"""Shared by the CPU-only programs here: the command line, and ``--measure``, which times the
as-written loop against each candidate fix in one process, interleaved over several rounds (the
order rotates every round, so that a slower machine for a while hurts every variant alike), and
writes the medians, their spread and the gain of each fix as JSON.

A loop's time is the median of its step times after ``skip`` warm-up steps: the steady step, as
``gpuscope analyze`` estimates it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable

Loop = Callable[[], list[float]]  # runs one loop, returns its step times in seconds


def parser(doc: str | None, fixes: Iterable[str]) -> argparse.ArgumentParser:
    """``--fix NAME`` (run that variant), ``--measure OUT.json``, ``--rounds``."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fix", choices=sorted(fixes), help="run with this fix applied")
    p.add_argument("--measure", metavar="OUT.json", help="time the as-written loop against every fix; write JSON")
    p.add_argument("--rounds", type=int, default=5, help="rounds of --measure (default 5)")
    return p


class StepClock:
    """Step times of a loop: call :meth:`tick` at the end of each step."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self._last = time.perf_counter()

    def tick(self) -> None:
        now = time.perf_counter()
        self.times.append(now - self._last)
        self._last = now


def steady(times: list[float], skip: int) -> float:
    """The median step time after the first ``skip`` steps."""
    rest = times[skip:] if len(times) > skip + 2 else times
    return statistics.median(rest)


def measure(program: str, variants: dict[str, Loop], out: str, rounds: int, skip: int = 3) -> dict[str, object]:
    """Time every variant (``as_written`` first in the dict) ``rounds`` times, interleaved; write ``out``."""
    names = list(variants)
    per_round: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            per_round[name].append(steady(variants[name](), skip))
    base = per_round[names[0]]
    doc: dict[str, object] = {"program": program, "metric": "median step time (s) after warm-up steps",
                              "rounds": rounds, "cores": os.cpu_count(), "variants": {}}
    variants_doc: dict[str, dict[str, object]] = {}
    for name in names:
        times = per_round[name]
        gains = [(b - t) / b for b, t in zip(base, times)]
        variants_doc[name] = {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
                              "per_round_s": times, "gain": statistics.median(gains),
                              "gain_min": min(gains), "gain_max": max(gains)}
    doc["variants"] = variants_doc
    fixes = [n for n in names[1:]]
    best = max(fixes, key=lambda n: float(variants_doc[n]["gain"])) if fixes else None  # type: ignore[arg-type]
    doc["best_fix"] = best
    doc["gain"] = variants_doc[best]["gain"] if best else 0.0
    with open(out, "w") as fh:
        json.dump(doc, fh, indent=2)
    for name in names:
        v = variants_doc[name]
        print(f"{program} {name}: median step {float(v['median_s']) * 1e3:.2f} ms "  # type: ignore[arg-type]
              f"(min {float(v['min_s']) * 1e3:.2f}, max {float(v['max_s']) * 1e3:.2f}), gain {float(v['gain']):.1%}",
              file=sys.stderr)
    return doc
