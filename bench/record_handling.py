"""Cost of handing one full CUPTI buffer to the spool, per record, on fake buffers.

Two ways in: CUPTI's buffer read in raw (cupti_buffers.py: runs of same-kind records, CUPTI's
iterator once per run) and cupti-python's per-record objects (only gpuscope's own callback is
timed; cupti-python's building of the objects comes on top of it on a GPU). The buffer is 8 MB of
kernel records with a memcpy every ``--every`` kernels; a Python stand-in answers for CUPTI's
iterator. Two measures: the handling thread's CPU time per record, and what the program's own
Python thread loses per record while another thread handles buffers (its GIL waits: a pure-Python
loop on the main thread, timed with and without buffers handled meanwhile). Interleaved, repeated,
median.

    python3 bench/record_handling.py --repeats 7
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from typing import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fake_cupti import FakeBuffer, RawLayout  # noqa: E402

from gpuscope.capture.cupti.activity import BUFFER_SIZE, CuptiCollector  # noqa: E402
from gpuscope.spool import SpoolWriter  # noqa: E402

T0 = 1_700_000_000_000_000_000


def buffer(cupti: object, every: int) -> FakeBuffer:
    buf = FakeBuffer(cupti)
    size, i = 0, 0
    while size + 320 < BUFFER_SIZE:
        buf.add("ActivityKernel11", kind=10, name=f"kernel_{i % 40}", start=T0 + i, end=T0 + i + 5,
                queued=T0 + i - 3, correlation_id=i, stream_id=7)
        size += 224
        i += 1
        if i % every == 0:
            buf.add("ActivityMemcpy6", kind=1, bytes=64, start=T0 + i, end=T0 + i + 1, correlation_id=i)
            size += 96
    return buf


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--every", type=int, default=200, help="kernels between two memcpy records")
    args = p.parse_args()
    from cupti import cupti

    buf = buffer(cupti, args.every)
    acts = buf.activities()
    lay = RawLayout(buf, size=BUFFER_SIZE)
    n = len(acts)
    cpu: dict[str, list[float]] = {"raw": [], "objects": []}
    lost: dict[str, list[float]] = {"raw": [], "objects": []}
    with tempfile.TemporaryDirectory() as d:
        c = CuptiCollector(SpoolWriter(d), {"cuda"}, lambda lvl, m: None)
        c.bind(cupti, np)

        def handle(way: str) -> None:
            if way == "raw":
                c._on_raw_buffer(lay.raw, lay.valid, lay.next_record)
            else:
                c._on_complete(acts)
            for f in Path(d).iterdir():
                f.unlink()

        for _ in range(args.repeats):
            for way in cpu:
                t = time.thread_time_ns()
                handle(way)
                cpu[way].append((time.thread_time_ns() - t) / n)
            alone = _main_loop(None)
            for way in lost:
                lost[way].append((_main_loop(lambda w=way: handle(w)) - alone) / n)
    print(f"{n} records per buffer, a memcpy every {args.every} kernels, {args.repeats} repeats")
    for way in cpu:
        print(f"{way:8s} handler CPU median {statistics.median(cpu[way]):7.1f} ns/record "
              f"(min {min(cpu[way]):.1f}, max {max(cpu[way]):.1f}); main thread loses median "
              f"{statistics.median(lost[way]):7.1f} ns/record (min {min(lost[way]):.1f}, max {max(lost[way]):.1f})")


def _main_loop(handle: Callable[[], None] | None) -> float:
    """Time a fixed pure-Python loop on this thread while ``handle`` runs once on another; ns."""
    done = threading.Event()

    def other() -> None:
        time.sleep(0.002)
        if handle is not None:
            handle()
        done.set()

    th = threading.Thread(target=other)
    t = time.perf_counter_ns()
    th.start()
    x = 0
    for i in range(3_000_000):
        x += i
    th.join()
    return float(time.perf_counter_ns() - t)


if __name__ == "__main__":
    main()
