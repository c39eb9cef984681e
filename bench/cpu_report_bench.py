"""The reader commands on a large CPU report: ``stats``, ``analyze``, ``roofline`` and ``export`` of a
report with about 1.5 million PyTorch operators (what a 2-minute CPU training run records with
``--trace torch-ops``), each a fresh ``gpuscope`` process, repeats interleaved.

The report is the recorded ``cpu_balanced`` fixture (3.4 s: 3,876 operators, 551 ranges, 1,249
samples) tiled ``--copies`` times one after the other, ids and times shifted, so its operators, ranges
and samples have the shapes a real run has.

    PYTHONPATH=src python bench/cpu_report_bench.py --copies 400 --repeats 3
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from conftest import unpack_fixture  # noqa: E402

COMMANDS = {
    "stats": ["stats", "{r}"],
    "analyze": ["analyze", "{r}"],
    "roofline": ["roofline", "{r}"],
    "export": ["export", "{r}", "-o", "{d}/x.trace.json", "--force-overwrite"],
}


def tile(path: Path, copies: int) -> dict[str, int]:
    """Repeat the report's operators, ranges and samples ``copies`` times in time; return row counts."""
    con = duckdb.connect(str(path))
    (t0, t1) = con.execute("SELECT min(start_ns), max(end_ns) FROM torch_op").fetchone()  # type: ignore[misc]
    span = int(t1 - t0) + 1_000_000
    max_id = con.execute("SELECT max(id) FROM nvtx_range").fetchone()[0]  # type: ignore[index]
    con.execute(f"CREATE TEMP TABLE k AS SELECT range AS k FROM range(1, {copies})")
    con.execute(f"""INSERT INTO torch_op SELECT start_ns + k * {span}, end_ns + k * {span}, pid, tid, name_id, seq,
                    shapes, dtypes, out_shapes, scalars FROM torch_op, k""")
    con.execute(f"""INSERT INTO nvtx_range SELECT start_ns + k * {span}, end_ns + k * {span}, pid, tid,
                    id + k * {max_id}, domain_id, name_id, kind, source, category, color FROM nvtx_range, k
                    WHERE start_ns >= {t0}""")
    con.execute(f"""INSERT INTO cpu_sample SELECT ts_ns + k * {span}, pid, tid, stack_id, weight_ns
                    FROM cpu_sample, k WHERE ts_ns >= {t0}""")
    con.execute(f"UPDATE process SET end_ns = end_ns + {(copies - 1) * span}")
    con.execute(f"UPDATE meta SET value = '{(copies - 1) * span + 3_442_601_895}' WHERE key = 'wall_ns'")
    con.execute("CHECKPOINT")
    counts = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in  # type: ignore[index]
              ("torch_op", "nvtx_range", "cpu_sample")}
    con.close()
    return counts


def run(argv: list[str]) -> float:
    """Run one gpuscope command; return its wall time in seconds (fails loudly on a non-zero exit)."""
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "gpuscope", *argv], capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t
    if proc.returncode:
        raise SystemExit(f"gpuscope {' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--copies", type=int, default=400)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--only", action="append", choices=sorted(COMMANDS))
    args = p.parse_args()
    d = Path(tempfile.mkdtemp(prefix="gpuscope-bench-"))
    report = unpack_fixture("cpu_balanced", d)
    t = time.perf_counter()
    counts = tile(report, args.copies)
    print(f"report: {counts} ({report.stat().st_size / 1e6:.0f} MB), made in {time.perf_counter() - t:.1f} s")
    names = args.only or list(COMMANDS)
    times: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(args.repeats):
        for name in names:  # interleaved: each repeat runs every command once
            times[name].append(run([a.format(r=report, d=d) for a in COMMANDS[name]]))
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"DuckDB {duckdb.__version__}, {time.strftime('%Y-%m-%d')}")
    print("| command | min | median | max |\n| --- | ---: | ---: | ---: |")
    for name, ts in times.items():
        print(f"| `gpuscope {name}` | {min(ts):.2f} s | {statistics.median(ts):.2f} s | {max(ts):.2f} s |")


if __name__ == "__main__":
    main()
