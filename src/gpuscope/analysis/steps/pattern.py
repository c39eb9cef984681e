"""Iterations of a program that marks no steps, found as the repeating sequence of what it launched.

A training or inference loop launches the same operations in the same order every iteration. Given
one process's operations in launch order (each a token: a kernel name, a copy direction, an operator
name), :func:`find_pattern` finds the shortest period ``P`` at which the sequence repeats itself
best, picks the phase at which an iteration starts (the position whose launch follows the longest
host gap: the loop's own Python, data loading or a synchronization usually sit between two
iterations), and returns the index of every place where that iteration start occurs.

Periods are looked for where each token next recurs: a token launched once per iteration recurs
after exactly ``P`` tokens, so the candidate periods are the most frequent recurrence distances.
Each is scored by the share of tokens equal to the token ``P`` later, over the last three quarters
of the sequence (its start is set-up: imports, library handles, first allocations, compilation).
An iteration start is found again after an irregular iteration (an evaluation every 100 steps) by
looking for its first ``K`` tokens, not by counting.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_REPEATS = 4  # fewer iterations than this are not a loop
MIN_SCORE = 0.8  # share of tokens equal to the token one period later
MAX_PERIOD = 20_000
WINDOW = 60_000  # tokens the period is scored on
NGRAM = 8


@dataclass(frozen=True)
class Pattern:
    """A loop found in a token sequence: ``period`` tokens per iteration, iterations starting at
    ``starts`` (indices into the sequence, increasing), ``score`` the share of tokens that repeat
    one period later."""

    period: int
    starts: np.ndarray
    score: float


def _candidates(w: np.ndarray, limit: int) -> list[int]:
    """The most frequent distances at which a token recurs in ``w`` (at most ``limit`` of them)."""
    order = np.argsort(w, kind="stable")
    same = w[order][1:] == w[order][:-1]
    dist = (order[1:] - order[:-1])[same]
    dist = dist[(dist > 0) & (dist <= min(MAX_PERIOD, len(w) // MIN_REPEATS))]
    if not len(dist):
        return []
    values, counts = np.unique(dist, return_counts=True)
    ranked = values[np.argsort(-counts, kind="stable")][:limit]
    return sorted(int(v) for v in ranked)


def _score(w: np.ndarray, period: int) -> float:
    return float(np.mean(w[:-period] == w[period:])) if period < len(w) else 0.0


def _period(tokens: np.ndarray) -> tuple[int, float, int] | None:
    """The period, its score, and where in ``tokens`` the window it was scored on starts. Windows
    from a quarter, half and three quarters of the way in are tried: set-up and compilation can
    take most of a short capture."""
    n = len(tokens)
    best: tuple[int, float, int] | None = None
    for lo in (n // 4, n // 2, 3 * n // 4):
        w = tokens[lo:][:WINDOW]
        scored = [(p, _score(w, p)) for p in _candidates(w, 64) if len(w) >= MIN_REPEATS * p]
        if not scored:
            continue
        top = max(s for _, s in scored)
        period = min(p for p, s in scored if s >= top - 0.01)
        if best is None or top > best[1] + 0.02:
            best = (period, top, lo)
    return best if best is not None and best[1] >= MIN_SCORE else None


def _hashes(tokens: np.ndarray, k: int) -> np.ndarray:
    """A hash of every ``k`` consecutive tokens (position i: tokens i..i+k-1). Worked in place on
    the tokens' own bits: ten million tokens made three arrays of them anew per step (a quarter of
    a gigabyte at once)."""
    mult = np.uint64(1_000_003)
    h = np.zeros(len(tokens) - k + 1, dtype=np.uint64)
    t = tokens.view(np.uint64) if tokens.dtype == np.int64 else tokens.astype(np.uint64)
    with np.errstate(over="ignore"):
        for j in range(k):
            h *= mult
            h += t[j:j + len(h)]
            h += np.uint64(j + 1)
    return h


def find_pattern(tokens: np.ndarray, launch_ns: np.ndarray, exact: np.ndarray | None = None) -> Pattern | None:
    """Return the loop in ``tokens`` (launch order; ``launch_ns`` their launch times), or None
    when the sequence does not repeat at least :data:`MIN_REPEATS` times. ``exact`` marks the
    tokens whose launch time was recorded, not estimated (default: all); an iteration starts at
    one of those where it can."""
    tokens = np.asarray(tokens, dtype=np.int64)
    launch_ns = np.asarray(launch_ns, dtype=np.int64)
    exact = np.ones(len(tokens), bool) if exact is None else np.asarray(exact, dtype=bool)
    if len(tokens) < 2 * MIN_REPEATS:
        return None
    found = _period(tokens)
    if found is None:
        return None
    period, score, lo = found
    # one clean iteration of the steady state: the first place after lo where it repeats exactly
    base = lo
    end = len(tokens) - 2 * period
    while base <= end and not np.array_equal(tokens[base:base + period], tokens[base + period:base + 2 * period]):
        base += max(1, period // 4)
    if base > end:
        base = lo
    template = tokens[base:base + period]
    k = min(NGRAM, period)
    cyclic = np.concatenate([template, template[:k]])
    grams = _hashes(cyclic, k)[:period]
    values, counts = np.unique(grams, return_counts=True)
    unique = np.isin(grams, values[counts == 1])
    phases = np.flatnonzero(unique & exact[base:base + period])
    if not len(phases):
        phases = np.flatnonzero(unique) if unique.any() else np.arange(period)
    # the phase after the longest host gap, as a median over the steady iterations
    reps = max(1, min((len(tokens) - base) // period - 1, 200))
    idx = base + phases[None, :] + period * np.arange(reps)[:, None]
    idx = idx[(idx > 0).all(axis=1) & (idx < len(tokens)).all(axis=1)]
    if len(idx):
        gaps = np.median(launch_ns[idx] - launch_ns[idx - 1], axis=0)
        phase = int(phases[int(np.argmax(gaps))])
    else:
        phase = int(phases[0])
    gram = grams[phase]
    at = np.flatnonzero(_hashes(tokens, k) == gram)
    starts: list[int] = []
    for i in at:  # an iteration is at least half a period long
        if not starts or i - starts[-1] >= max(1, period // 2):
            starts.append(int(i))
    if len(starts) < MIN_REPEATS:
        return None
    return Pattern(period, np.array(starts, dtype=np.int64), score)
