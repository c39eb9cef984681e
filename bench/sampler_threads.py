"""The Python sampler beside many idle threads: how many samples it takes of a busy Python loop, and
what it costs the loop, against the same loop untraced and under an older gpuscope.

A program with N idle threads (as PyTorch's, a DataLoader's or a server's) runs a pure-Python loop;
each run is a fresh ``gpuscope profile -t cpu`` process (or an untraced one), modes interleaved per
round. Reported per mode: the loop's wall time (median and range over rounds, and its ratio to the
untraced loop of the same round), the distinct sample times taken while the program ran, the
sampler's wall time between waking and sleeping (``held_ns``), and the readings of the threads' CPU
times.

    PYTHONPATH=src python bench/sampler_threads.py --previous DIR --threads 60 --rounds 5 [--native]

With ``--native`` the idle threads are OpenMP's (torch's intra-op pool), which Python does not know.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = """
import sys, threading, time
ev = threading.Event()
if sys.argv[3] == "native":  # OpenMP's threads, idle once a parallel operator has run
    import torch
    torch.set_num_threads(int(sys.argv[1]) + 1)
    torch.ones(1 << 22).mul_(2)
    time.sleep(0.5)
else:
    for _ in range(int(sys.argv[1])):
        threading.Thread(target=ev.wait, daemon=True).start()
t0 = time.perf_counter()
s = 0
for i in range(int(sys.argv[2])):
    s += i * i % 7
print("LOOP", time.perf_counter() - t0)
ev.set()
"""


def run(mode: str, src: str, prog: str, threads: int, work: int, out: str, kind: str = "python") -> dict:
    """One fresh process; its loop time and, traced, what the report says of the sampler."""
    argv = [sys.executable, prog, str(threads), str(work), kind]
    env = dict(os.environ)
    if mode != "untraced":
        argv = [sys.executable, "-m", "gpuscope", "profile", "-t", "cpu", "-o", out, "--force-overwrite", *argv[1:]]
        env["PYTHONPATH"] = src
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
    loop = next(float(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("LOOP"))
    row = {"mode": mode, "loop_s": loop}
    if mode != "untraced":
        import duckdb

        con = duckdb.connect(out + ".gpuscope", read_only=True)
        detail = json.loads(con.execute("SELECT detail FROM collector WHERE name = 'sampler'").fetchone()[0])
        row["samples"] = con.execute("SELECT count(DISTINCT ts_ns) FROM cpu_sample").fetchone()[0]
        row["readings"] = con.execute("SELECT count(DISTINCT ts_ns) FROM thread_time").fetchone()[0]
        row["held_s"] = detail["held_ns"] / 1e9
        con.close()
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--previous", required=True, help="the src folder of the older gpuscope")
    p.add_argument("--threads", type=int, default=60)
    p.add_argument("--work", type=int, default=8_000_000, help="iterations of the Python loop")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--native", action="store_true", help="idle OpenMP threads (torch's) instead of Python ones")
    args = p.parse_args()
    modes = {"untraced": "", "previous": args.previous, "current": str(ROOT / "src")}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        prog = os.path.join(tmp, "busy.py")
        Path(prog).write_text(PROGRAM)
        for rnd in range(args.rounds):
            order = list(modes)[rnd % 3:] + list(modes)[:rnd % 3]
            for mode in order:
                row = run(mode, modes[mode], prog, args.threads, args.work, os.path.join(tmp, "r"),
                          "native" if args.native else "python")
                rows.append({**row, "round": rnd})
                print(json.dumps(rows[-1]), flush=True)
    base = {r["round"]: r["loop_s"] for r in rows if r["mode"] == "untraced"}
    kind = "native (OpenMP)" if args.native else "Python"
    print(f"\n{args.threads} idle {kind} threads, {args.rounds} rounds\n")
    print("| mode | loop, median (range) | / untraced | samples | sampler awake | thread-time readings |")
    print("| --- | --- | --- | --- | --- | --- |")
    for mode in modes:
        mine = [r for r in rows if r["mode"] == mode]
        loops = [r["loop_s"] for r in mine]
        ratios = [r["loop_s"] / base[r["round"]] for r in mine]
        def med(key: str) -> str:
            vals = [r[key] for r in mine if key in r]
            return f"{statistics.median(vals):.4g} ({min(vals):.4g}-{max(vals):.4g})" if vals else "-"
        print(f"| {mode} | {statistics.median(loops):.2f} s ({min(loops):.2f}-{max(loops):.2f}) | "
              f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) | {med('samples')} | "
              f"{med('held_s')} s | {med('readings')} |")


if __name__ == "__main__":
    main()
