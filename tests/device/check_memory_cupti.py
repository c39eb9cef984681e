"""GPU check of CUPTI's memory records (``-t cuda,memory``) against what a program allocated through the driver API.

Run from the repository root on the GPU machine (gpuscope importable, e.g. PYTHONPATH=src):

    python3 tests/device/check_memory_cupti.py --out $OUT/memory_cupti

The same file is the profiled program (``--program TRUTH``): after torch creates its context, it allocates
through libcuda with ctypes (``cuMemAlloc_v2`` of 64 MiB, 1 GiB and 3 MiB + 512 B, a 32 MiB
``cuMemAllocAsync`` from the device's default pool, 8 MiB of pinned host memory with ``cuMemHostAlloc``),
frees them in a known order, and lets PyTorch's caching allocator take a 256 MiB segment; it writes each
address and size, and PyTorch's segments, as the truth. The check then reads the report:

- every device allocation and free of the program is an ``alloc``/``free`` row of source ``cuda`` at its
  address, in the program's order, on device 0, with its size (2 MiB multiples exact; the odd size within
  2 MiB, and whether it is exact is reported); the pinned host memory, where CUPTI records it, on device -1
  (reported, not required);
- every segment PyTorch's allocator holds at the end is a ``cuda`` allocation of its address and size;
- the peak of the device's ``cuda`` series is at least what the program held at once through libcuda, and
  at most that plus PyTorch's ``max_memory_reserved`` and 64 MiB; no total is negative;
- memory_sum shows that peak; CUPTI dropped nothing and no record kind went unread.

Writes ``check_memory_cupti.json`` under ``--out`` (also printed); exits 1 when a check fails. About 20 s.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

MIB = 1 << 20


def program(truth_path: str) -> None:
    """Allocate and free known blocks through libcuda (and PyTorch), and write them as the truth."""
    import torch

    torch.zeros(1, device="cuda")  # torch's primary context, current on this thread from now on
    torch.cuda.synchronize()
    cuda = ctypes.CDLL("libcuda.so.1")
    done: list[dict[str, Any]] = []
    live: dict[int, int] = {}
    most = 0

    def check(rc: int, what: str) -> None:
        if rc != 0:
            raise SystemExit(f"{what} returned CUDA error {rc}")

    def alloc(n: int) -> int:
        nonlocal most
        p = ctypes.c_uint64()
        check(cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n)), "cuMemAlloc_v2")
        done.append({"op": "alloc", "address": p.value, "bytes": n, "device": 0, "api": "cuMemAlloc"})
        live[p.value] = n
        most = max(most, sum(live.values()))
        return p.value

    def free(p: int) -> None:
        check(cuda.cuMemFree_v2(ctypes.c_uint64(p)), "cuMemFree_v2")
        done.append({"op": "free", "address": p})
        live.pop(p)

    a = alloc(64 * MIB)
    b = alloc(1024 * MIB)
    c = alloc(3 * MIB + 512)
    free(b)
    p = ctypes.c_uint64()
    check(cuda.cuMemAllocAsync(ctypes.byref(p), ctypes.c_size_t(32 * MIB), ctypes.c_void_p(0)), "cuMemAllocAsync")
    check(cuda.cuStreamSynchronize(ctypes.c_void_p(0)), "cuStreamSynchronize")
    done.append({"op": "alloc", "address": p.value, "bytes": 32 * MIB, "device": 0, "api": "cuMemAllocAsync"})
    check(cuda.cuMemFreeAsync(ctypes.c_uint64(p.value), ctypes.c_void_p(0)), "cuMemFreeAsync")
    check(cuda.cuStreamSynchronize(ctypes.c_void_p(0)), "cuStreamSynchronize")
    done.append({"op": "free", "address": p.value})
    host = ctypes.c_void_p()
    check(cuda.cuMemHostAlloc(ctypes.byref(host), ctypes.c_size_t(8 * MIB), ctypes.c_uint(0)), "cuMemHostAlloc")
    done.append({"op": "alloc", "address": host.value, "bytes": 8 * MIB, "device": -1, "api": "cuMemHostAlloc"})
    check(cuda.cuMemFreeHost(host), "cuMemFreeHost")
    done.append({"op": "free", "address": host.value})
    t = torch.empty(256 * MIB, dtype=torch.uint8, device="cuda")  # a 256 MiB segment of PyTorch's allocator
    del t
    free(a)
    free(c)
    torch.cuda.synchronize()
    segments = [{"address": int(s["address"]), "bytes": int(s["total_size"])} for s in torch.cuda.memory_snapshot()]
    Path(truth_path).write_text(json.dumps({"events": done, "segments": segments, "held_at_once": most,
                                            "max_reserved": int(torch.cuda.max_memory_reserved())}))


def check(report_path: Path, truth: dict[str, Any]) -> dict[str, Any]:
    """Return the verdict: the report's CUDA-level memory against the truth."""
    import gpuscope
    from gpuscope.analysis.memory.summaries import memory_sum

    checks: dict[str, bool] = {}
    info: dict[str, Any] = {}
    with gpuscope.load(str(report_path)) as r:
        rows = r.sql("""SELECT address, kind, bytes, device_id, allocated_bytes, stream_id, ts_ns FROM memory_event
                        WHERE source = 'cuda' ORDER BY ts_ns""")
        by_address: dict[int, list[tuple[Any, ...]]] = {}
        for row in rows:
            by_address.setdefault(int(row[0] or 0), []).append(row)
        # the program's allocations and frees, in its order, among the recorded rows (an address may be reused
        # later, by PyTorch's allocator or the pool): each matched to the first recorded row after the last match
        events, matched, i = truth["events"], [], 0
        for row in rows:
            if i < len(events) and (row[1], int(row[0] or 0)) == (events[i]["op"], events[i]["address"]):
                matched.append((events[i], row))
                i += 1
        info["matched"] = f"{i} of {len(events)}"
        found = [{**e, "recorded_bytes": row[2], "recorded_device": row[3], "stream_id": row[5]}
                 for e, row in matched if e["op"] == "alloc"]
        info["allocations"] = found
        device = [f for f in found if f["device"] >= 0]
        host = [e for e in events if e["op"] == "alloc" and e["device"] < 0]
        info["pinned_host_recorded"] = [f for f in found if f["device"] < 0]
        device_events = [e for e in events if e["address"] not in {h["address"] for h in host}]
        checks["every_device_allocation_and_free_recorded_in_order"] = all(
            any(m[0] is e for m in matched) for e in device_events)
        checks["sizes"] = bool(device) and all(
            f["recorded_bytes"] == f["bytes"] if f["bytes"] % (2 * MIB) == 0 else
            f["bytes"] <= f["recorded_bytes"] < f["bytes"] + 2 * MIB for f in device)
        info["odd_size_exact"] = [f["recorded_bytes"] == f["bytes"] for f in device if f["bytes"] % (2 * MIB)]
        checks["devices"] = all(f["recorded_device"] == f["device"] for f in device)
        segs = [(s["address"], s["bytes"], [(x[1], x[2]) for x in by_address.get(s["address"], [])])
                for s in truth["segments"]]
        info["torch_segments"] = segs
        checks["torch_segments_recorded"] = bool(segs) and all(("alloc", b) in got for _, b, got in segs)
        (peak,) = r.sql("SELECT coalesce(max(allocated_bytes), 0) FROM memory_event WHERE source = 'cuda' "
                        "AND device_id = 0")[0]
        low, high = truth["held_at_once"], truth["held_at_once"] + truth["max_reserved"] + 64 * MIB
        info["peak"] = {"recorded": peak, "at_least": low, "at_most": high}
        checks["peak_bounds"] = low <= peak <= high
        checks["no_negative_total"] = r.sql("SELECT count(*) FROM memory_event WHERE allocated_bytes < 0")[0][0] == 0
        table = memory_sum(r).records()
        shown = [x["Bytes"] for x in table if x["Section"] == "peak allocated" and x["Source"] == "cuda"
                 and x["Device"] == "gpu0"]
        checks["memory_sum_peak"] = shown == [peak]
        dropped = dict(r.sql("SELECT source, sum(count) FROM dropped GROUP BY source"))
        unread = [m for (m,) in r.sql("SELECT message FROM diagnostic WHERE message LIKE '%not read by gpuscope%'")]
        info["dropped"], info["unread"] = dropped, unread
        checks["nothing_dropped_or_unread"] = not dropped.get("cupti") and not unread
    return {"checks": checks, "info": info, "ok": all(checks.values())}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", help="folder for check_memory_cupti.json")
    p.add_argument("--program", metavar="TRUTH", help="(internal) run the profiled program, write its truth here")
    args = p.parse_args()
    if args.program:
        program(args.program)
        return 0
    if not args.out:
        p.error("--out is required")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        truth_path, report = Path(work) / "truth.json", Path(work) / "cupti_memory"
        res = subprocess.run([sys.executable, "-m", "gpuscope", "profile", "-t", "cuda,memory", "-o", str(report),
                              "--force-overwrite", sys.executable, __file__, "--program", str(truth_path)],
                             capture_output=True, text=True, timeout=300, check=False)
        (out / "profile.log").write_text(res.stdout + res.stderr)
        if res.returncode or not truth_path.exists():
            verdict: dict[str, Any] = {"ok": False, "error": f"profile exited {res.returncode}",
                                       "log_tail": (res.stdout + res.stderr)[-2000:]}
        else:
            verdict = check(report.with_suffix(".gpuscope"), json.loads(truth_path.read_text()))
    (out / "check_memory_cupti.json").write_text(json.dumps(verdict, indent=1, default=str))
    print(json.dumps(verdict, indent=1, default=str))
    return 0 if verdict["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
