"""GPU check of --trace memory against independent truths; prints a JSON verdict (exit 1 if any check fails).

1. peak allocated in memory_sum == torch.cuda.max_memory_allocated() of the same run (exact);
2. the planted 2 GiB activation shows as the peak added of its layer (Net.planted, within 1%);
3. the OOM program: a memory_oom row with the request, and the largest live allocations at it are the
   known tensors (3 GiB in Net.big, 1 GiB in Net.small); analyze reports out_of_memory;
4. cost: the planted program's wall time with and without --trace memory (two rounds, interleaved).

    python tests/device/check_memory.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WL = HERE / "workloads"


def gpuscope(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuscope", *args], capture_output=True, text=True, timeout=300)


def table(report: Path) -> list[dict[str, object]]:
    res = gpuscope("stats", str(report), "-r", "memory_sum", "-f", "json")
    if res.returncode:
        raise SystemExit(f"stats failed: {res.stderr}")
    return json.loads(res.stdout)["memory_sum"]["rows"]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    out = Path(p.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    verdict: dict[str, object] = {}
    checks: dict[str, bool] = {}

    truth_path = out / "planted_truth.json"
    res = gpuscope("profile", "-t", "cuda,torch,memory", "-o", str(out / "planted"), "--force-overwrite",
                   "python", str(WL / "memory_planted.py"), "--out", str(truth_path))
    (out / "planted.log").write_text(res.stdout + res.stderr)
    truth = json.loads(truth_path.read_text())
    rows = table(out / "planted.gpuscope")
    # PyTorch's allocator's own series (CUPTI's CUDA-level one, source cuda, is beside it)
    rows = [r for r in rows if r.get("Source", "torch-cuda") == "torch-cuda"]
    peak = [r["Bytes (B)"] for r in rows if r["Section"] == "peak allocated" and r["Device"] == "gpu0"]
    layer = [r["Bytes (B)"] for r in rows if r["Section"] == "layer" and r["Name"] == truth["planted_layer"]]
    verdict["planted"] = {"truth": truth, "peak_allocated": peak, "planted_layer_peak_added": layer}
    checks["peak_exact"] = peak == [truth["max_memory_allocated"]]
    checks["planted_layer_within_1pct"] = bool(layer) and abs(layer[0] - truth["planted_bytes"]) <= 0.01 * truth[
        "planted_bytes"]

    oom_truth = out / "oom_truth.json"
    res = gpuscope("profile", "-t", "cuda,torch,memory", "-o", str(out / "oom"), "--force-overwrite",
                   "python", str(WL / "memory_oom.py"), "--out", str(oom_truth))
    (out / "oom.log").write_text(res.stdout + res.stderr)
    known = json.loads(oom_truth.read_text())
    rows = table(out / "oom.gpuscope")
    requested = [r["Bytes (B)"] for r in rows if r["Section"] == "out of memory: requested"]
    live = [[r["Name"], r["Bytes (B)"]] for r in rows if r["Section"] == "live at out of memory"]
    analyze = gpuscope("analyze", str(out / "oom.gpuscope"), "-f", "json")
    (out / "oom_analyze.json").write_text(analyze.stdout + analyze.stderr)
    verdict["oom"] = {"truth": known, "requested": requested, "live": live[:5], "exit": res.returncode}
    checks["oom_recorded"] = len(requested) == 1 and requested[0] >= known["requested_bytes"]
    checks["oom_largest_live"] = live[:2] == known["live"]
    checks["oom_analyzed"] = "out_of_memory" in analyze.stdout

    times: dict[str, list[float]] = {"untraced": [], "cuda,torch": [], "cuda,torch,memory": []}
    for _ in range(2):
        for trace in times:
            t = time.perf_counter()
            if trace == "untraced":
                subprocess.run([sys.executable, str(WL / "memory_planted.py"), "--steps", "30", "--out",
                                str(out / "cost_truth.json")], check=False, timeout=300)
            else:
                gpuscope("profile", "-t", trace, "-o", str(out / "cost"), "--force-overwrite", "python",
                         str(WL / "memory_planted.py"), "--steps", "30", "--out", str(out / "cost_truth.json"))
            times[trace].append(round(time.perf_counter() - t, 3))
    verdict["wall_s"] = times
    verdict["checks"] = checks
    verdict["ok"] = all(checks.values())
    print(json.dumps(verdict, indent=1))
    return 0 if verdict["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
