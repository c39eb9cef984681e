"""Cost of gpuscope's CPU-side collectors on CPU work, runs interleaved (no GPU needed).

Each run is a fresh process; the workload times its own fixed amount of work
(bench/workloads/cpu_work.py). Modes run A B C D ... within each round; the ratio is traced over
untraced of the same round, summarized by median and range.

    python3 bench/cpu_overhead.py --rounds 5
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

WORK = Path(__file__).resolve().parent / "workloads" / "cpu_work.py"
MODES = {
    "untraced": None,
    "cpu (sampler)": "cpu",
    "torch,host": "torch,host",
    "torch,host,cpu (default without a GPU)": "torch,host,cpu",
}


def run(mode: str | None, kind: str, scratch: str) -> float:
    out = os.path.join(scratch, "t.json")
    cmd = [sys.executable, str(WORK), kind, out]
    if mode is not None:
        cmd = [sys.executable, "-m", "gpuscope", "profile", "-t", mode, "-o", os.path.join(scratch, "r"),
               "--force-overwrite", *cmd[1:]]
    subprocess.run(cmd, check=True, capture_output=True)
    return float(json.load(open(out))["seconds"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    print("| work | mode | seconds (median) | ratio (median) | range |\n| --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as scratch:
        for kind in ("python", "torch"):
            times: dict[str, list[float]] = {m: [] for m in MODES}
            for _ in range(args.rounds):
                for label, mode in MODES.items():
                    times[label].append(run(mode, kind, scratch))
            for label in MODES:
                ratios = [t / b for t, b in zip(times[label], times["untraced"])]
                print(f"| {kind} | {label} | {statistics.median(times[label]):.3f} | "
                      f"{statistics.median(ratios):.3f} | {min(ratios):.3f} - {max(ratios):.3f} |", flush=True)


if __name__ == "__main__":
    main()
