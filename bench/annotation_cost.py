"""Cost of gpuscope's annotation API in a program that is not being profiled.

Times ``with gpuscope.annotate("x")``, a decorated function call, and ``push_range``/``pop_range``
against the same loop without annotations, interleaved over several rounds (median and range of
the per-range difference). Without an NVTX tool attached (NVTX_INJECTION64_PATH unset) the API
records nothing and only the call costs.

    python3 bench/annotation_cost.py
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from typing import Callable

import gpuscope

N = 200_000
ROUNDS = 7


def _loop_plain() -> None:
    for _ in range(N):
        pass


def _loop_annotate() -> None:
    for _ in range(N):
        with gpuscope.annotate("x"):
            pass


@gpuscope.annotate()
def _decorated() -> None:
    return None


def _undecorated() -> None:
    return None


def _loop_decorated() -> None:
    for _ in range(N):
        _decorated()


def _loop_undecorated() -> None:
    for _ in range(N):
        _undecorated()


def _loop_push_pop() -> None:
    for _ in range(N):
        gpuscope.push_range("x")
        gpuscope.pop_range()


def _time(f: Callable[[], None]) -> float:
    t = time.perf_counter()
    f()
    return (time.perf_counter() - t) / N * 1e9


def main() -> None:
    pairs = {
        "with annotate(...)": (_loop_annotate, _loop_plain),
        "@annotate() call": (_loop_decorated, _loop_undecorated),
        "push_range + pop_range": (_loop_push_pop, _loop_plain),
    }
    print(f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, "
          f"NVTX tool attached: {bool(os.environ.get('NVTX_INJECTION64_PATH'))}")
    print("| API | ns per range, median | range |\n| --- | --- | --- |")
    for label, (with_api, without) in pairs.items():
        diffs = [_time(with_api) - _time(without) for _ in range(ROUNDS)]
        print(f"| {label} | {statistics.median(diffs):.0f} | {min(diffs):.0f} - {max(diffs):.0f} |")


if __name__ == "__main__":
    main()
