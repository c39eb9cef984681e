"""Launch anchors against CUPTI's queued times, on a GPU: does every kernel land in the same range?

Profiles a GPU-bound MLP (large matrices: the GPU runs far behind the host, so a kernel's GPU start
says little about when it was launched) and the eager GPT, with ``-t cuda,nvtx,torch`` and CUPTI's
latency timestamps on, so each kernel has its queued time (the truth) as well as the anchors.
For each kernel it compares the innermost range found from the queued time with the one found
from the anchors (the same report with ``queued_ns`` cleared), and with the one found from the
GPU start alone (anchors removed too). Exits 1 unless the anchors agree with the queued times for at least 99.9% of kernels.

    python3 tests/device/check_anchors.py --out anchors.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import duckdb
import pandas as pd

import gpuscope
from gpuscope.analysis.ops.attribution import innermost

HERE = os.path.dirname(os.path.abspath(__file__))
WL = os.path.join(HERE, "workloads")
WORKLOADS = {
    "mlp_gpu_bound": [os.path.join(WL, "mlp.py"), "--batch", "2048", "--width", "2048", "--steps", "6", "--warmup", "2"],
    "gpt_eager": [os.path.join(WL, "transformer.py"), "--steps", "4", "--warmup", "2"],
}


def _variant(src: str, dst: str, sql: list[str]) -> str:
    shutil.copy(src, dst)
    con = duckdb.connect(dst)
    for stmt in sql:
        con.execute(stmt)
    con.close()
    return dst


def _inner(path: str) -> dict[tuple[int, int], object]:
    """Each kernel (by its GPU start and end) -> the id of its innermost range (None: none)."""
    with gpuscope.load(path) as r:
        k = innermost(r)
        k = k[k["kind"] == "kernel"]
        rids = [None if pd.isna(rid) else int(rid) for rid in k["range_id"]]
        return {(int(s), int(e)): rid for s, e, rid in zip(k["start_ns"], k["end_ns"], rids)}


def check(name: str, argv: list[str], d: str) -> dict:
    out = os.path.join(d, name)
    env = {**os.environ, "GPUSCOPE_LATENCY_TIMESTAMPS": "1"}
    proc = subprocess.run([sys.executable, "-m", "gpuscope", "profile", "--force-overwrite", "-t", "cuda,nvtx,torch",
                           "-o", out, *argv], env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode:
        return {"error": proc.stderr[-1500:]}
    path = out + ".gpuscope"
    with gpuscope.load(path) as r:
        kernels = r.count("kernel")
        queued = r.count("kernel WHERE queued_ns IS NOT NULL AND queued_ns > 0")
        anchors = r.sql("SELECT count(*) FROM launch_call l JOIN string s ON s.id = l.api_name_id "
                        "WHERE s.value = 'cuDriverGetVersion'")[0][0]
        api_calls = r.count("api_call")
        ranges = r.count("nvtx_range WHERE kind = 'range'")
        lag = r.sql("SELECT median(start_ns - queued_ns) / 1e3 FROM kernel WHERE queued_ns > 0")[0][0]
    truth = _inner(path)
    anchored = _inner(_variant(path, path + ".anchored", ["UPDATE kernel SET queued_ns = NULL"]))
    start_only = _inner(_variant(path, path + ".start", [
        "UPDATE kernel SET queued_ns = NULL",
        "DELETE FROM launch_call WHERE api_name_id IN (SELECT id FROM string WHERE value = 'cuDriverGetVersion')"]))
    keys = truth.keys()
    agree = sum(anchored.get(k) == truth[k] for k in keys) / max(1, len(keys))
    agree_start = sum(start_only.get(k) == truth[k] for k in keys) / max(1, len(keys))
    return {"kernels": kernels, "with_queued_time": queued, "anchors": anchors, "api_calls": api_calls,
            "ranges": ranges, "median_queue_us": lag, "agree_anchored": agree, "agree_gpu_start_only": agree_start}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as d:
        for name, argv in WORKLOADS.items():
            results[name] = res = check(name, argv, d)
            print(name, json.dumps(res), flush=True)
    ok = all("error" not in r and r["kernels"] > 100 and r["anchors"] > 10 and r["with_queued_time"] == r["kernels"]
             and r["agree_anchored"] >= 0.999 for r in results.values())
    doc = {"results": results, "ok": ok}
    with open(args.out, "w") as fh:
        json.dump(doc, fh, indent=1)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
