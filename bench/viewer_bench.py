"""How ``gpuscope view`` holds up on a synthetic report of ten million kernels.

Starts ``gpuscope view REPORT --no-browser``, opens its page in headless Chromium (Playwright and
Debian's chromium) and drives the timeline as a user does, with the keys: zoom in from the whole
run down to single kernels (W), pan (A/D) and zoom out (S), each step waiting for the answer to be
drawn. Timings come from the page's own performance marks: ``tl-first-view`` (navigation to the
first timeline drawn with server data) and ``tl-update`` (a zoom or pan to its window drawn).
Memory: the server's peak resident set (VmHWM), the page's JavaScript heap (CDP
Performance.getMetrics), and Chromium's memory in all: the proportional set size (PSS: each
shared page divided among the processes that map it) summed over every Chromium process, and the
resident sets summed (shared pages counted once per process: an upper bound). Each repeat is a
fresh server and a fresh page.

The first run opens the report with no index kept beside it (``REPORT.cache/timeline.bin``
removed; with ``--fresh-analyses`` the kept analyses too, and the run asks for the page's tables
and findings and waits for them, which a process of its own computes: minutes on this report): it
indexes the report and keeps the index. The repeats after it start from what was kept; they are
interleaved with repeats under ``--no-cache`` (the index built from the report; the tables, not
computed on a report this large until the page asks, are not awaited).

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


def _chromium_memory() -> tuple[int, int, int]:
    """Return the PSS summed, the RSS summed and the largest RSS of this process's Chromium children."""
    pss = rss = largest = 0
    for c in psutil.Process().children(recursive=True):
        try:
            if "chrom" not in c.name().lower():
                continue
            m = c.memory_full_info()
        except psutil.NoSuchProcess:
            continue
        pss, rss, largest = pss + m.pss, rss + m.rss, max(largest, m.rss)
    return pss, rss, largest


def one_run(report: Path, chromium: str, cache: bool = True, content_timeout_s: float | None = 60) -> dict[str, Any]:
    """Return one run's timings and memory; ``content_timeout_s`` None: do not wait for the tables."""
    from playwright.sync_api import sync_playwright

    env = dict(os.environ, PYTHONPATH=str(HERE.parent / "src"))
    load_before = os.getloadavg()[0]
    t_start = time.perf_counter()
    flags = [] if cache else ["--no-cache"]
    proc = subprocess.Popen([sys.executable, "-m", "gpuscope", "view", str(report), "--no-browser", *flags],
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
            content_s = float("nan")
            if content_timeout_s is not None:
                page.wait_for_selector("#run-facts dt, #compute-analyses", timeout=60_000)
                if page.locator("#compute-analyses").count():  # never computed: ask for them, as a user does
                    page.locator("#compute-analyses").click()
                page.wait_for_selector("#run-facts dt", timeout=content_timeout_s * 1000)
                content_s = page.evaluate("performance.now()") / 1000  # navigation to the tables and findings shown
            page.locator("#tl-view").focus()
            page.mouse.move(800, 300)
            for key in KEYS:
                n = page.evaluate("GS.timeline.stats.updates")
                page.keyboard.press(key)
                page.wait_for_function(f"GS.timeline.stats.updates > {n} && !GS.timeline.inFlight", timeout=60_000)
            updates = page.evaluate("performance.getEntriesByName('tl-update').map(e => e.duration)")
            parts = page.evaluate("""() => {
              const d = n => performance.getEntriesByName(n).map(e => e.duration);
              const res = performance.getEntriesByType('resource').filter(e => e.name.includes('/api/window'));
              const st = (e, n) => (e.serverTiming.find(s => s.name === n) || { duration: NaN }).duration;
              return { fetch: d('tl-fetch'), decode: d('tl-decode'), draw: d('tl-draw'),
                       query: res.map(e => st(e, 'query')), encode: st ? res.map(e => st(e, 'encode')) : [],
                       bytes: res.map(e => e.encodedBodySize),
                       connect: res.map(e => e.requestStart - e.startTime),
                       ttfb: res.map(e => e.responseStart - e.requestStart),
                       download: res.map(e => e.responseEnd - e.responseStart) };
            }""")
            slices = page.evaluate("GS.timeline.stats")
            cdp = page.context.new_cdp_session(page)
            cdp.send("Performance.enable")
            metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
            chrome_pss, chrome_rss, chrome_max = _chromium_memory()
            browser.close()
        server_peak = _peak_rss(proc.pid)
    finally:
        proc.terminate()
        proc.wait(30)
    err = proc.stderr.read()  # type: ignore[union-attr]
    index_s = float(re.search(r"(?:indexed|index of) [\d,]+ timeline slices in ([\d.]+) s", err).group(1))  # type: ignore[union-attr]
    updates = updates[1:]  # the first is the first view
    load = (load_before, os.getloadavg()[0])  # the 1-minute load average as the run began and ended
    return {"load": load, "served_s": t_served, "index_s": index_s, "first_view_ms": first, "content_s": content_s, "updates": updates,
            "p95_ms": _pct(updates, 95), "median_ms": statistics.median(updates), "max_ms": max(updates),
            "server_peak_mb": server_peak / 1e6, "js_heap_mb": metrics["JSHeapUsedSize"] / 1e6,
            "chromium_pss_mb": chrome_pss / 1e6, "chromium_rss_mb": chrome_rss / 1e6, "chromium_max_rss_mb": chrome_max / 1e6, "last_stats": slices,
            "parts": {k: v[1:] for k, v in parts.items()}}


def parts_line(r: dict[str, Any]) -> str:
    """Return where one run's zooms and pans spent their time: median and p95 of each part."""
    p = r["parts"]
    names = {"fetch": "asked to decoded", "decode": "decode", "draw": "draw", "query": "server query",
             "encode": "server encode", "connect": "to request sent", "ttfb": "to first byte",
             "download": "download", "bytes": "response bytes"}
    out = []
    for k, label in names.items():
        v = [x for x in p.get(k, []) if x == x]
        if v:
            unit = "" if k == "bytes" else " ms"
            out.append(f"{label} {statistics.median(v):,.1f}/{_pct(v, 95):,.1f}{unit}")
    return "median/p95: " + ", ".join(out)


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def row_counts(path: Path) -> str:
    """The report's rows of the kinds a timeline draws, as a phrase."""
    import duckdb  # noqa: PLC0415

    con = duckdb.connect(str(path), read_only=True)
    try:
        tables = {t for (t,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        counts = [f"{con.execute(f'SELECT count(*) FROM {t}').fetchone()[0]:,} {t}"  # type: ignore[index]
                  for t in ("kernel", "memcpy", "nvtx_range", "torch_op", "cpu_sample") if t in tables]
    finally:
        con.close()
    return ", ".join(counts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--path", type=Path, default=Path("/tmp/gpuscope-bench/viewer.gpuscope"))
    ap.add_argument("--report", type=Path, help="open this report (any gpuscope report) instead of the synthetic one")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    ap.add_argument("--fresh-analyses", action="store_true",
                    help="remove the kept analyses too: the first open waits for them to be computed")
    ap.add_argument("--content-timeout", type=float, default=3600,
                    help="seconds the first open may take to show the tables")
    args = ap.parse_args(argv)
    if args.report is not None:
        args.path = args.report
        print(f"report: {args.path}, {args.path.stat().st_size / 1e6:.0f} MB; {row_counts(args.path)}")
    else:
        args.path.parent.mkdir(parents=True, exist_ok=True)
        gen = load_or_make(args.path, args.records, log=print)
        print(f"report: {gen.records:,} kernels, {args.path.stat().st_size / 1e6:.0f} MB, span {gen.span_s:.0f} s")
    kept_dir = args.path.with_name(args.path.name + ".cache")
    for name in ("timeline.bin", "lod.bin", "content.json") if args.fresh_analyses else ("timeline.bin", "lod.bin"):
        (kept_dir / name).unlink(missing_ok=True)
    analyses = args.fresh_analyses or (kept_dir / "content.json").exists()  # else the tables are not awaited
    groups: dict[str, list[dict[str, Any]]] = {"first open (no index kept)": [
        one_run(args.path, args.chromium, content_timeout_s=args.content_timeout if analyses else None)]}
    kept: list[dict[str, Any]] = []
    fresh: list[dict[str, Any]] = []
    for i in range(args.repeats):  # interleaved, alternating which goes first
        order = [(kept, True), (fresh, False)] if i % 2 == 0 else [(fresh, False), (kept, True)]
        for into, cache in order:
            into.append(one_run(args.path, args.chromium, cache=cache, content_timeout_s=60 if cache and analyses else None))
    groups["index and analyses kept beside the report"] = kept
    groups["--no-cache (index built from the report; tables not awaited)"] = fresh

    def med(runs: list[dict[str, Any]], key: str) -> str:
        vals = [r[key] for r in runs]
        return f"{statistics.median(vals):.2f} ({min(vals):.2f}-{max(vals):.2f})"

    print(f"\nmachine: {platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f} at the end")
    for label, runs in groups.items():
        for i, r in enumerate(runs):
            print(f"{label} run {i + 1} (load average {r['load'][0]:.1f} to {r['load'][1]:.1f}): served after {r['served_s']:.1f} s (index {r['index_s']:.1f} s), first view "
                  f"{r['first_view_ms']:.0f} ms, tables after {r['content_s']:.1f} s, {len(r['updates'])} zoom/pan: "
                  f"median {r['median_ms']:.1f} ms, p95 {r['p95_ms']:.1f} ms, max {r['max_ms']:.1f} ms; server peak "
                  f"{r['server_peak_mb']:.0f} MB, JS heap {r['js_heap_mb']:.0f} MB, chromium PSS "
                  f"{r['chromium_pss_mb']:.0f} MB in all (RSS summed {r['chromium_rss_mb']:.0f} MB, largest process "
                  f"{r['chromium_max_rss_mb']:.0f} MB)")
            print(f"  {parts_line(r)}")
        pooled = [u for r in runs for u in r["updates"]]
        print(f"{label}: all {len(pooled)} zooms and pans pooled: median {statistics.median(pooled):.1f} ms, "
              f"p95 {_pct(pooled, 95):.1f} ms, max {max(pooled):.1f} ms")
        print(f"{label}: median (min-max) of {len(runs)}:")
        for key in ("served_s", "index_s", "first_view_ms", "content_s", "median_ms", "p95_ms", "max_ms",
                    "server_peak_mb", "js_heap_mb", "chromium_pss_mb", "chromium_rss_mb", "chromium_max_rss_mb"):
            print(f"  {key}: {med(runs, key)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
