"""The fleet summary (per-kernel summary across ranks, ``fleet_kern_sum``) over many synthetic rank
reports in Parquet form, on DuckDB and on Dask: wall time and peak memory per engine.

    PYTHONPATH=src python bench/fleet_bench.py --reports 8 16 32 --kernels 1000000 --repeats 3

Each report: ``--kernels`` kernels of 300 names on 1,000 launch configurations, one rank row; written
once into a scratch directory (``--dir``, default a temporary one). Every measurement runs in a
fresh process (peak RSS of it and of its children, the Dask workers), engines interleaved.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

from gpuscope.trace import schema

NAMES, CONFIGS = 300, 1000


def write_rank(folder: Path, rank: int, world: int, kernels: int) -> None:
    """One synthetic rank report as a Parquet export folder (every table of the schema)."""
    folder.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    for table in schema.TABLES:
        con.execute(f"CREATE TABLE {table} ({schema.TABLES[table]})")
    con.execute(f"""INSERT INTO string SELECT i, 'kernel_' || i || '_void_gemm<float,128,64>' FROM range({NAMES}) t(i)""")
    con.execute(f"INSERT INTO kernel_config (id, name_id, mangled_id) SELECT i, i % {NAMES}, i % {NAMES} "
                f"FROM range({CONFIGS}) t(i)")
    con.execute(f"""INSERT INTO kernel (start_ns, end_ns, pid, device_id, stream_id, correlation_id, config_id)
                    SELECT i * 2000, i * 2000 + 500 + (hash(i + {rank}) % 1000), {1000 + rank}, {rank % 8}, 7, i,
                           (hash(i) % {CONFIGS})::INTEGER FROM range({kernels}) t(i)""")
    con.execute(f"INSERT INTO rank VALUES ({1000 + rank}, {rank}, {rank % 8}, {world}, {rank // 8}, "
                f"'node{rank // 8}', 'nccl', 'torchrun')")
    con.execute(f"""INSERT INTO meta VALUES ('command', '["train.py"]'), ('started_at', '"{rank}"')""")
    for table in schema.TABLES:
        target = str(folder / f"{table}.parquet")
        con.execute(f"COPY {table} TO '{target}' (FORMAT PARQUET, COMPRESSION ZSTD)")
    (folder / "schema.json").write_text(json.dumps({"format": "gpuscope-parquet"}))
    con.close()


def measure(engine: str, folders: list[str]) -> tuple[float, float]:
    """Run the summary in a fresh process; return (wall s, peak RSS MB of it and its children)."""
    code = f"""
import resource, sys, time, tempfile
from pathlib import Path
from gpuscope.analysis.distributed.fleet.sources import open_sources
from gpuscope.analysis.distributed.fleet.engines import run_summaries
folders = {folders!r}
t0 = time.perf_counter()
sources = open_sources(folders, Path(tempfile.mkdtemp()), print)
out = run_summaries(["fleet_kern_sum"], sources, {engine!r}, None, by_report=False)
wall = time.perf_counter() - t0
assert len(out["fleet_kern_sum"]) == {NAMES}
own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(wall, own, kids)
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    wall, own, kids = res.stdout.split()[-3:]
    return float(wall), (int(own) + int(kids)) / 1024  # KB -> MB; workers: the largest one


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reports", type=int, nargs="+", default=[8, 16, 32])
    ap.add_argument("--kernels", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--engines", nargs="+", default=["duckdb", "dask"])
    ap.add_argument("--dir")
    args = ap.parse_args()
    root = Path(args.dir or tempfile.mkdtemp(prefix="fleet-bench-"))
    most = max(args.reports)
    t0 = time.perf_counter()
    for r in range(most):
        folder = root / f"rank{r:03d}"
        if not (folder / "schema.json").exists():
            write_rank(folder, r, most, args.kernels)
    size = sum(f.stat().st_size for f in root.rglob("*.parquet")) / 1e6
    print(f"{most} reports x {args.kernels:,} kernels in {root} ({size:.0f} MB Parquet), "
          f"written in {time.perf_counter() - t0:.1f} s", flush=True)
    for n in args.reports:
        folders = [str(root / f"rank{r:03d}") for r in range(n)]
        runs: dict[str, list[tuple[float, float]]] = {e: [] for e in args.engines}
        for _ in range(args.repeats):
            for engine in args.engines:  # interleaved
                runs[engine].append(measure(engine, folders))
        for engine, got in runs.items():
            walls = sorted(w for w, _ in got)
            print(f"{n:4d} reports ({n * args.kernels / 1e6:.0f} M kernels) {engine:6s}: wall min/median/max "
                  f"{walls[0]:.2f} / {statistics.median(walls):.2f} / {walls[-1]:.2f} s, "
                  f"peak RSS {max(m for _, m in got):.0f} MB", flush=True)


if __name__ == "__main__":
    main()
