"""How ``gpuscope view`` holds up on a synthetic report of ten million kernels.

Starts ``gpuscope view REPORT --no-browser``, opens its page in headless Chromium (Playwright and
Debian's chromium) and drives the timeline as a user does, with the keys: zoom in from the whole
run down to single kernels (W), pan (A/D) and zoom out (S), each step waiting for the answer to be
drawn. Timings come from the page's own performance marks: ``tl-first-view`` (navigation to the
first timeline drawn with server data) and ``tl-update`` (a zoom or pan to its window drawn).
Memory: the server's peak resident set (VmHWM), the page's JavaScript heap (CDP
Performance.getMetrics), and the resident set of every Chromium process (shared pages counted in
each, so an upper bound). Each repeat is a fresh server and a fresh page.

    PYTHONPATH=src python bench/viewer_bench.py --records 10000000 --repeats 3
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from synthetic_report import load_or_make  # noqa: E402

KEYS = ["w"] * 48 + ["a", "d"] * 8 + ["s", "w"] * 6 + ["s"] * 20  # whole run -> single kernels -> out


def _peak_rss(pid: int) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", text).group(1)) * 1024  # type: ignore[union-attr]


def one_run(report: Path, chromium: str) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    env = dict(os.environ, PYTHONPATH=str(HERE.parent / "src"))
    t_start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "gpuscope", "view", str(report), "--no-browser"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        url = proc.stdout.readline().strip()  # type: ignore[union-attr]
        t_served = time.perf_counter() - t_start
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page(viewport={"width": 1400, "height": 900}, bypass_csp=True)
            page.goto(url)
            page.wait_for_function("window.GS && GS.timeline && GS.timeline.stats.updates >= 1", timeout=120_000)
            first = page.evaluate("performance.getEntriesByName('tl-first-view')[0].duration")
            page.locator("#tl-view").focus()
            page.mouse.move(800, 300)
            for key in KEYS:
                n = page.evaluate("GS.timeline.stats.updates")
                page.keyboard.press(key)
                page.wait_for_function(f"GS.timeline.stats.updates > {n} && !GS.timeline.inFlight", timeout=60_000)
            updates = page.evaluate("performance.getEntriesByName('tl-update').map(e => e.duration)")
            slices = page.evaluate("GS.timeline.stats")
            cdp = page.context.new_cdp_session(page)
            cdp.send("Performance.enable")
            metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
            rss = [c.memory_info().rss for c in psutil.Process().children(recursive=True) if "chrom" in c.name().lower()]
            chrome_rss, chrome_max = sum(rss), max(rss)
            browser.close()
        server_peak = _peak_rss(proc.pid)
    finally:
        proc.terminate()
        proc.wait(30)
    err = proc.stderr.read()  # type: ignore[union-attr]
    index_s = float(re.search(r"indexed [\d,]+ timeline slices in ([\d.]+) s", err).group(1))  # type: ignore[union-attr]
    updates = updates[1:]  # the first is the first view
    return {"served_s": t_served, "index_s": index_s, "first_view_ms": first, "updates": updates,
            "p95_ms": _pct(updates, 95), "median_ms": statistics.median(updates), "max_ms": max(updates),
            "server_peak_mb": server_peak / 1e6, "js_heap_mb": metrics["JSHeapUsedSize"] / 1e6,
            "chromium_rss_mb": chrome_rss / 1e6, "chromium_max_rss_mb": chrome_max / 1e6, "last_stats": slices}


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--path", type=Path, default=Path("/tmp/gpuscope-bench/viewer.gpuscope"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    args = ap.parse_args(argv)
    args.path.parent.mkdir(parents=True, exist_ok=True)
    gen = load_or_make(args.path, args.records, log=print)
    print(f"report: {gen.records:,} kernels, {args.path.stat().st_size / 1e6:.0f} MB, span {gen.span_s:.0f} s")
    runs = [one_run(args.path, args.chromium) for _ in range(args.repeats)]
    for i, r in enumerate(runs):
        print(f"run {i + 1}: served after {r['served_s']:.1f} s (index {r['index_s']:.1f} s), first view "
              f"{r['first_view_ms']:.0f} ms, {len(r['updates'])} zoom/pan: median {r['median_ms']:.1f} ms, "
              f"p95 {r['p95_ms']:.1f} ms, max {r['max_ms']:.1f} ms; server peak {r['server_peak_mb']:.0f} MB, "
              f"JS heap {r['js_heap_mb']:.0f} MB, chromium RSS {r['chromium_rss_mb']:.0f} MB in all "
              f"(largest process {r['chromium_max_rss_mb']:.0f} MB)")

    def med(key: str) -> str:
        vals = [r[key] for r in runs]
        return f"{statistics.median(vals):.1f} ({min(vals):.1f}-{max(vals):.1f})"

    print(f"\nmachine: {platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
          f"median (min-max) of {len(runs)}:")
    for key in ("served_s", "index_s", "first_view_ms", "median_ms", "p95_ms", "max_ms", "server_peak_mb",
                "js_heap_mb", "chromium_rss_mb", "chromium_max_rss_mb"):
        print(f"  {key}: {med(key)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
