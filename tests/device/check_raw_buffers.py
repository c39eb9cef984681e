"""CUPTI buffers read in raw against cupti-python's per-record objects, on a GPU.

Runs the same MLP program (every record kind gpuscope reads: kernels, copies, sets, API calls,
synchronizations, NVTX, overhead) under ``gpuscope profile -t cuda,cuda-api,nvtx,torch`` twice:
with the raw buffers and every buffer's walk checked record by record against CUPTI's iterator
(GPUSCOPE_VERIFY_WALK=1), and with cupti-python's objects (GPUSCOPE_RAW_BUFFERS=0). Checks that the
walk never differed from the iterator and that both reports hold the same GPU records (counts,
kernel names, grid sizes); API call counts may differ by the few calls gpuscope itself makes.

    python3 tests/device/check_raw_buffers.py --out raw_check.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import gpuscope

HERE = os.path.dirname(os.path.abspath(__file__))
MLP = [os.path.join(HERE, "workloads", "mlp.py"), "--steps", "30", "--warmup", "3", "--nvtx"]
TRACE = "cuda,cuda-api,nvtx,torch"


def profile(path: str, env: dict[str, str]) -> dict:
    subprocess.run([sys.executable, "-m", "gpuscope", "profile", "--force-overwrite", "-t", TRACE, "-o", path,
                    *MLP], check=True, env={**os.environ, **env}, timeout=300, capture_output=True)
    with gpuscope.load(path + ".gpuscope") as r:
        detail = r.sql("SELECT detail FROM collector WHERE name = 'cupti'")[0][0]
        facts = {
            "detail": detail,
            "kernels": r.count("kernel"),
            "memcpy": r.count("memcpy"),
            "memset": r.count("memset"),
            "api_calls": r.count("api_call"),
            "sync": r.count("sync"),
            "nvtx_ranges": r.sql("SELECT count(*) FROM nvtx_range WHERE source = 'nvtx'")[0][0],
            "overhead": r.count("overhead"),
            "dropped": int(r.sql("SELECT coalesce(sum(count), 0) FROM dropped")[0][0]),
            "kernel_names": sorted(r.kernels()["name"].value_counts().items()),
            "grid_x_sum": int(r.kernels()["grid_x"].sum()),
        }
    return facts


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        raw = profile(os.path.join(d, "raw"), {"GPUSCOPE_VERIFY_WALK": "1"})
        objects = profile(os.path.join(d, "objects"), {"GPUSCOPE_RAW_BUFFERS": "0"})
    fields = dict(item.split("=", 1) for item in raw["detail"].split() if "=" in item)
    same = [k for k in ("kernels", "memcpy", "memset", "sync", "nvtx_ranges", "kernel_names", "grid_x_sum")
            if raw[k] == objects[k]]
    checks = {
        "raw path used": "raw_buffers" in raw["detail"] and "raw_buffers" not in objects["detail"],
        "every record checked": int(fields.get("walk_checked", 0)) > 1000,
        "walk equals CUPTI's iterator": fields.get("walk_mismatches") == "0",
        "same GPU records both ways": len(same) == 7,
        "nothing dropped": raw["dropped"] == 0 and objects["dropped"] == 0,
    }
    doc = {"raw": {k: v for k, v in raw.items() if k != "kernel_names"},
           "objects": {k: v for k, v in objects.items() if k != "kernel_names"},
           "kernel_names_raw": len(raw["kernel_names"]), "same": same, "checks": checks}
    with open(args.out, "w") as fh:
        json.dump(doc, fh, indent=1)
    print(json.dumps(doc, indent=1))
    sys.exit(0 if all(checks.values()) else 1)


if __name__ == "__main__":
    main()
