"""Import speed and memory of ``gpuscope import`` on a large synthetic PyTorch profiler trace.

The trace is the recorded GPT trace (tests/fixtures/gpt_eager.torch_trace.json.gz, 25,087 events)
repeated ``--copies`` times, each copy shifted in time and in correlation and external ids, written
in Kineto's own layout (plain JSON, and gzip with ``--gzip``). Each repeat imports it in a fresh
process (``python -m gpuscope import``) and reads that process's peak RSS from ``getrusage``; the
plain and gzip imports are interleaved. Prints events per second and peak RSS as median and spread.

    PYTHONPATH=src python bench/import_bench.py --copies 48 --repeats 3 --gzip
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "gpt_eager.torch_trace.json.gz"


def make_trace(out: Path, copies: int) -> int:
    """Write the synthetic trace; return its number of events."""
    with gzip.open(FIXTURE, "rt") as fh:
        doc = json.load(fh)
    events = doc.pop("traceEvents")
    ts = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(ts) - min(ts) + 1000.0
    n = 0
    with open(out, "w") as fh:
        fh.write("{\n" + ",\n".join(f'  "{k}": {json.dumps(v)}' for k, v in doc.items()) + ',\n  "traceEvents": [\n')
        for c in range(copies):
            shift, ids = c * span, c * 10_000_000
            for ev in events:
                e = dict(ev)
                if isinstance(e.get("ts"), (int, float)):
                    e["ts"] = round(e["ts"] + shift, 3)
                args = e.get("args")
                if isinstance(args, dict) and ("correlation" in args or "External id" in args):
                    args = dict(args)
                    for key in ("correlation", "External id"):
                        if isinstance(args.get(key), int):
                            args[key] += ids
                    e["args"] = args
                fh.write(("" if n == 0 else ",\n") + "  " + json.dumps(e))
                n += 1
        fh.write("\n  ]\n}\n")
    return n


def import_once(trace: Path, out: Path) -> tuple[float, float]:
    """Import ``trace`` in a fresh process; return (seconds, peak RSS in MiB of that process)."""
    out.unlink(missing_ok=True)
    code = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
            "r = subprocess.run([sys.executable, '-m', 'gpuscope', 'import', sys.argv[1], '-o', sys.argv[2]]); "
            "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
            "sys.exit(r.returncode)")
    res = subprocess.run([sys.executable, "-c", code, str(trace), str(out)], capture_output=True, text=True,
                         check=True)
    seconds, rss_kib = res.stdout.split()
    return float(seconds), float(rss_kib) / 1024


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--copies", type=int, default=48)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--gzip", action="store_true", help="also import the gzip of the trace")
    p.add_argument("--dir", default=None, help="scratch folder (default: a temporary one)")
    args = p.parse_args()
    scratch = Path(args.dir or tempfile.mkdtemp(prefix="gpuscope-import-bench-"))
    trace = scratch / "synthetic.json"
    t = time.perf_counter()
    events = make_trace(trace, args.copies)
    inputs = {"json": trace}
    if args.gzip:
        gz = scratch / "synthetic.json.gz"
        with open(trace, "rb") as src, gzip.open(gz, "wb", compresslevel=6) as dst:
            while chunk := src.read(1 << 24):
                dst.write(chunk)
        inputs["json.gz"] = gz
    print(f"trace: {events:,} events, {trace.stat().st_size / 1e6:.0f} MB JSON"
          + (f", {inputs['json.gz'].stat().st_size / 1e6:.0f} MB gzip" if args.gzip else "")
          + f" (written in {time.perf_counter() - t:.0f} s)")
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in inputs}
    for _ in range(args.repeats):
        for kind, path in inputs.items():  # interleaved
            results[kind].append(import_once(path, scratch / f"out-{kind}.gpuscope"))
    for kind, runs in results.items():
        secs = [s for s, _ in runs]
        rss = [m for _, m in runs]
        rates = [events / s for s in secs]
        print(f"{kind:8s} time median {statistics.median(secs):.1f} s (min {min(secs):.1f}, max {max(secs):.1f}); "
              f"{statistics.median(rates) / 1e3:.0f}k events/s (min {min(rates) / 1e3:.0f}k, max "
              f"{max(rates) / 1e3:.0f}k); peak RSS median {statistics.median(rss):.0f} MiB (max {max(rss):.0f})")
    report = scratch / "out-json.gpuscope"
    print(f"report: {report.stat().st_size / 1e6:.0f} MB")
    if not args.dir:
        for f in scratch.iterdir():
            f.unlink()
        os.rmdir(scratch)


if __name__ == "__main__":
    _ = resource  # the child's peak RSS is read through getrusage in the measuring process
    main()
