"""Summarize the memory runs of run_all.sh: RSS growth per million kernels and CPU per record.

    python3 tests/device/memory_summary.py OUT/memory_untraced.json OUT/memory_raw.json[:REPORT] ...

Each argument is a many_kernels.py result, optionally with ``:report.gpuscope`` for its record count.
"""

from __future__ import annotations

import json
import sys


def row(arg: str) -> dict:
    path, _, report = arg.partition(":")
    doc = json.load(open(path))
    pts = doc["points"]
    main = str(doc["main_tid"])
    cpu = doc["thread_cpu_s"]
    main_cpu = sum(v for k, v in cpu.items() if k.endswith("/" + main))
    other = {k: v for k, v in cpu.items() if not k.endswith("/" + main) and v > 0.05}
    out = {
        "run": path.rsplit("/", 1)[-1].removesuffix(".json"),
        "kernels": pts[-1]["kernels"],
        "rss_start_mib": pts[1]["rss_bytes"] / 2**20,
        "rss_end_mib": pts[-1]["rss_bytes"] / 2**20,
        "mib_per_million": (pts[-1]["rss_bytes"] - pts[1]["rss_bytes"]) / 2**20 / max(1, (pts[-1]["kernels"] - pts[1]["kernels"]) / 1e6),
        "launch_us": (pts[-1]["t"] - pts[0]["t"]) / max(1, pts[-1]["kernels"]) * 1e6,
        "main_cpu_s": main_cpu,
        "other_threads_cpu_s": sum(other.values()),
        "other_threads": other,
    }
    if report:
        import gpuscope

        with gpuscope.load(report) as r:
            recs, buffers, cb_ns, failed, detail = r.sql(
                "SELECT records, buffers, callback_ns, failed_records, detail FROM collector WHERE name = 'cupti'")[0]
            out.update(records=recs, buffers=buffers, callback_ns_per_record=cb_ns / max(1, recs),
                       other_cpu_ns_per_record=out["other_threads_cpu_s"] * 1e9 / max(1, recs),
                       failed=failed, detail=detail,
                       dropped=int(r.sql("SELECT coalesce(sum(count), 0) FROM dropped")[0][0]))
    return out


def main() -> None:
    rows = [row(a) for a in sys.argv[1:]]
    print(json.dumps(rows, indent=1))
    print("| run | kernels | RSS after first chunk (MiB) | RSS at end (MiB) | MiB per million | µs per launch | "
          "main thread CPU (s) | other threads CPU (s) | their CPU per record (ns) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        per = f"{r['other_cpu_ns_per_record']:.0f}" if "other_cpu_ns_per_record" in r else ""
        print(f"| {r['run']} | {r['kernels']:,} | {r['rss_start_mib']:.0f} | {r['rss_end_mib']:.0f} | "
              f"{r['mib_per_million']:.1f} | {r['launch_us']:.2f} | {r['main_cpu_s']:.1f} | "
              f"{r['other_threads_cpu_s']:.1f} | {per} |")


if __name__ == "__main__":
    main()
