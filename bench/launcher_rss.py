"""The launcher's memory over a long run: ``gpuscope profile`` of a CPU program that records many
operators, ranges and samples, with the launcher's resident set sampled every second.

The launcher (the ``gpuscope profile`` process) ingests the program's spool chunks into the report
as they come; its memory should level off once the first chunks are in, whatever the run's length.
The workload is a small CPU training loop (``--trace torch,torch-ops,cpu,host`` by default: every
operator, module ranges, stack samples, host counters) that runs for ``--seconds``.

    PYTHONPATH=src python bench/launcher_rss.py --seconds 200 [--trace torch,torch-ops,cpu,host]

Prints the resident set every 10 s and a summary: at 20 s (after start-up and the first chunks),
at the end of the program, the peak, and the growth per minute fitted over the second half.

``--ingest ROWS`` measures the launcher's part alone, faster than a program can record: spool
chunks of 50,000 operators (and 5,000 ranges) each, their arguments random text that compresses
poorly (about 40 bytes an operator in the report), are written and ingested one after the other
by the report writer in this process, the resident set read after each, with the writer's DuckDB
cache limit as it is (``--memory-limit default``) or without one (``none``, as before it was set).

    PYTHONPATH=src python bench/launcher_rss.py --ingest 10000000 --memory-limit none
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

WORKLOAD = """
import sys, time
import torch
torch.set_num_threads(1)
model = torch.nn.Sequential(*[m for _ in range(4) for m in (torch.nn.Linear(64, 64), torch.nn.ReLU())])
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(16, 64)
end = time.monotonic() + float(sys.argv[1])
steps = 0
while time.monotonic() < end:
    model(x).square().mean().backward()
    opt.step()
    opt.zero_grad()
    steps += 1
print("steps", steps)
"""


def _slope_mb_per_min(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MB) points, in MB per minute."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs) or 1.0
    return 60 * sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den


def measure(seconds: float, trace: str, interval: float = 1.0) -> dict[str, object]:
    """Run one profile and return its resident-set series (MB) and summary numbers."""
    d = Path(tempfile.mkdtemp(prefix="gpuscope-rss-"))
    (d / "work.py").write_text(WORKLOAD)
    cmd = [sys.executable, "-m", "gpuscope", "profile", "-t", trace, "-o", str(d / "r.gpuscope"),
           sys.executable, "work.py", str(seconds)]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=d, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    launcher = psutil.Process(proc.pid)
    series: list[tuple[float, float]] = []
    while proc.poll() is None:
        try:
            series.append((time.monotonic() - t0, launcher.memory_info().rss / 1e6))
        except psutil.NoSuchProcess:
            break
        if series and len(series) % 10 == 0:
            print(f"  {series[-1][0]:6.0f} s  {series[-1][1]:7.1f} MB", flush=True)
        time.sleep(interval)
    out, err = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"profile failed ({proc.returncode}):\n{err[-2000:]}")
    import duckdb

    con = duckdb.connect(str(d / "r.gpuscope"), read_only=True)
    rows = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]  # type: ignore[index]
            for t in ("torch_op", "nvtx_range", "cpu_sample", "host_counter")}
    con.close()
    run = [p for p in series if p[0] <= seconds + 2]
    second_half = [p for p in run if p[0] >= run[-1][0] / 2]
    at20 = next((mb for s, mb in series if s >= 20), series[0][1])
    return {"seconds": seconds, "trace": trace, "rows": rows, "report_mb": os.path.getsize(d / "r.gpuscope") / 1e6,
            "rss_at_20s_mb": at20, "rss_end_of_program_mb": run[-1][1], "rss_peak_mb": max(mb for _, mb in series),
            "growth_mb_per_min": _slope_mb_per_min(second_half), "stdout": out.strip()[-80:], "series": series}


def ingest(rows: int, memory_limit: str) -> dict[str, object]:
    """Write and ingest spool chunks of ``rows`` operators in all; return the resident set (MB) per chunk."""
    import numpy as np

    from gpuscope.spool import SpoolWriter
    from gpuscope.trace.writer import INGEST_MEMORY, ReportWriter

    d = Path(tempfile.mkdtemp(prefix="gpuscope-ingest-"))
    spool = d / "spool"
    spool.mkdir()
    sw = SpoolWriter(str(spool), pid=4242)
    w = ReportWriter(d / "r.gpuscope", memory_limit=None if memory_limit == "none" else INGEST_MEMORY)
    names = [f"aten::op{i}" for i in range(60)]
    shapes = [f"[[{k},64],[64,{k % 7}]]" for k in range(1000)]
    rng = np.random.default_rng(0)
    me = psutil.Process()
    series = []
    per_chunk, t, t0 = 50_000, 0, time.monotonic()
    for i in range(rows // per_chunk):
        gaps = rng.integers(1_000, 50_000, per_chunk).cumsum() + t
        t = int(gaps[-1])
        pick, shape = rng.integers(0, 60, per_chunk).tolist(), rng.integers(0, 1000, per_chunk).tolist()
        args = rng.integers(0, 2**62, per_chunk).tolist()
        ops = [(s, s + 900, 1, names[n], k, shapes[h], '["float32","float32"]', "[[32,64]]", f'{{"seed":{a}}}')
               for k, (s, n, h, a) in enumerate(zip(gaps.tolist(), pick, shape, args))]
        ranges = [(s, s + 800, 1, i * per_chunk + k, "torch", names[n], "range", "torch", "forward", None)
                  for k, (s, n) in enumerate(zip(gaps[::10].tolist(), pick[::10]))]
        sw.write(rows={"torch_op": ops, "range": ranges})
        w.ingest(str(spool))
        size = sum(f.stat().st_size for f in d.glob("r.gpuscope*")) / 1e6
        series.append(((i + 1) * per_chunk, size, me.memory_info().rss / 1e6))
        if (i + 1) % 20 == 0:
            print(f"  {(i + 1) * per_chunk / 1e6:5.1f} M operators  report {size:6.1f} MB  rss {series[-1][2]:6.1f} MB"
                  f"  {time.monotonic() - t0:5.0f} s", flush=True)
    w.close(exit_code=0)
    tail = [(r / 1e6, mb) for r, _, mb in series[len(series) // 2:]]
    return {"rows": rows, "memory_limit": memory_limit, "report_mb": series[-1][1],
            "rss_at_1m_mb": next((mb for r, _, mb in series if r >= 1_000_000), series[-1][2]), "rss_end_mb": series[-1][2],
            "rss_peak_mb": max(mb for *_, mb in series),
            "growth_mb_per_million_rows_second_half": _slope_mb_per_min(tail) / 60, "series": series}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seconds", type=float, default=200)
    p.add_argument("--trace", default="torch,torch-ops,cpu,host")
    p.add_argument("--json", help="write the series and summary here")
    p.add_argument("--ingest", type=int, metavar="ROWS", help="ingest this many synthetic operators instead")
    p.add_argument("--memory-limit", choices=["default", "none"], default="default")
    args = p.parse_args()
    res = ingest(args.ingest, args.memory_limit) if args.ingest else measure(args.seconds, args.trace)
    summary = {k: v for k, v in res.items() if k != "series"}
    print(json.dumps(summary, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(res) + "\n")


if __name__ == "__main__":
    main()
