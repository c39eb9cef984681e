"""The roofline's numbers against independent measurements, on a GPU (H100 or H200).

    python3 tests/device/roofline_check.py OUTDIR

(a) Ceilings: ``calibrate("cuda")`` against a device-to-device copy of 1 GiB timed with CUDA events
    (DRAM ceiling within 10%) and a 16384^3 bf16 torch.matmul (BF16 ceiling at least 90% of it).
(b) FLOPs: ``workloads/gemm_conv.py`` profiled with ``-t cuda,nvtx,torch,torch-ops``, then every one
    of its kernel launches measured by ``gpuscope kernels --ncu``; for every matrix product and
    convolution operator (forward and backward), the work model's FLOPs against the FLOPs ncu counted
    in all of that operator's kernels (within 2%).

Writes OUTDIR/roofline_check.json, keeps ncu's CSV (OUTDIR/gemm_conv.ncu.csv) and the report
(OUTDIR/fixtures/gemm_conv.gpuscope.gz, a CPU test fixture), the roofline tables and chart; prints
one line per check and exits non-zero when one fails. About two minutes.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
DRAM_TOLERANCE = 0.10
BF16_SHARE = 0.90
FLOP_TOLERANCE = 0.02


def _event_seconds(fn: Any, reps: int) -> float:
    """Median seconds of one call over ``reps`` calls, each timed by its own pair of CUDA events."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return times[len(times) // 2]


def _copy_bandwidth(n: int) -> float:
    """Bytes read plus written per second by a device-to-device copy of ``n`` float32."""
    src = torch.ones(n, device="cuda")
    dst = torch.empty_like(src)
    return 2 * n * 4 / _event_seconds(lambda: dst.copy_(src), 20)


def _matmul_flops(m: int) -> float:
    """FLOP/s of an ``m``-square bf16 torch.matmul."""
    a = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    return 2 * m**3 / _event_seconds(lambda: torch.matmul(a, b), 10)


def check_ceilings() -> dict[str, Any]:
    from gpuscope.analysis.roofline.ceilings import ceilings_table, save
    from gpuscope.run.roof_benchmark import calibrate

    t0 = time.monotonic()
    c = calibrate("cuda")
    took = time.monotonic() - t0
    path = save(c)
    copy_bw = _copy_bandwidth(1 << 28)  # 1 GiB of float32 per buffer
    m = 16384
    mm_flops = _matmul_flops(m)
    dram_ratio = c.dram_bytes_per_s / copy_bw if c.dram_bytes_per_s else 0.0
    bf16_share = c.flops.get("tensor_bf16", 0.0) / mm_flops
    return {
        "device": c.device, "seconds": took, "cache": str(path),
        "ceilings": {k: v for k, v, _ in c.rows()}, "skipped": c.details.get("skipped"),
        "table": ceilings_table(c).records(),
        "dram": {"calibrated": c.dram_bytes_per_s, "copy_1gib": copy_bw, "ratio": dram_ratio,
                 "ok": abs(dram_ratio - 1) <= DRAM_TOLERANCE},
        "bf16": {"calibrated": c.flops.get("tensor_bf16"), "matmul_16384": mm_flops, "share": bf16_share,
                 "ok": bf16_share >= BF16_SHARE},
    }


def _gs(out: Path, log: str, *args: str, timeout: int = 300) -> None:
    with open(out / "logs" / log, "w") as fh:
        proc = subprocess.run([sys.executable, "-m", "gpuscope", *args], stdout=fh, stderr=subprocess.STDOUT,
                              timeout=timeout)
    if proc.returncode != 0:
        tail = (out / "logs" / log).read_text()[-3000:]
        raise SystemExit(f"gpuscope {' '.join(args)} failed ({proc.returncode}):\n{tail}")


def compare_ops(report: Path) -> list[dict[str, Any]]:
    """Per matrix-product and convolution operator of ``report``: the work model's FLOPs and the FLOPs
    ncu counted in all its kernels (launches matched by kernel name and order)."""
    import gpuscope
    from gpuscope.analysis.roofline.work.measured import launch_metrics
    from gpuscope.analysis.roofline.work.kernels import kernel_work

    with gpuscope.load(str(report)) as r:
        work = kernel_work(r)
        per = launch_metrics(r)
    work = work.sort_values(["name", "start_ns"]).reset_index(drop=True)
    work["launch"] = work.groupby("name").cumcount()
    merged = work.merge(per[["name", "launch", "flops", "tensor_flops"]].rename(
        columns={"flops": "ncu_flops", "tensor_flops": "ncu_tensor_flops"}), on=["name", "launch"], how="left")
    merged["model_flops"] = merged["flops"].where(merged["source"] == "model")
    rows: list[dict[str, Any]] = []
    for op_id, g in merged.dropna(subset=["torch_op_id"]).groupby("torch_op_id"):
        kinds = g["work_kind"].dropna()
        if kinds.empty or kinds.iloc[0] not in ("matmul", "conv"):
            continue
        model, measured = float(g["model_flops"].sum()), float(g["ncu_flops"].sum())
        complete = bool(g["ncu_flops"].notna().all())
        ratio = measured / model if model else None
        rows.append({"torch_op_id": int(op_id), "op": str(g["op_name"].dropna().iloc[0]), "kind": str(kinds.iloc[0]),
                     "kernels": [str(n)[:90] for n in g["name"]], "model_flops": model, "ncu_flops": measured,
                     "ncu_tensor_flops": float(g["ncu_tensor_flops"].sum()), "ratio": ratio,
                     "all_kernels_profiled": complete,
                     "ok": complete and ratio is not None and abs(ratio - 1) <= FLOP_TOLERANCE})
    return rows


def check_flops(out: Path) -> dict[str, Any]:
    import gpuscope

    report = out / "gemm_conv.gpuscope"
    _gs(out, "profile.txt", "profile", "-t", "cuda,nvtx,torch,torch-ops", "-o", str(report), "--force-overwrite",
        str(HERE / "workloads" / "gemm_conv.py"))
    with gpuscope.load(str(report)) as r:
        launches = r.count("kernel")
    _gs(out, "ncu.txt", "kernels", str(report), "--ncu", "-k", ".", "-c", str(launches), "--", sys.executable,
        str(HERE / "workloads" / "gemm_conv.py"))
    _gs(out, "roofline.txt", "roofline", str(report), "-o", str(out / "roofline.html"), "--force-overwrite")
    rows = compare_ops(report)
    kinds_seen = {r["kind"] for r in rows}
    fixtures = out / "fixtures"
    fixtures.mkdir(exist_ok=True)
    with open(report, "rb") as src, gzip.open(fixtures / "gemm_conv.gpuscope.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    shutil.copy(out / "gemm_conv.ncu.csv", fixtures / "gemm_conv.ncu.csv")
    with gpuscope.load(str(report)) as r:
        profiled = r.sql("SELECT count(DISTINCT ncu_id) FROM kernel_metric")[0][0]
    return {"kernel_launches": launches, "profiled_launches": int(profiled), "ops": rows,
            "ok": bool(rows) and {"matmul", "conv"} <= kinds_seen and all(r["ok"] for r in rows)}


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(sys.argv[1]).resolve()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    os.environ["GPUSCOPE_CACHE_DIR"] = str(out / "cache")
    ceilings = check_ceilings()
    d, b = ceilings["dram"], ceilings["bf16"]
    print(f"ceilings {ceilings['device']}: measured in {ceilings['seconds']:.1f} s: "
          + ", ".join(f"{k} {v / 1e12:.3g}T" for k, v in ceilings["ceilings"].items()))
    print(f"dram: calibrated {d['calibrated'] / 1e12:.3f} TB/s vs 1 GiB copy {d['copy_1gib'] / 1e12:.3f} TB/s "
          f"(ratio {d['ratio']:.3f}) {'ok' if d['ok'] else 'FAIL'}")
    print(f"bf16: calibrated {(b['calibrated'] or 0) / 1e12:.1f} TFLOP/s vs 16384^3 matmul "
          f"{b['matmul_16384'] / 1e12:.1f} TFLOP/s ({100 * b['share']:.1f}%) {'ok' if b['ok'] else 'FAIL'}")
    flops = check_flops(out)
    for r in flops["ops"]:
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.4f}"
        print(f"flops {r['op']} ({len(r['kernels'])} kernels): model {r['model_flops'] / 1e9:.3f} GFLOP, ncu "
              f"{r['ncu_flops'] / 1e9:.3f} GFLOP (tensor {r['ncu_tensor_flops'] / 1e9:.3f}), ratio {ratio} "
              f"{'ok' if r['ok'] else 'FAIL'}")
    result = {"check": "roofline", "ceilings": ceilings, "flops": flops,
              "ok": d["ok"] and b["ok"] and flops["ok"]}
    (out / "roofline_check.json").write_text(json.dumps(result, indent=2, default=str))
    print(f"roofline_check: {'ok' if result['ok'] else 'FAIL'} ({flops['profiled_launches']} of "
          f"{flops['kernel_launches']} launches profiled; JSON {out / 'roofline_check.json'}, "
          f"ncu CSV {out / 'gemm_conv.ncu.csv'})")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
