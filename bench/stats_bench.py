"""Speed, memory and file size of ``gpuscope stats`` on a large synthetic report.

The benchmark makes a realistic report of N kernel records (default 10 million) and then times
the whole ``gpuscope stats REPORT --report cuda_gpu_kern_sum`` command the way a user runs it: a
fresh process of the ``gpuscope`` console script, its output thrown away. Every run is a separate
process; its wall time is taken around the process and its peak RSS from ``wait4``'s resource
usage of that one child. The table format and ``--format csv`` are each run several times after a
warm-up, and once more with the report evicted from the page cache, and summarized by min /
median / max. Bytes on disk per kernel record are reported for the whole file and for the kernel
table alone (the file minus the same report with no kernel rows), with a per-column breakdown.

This module holds the goals, the output check and the results (Markdown, JSON); the report comes
from :mod:`synthetic_report`, the timed runs from :mod:`process_runs`, the sizes from
:mod:`report_sizes`, and ``--diagnose`` adds where the time goes (:mod:`stats_diagnose`).

Run it from the repository root with the project's environment::

    .venv/bin/python bench/stats_bench.py                       # 10M records, 5 repeats
    .venv/bin/python bench/stats_bench.py --records 1000000 --repeats 3 \\
        --markdown /tmp/stats_bench.md --json /tmp/stats_bench.json
    .venv/bin/python bench/stats_bench.py --reuse                # keep an existing report

The report is left at ``--report`` (default ``/tmp/stats_bench_<N>.gpuscope``); with ``--reuse``
an existing synthetic report with the same N, names, Zipf exponent and seed is measured again
instead of being regenerated.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import statistics
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

from process_runs import Series, child_env, load_average, machine, measure, run_once, source_state
from report_sizes import Sizes, measure_sizes
from synthetic_report import Generation, load_or_make, make_report

# Goals the stats command and the file are held to.
GOAL_WALL_S = 2.0
GOAL_RSS_MB = 500.0
GOAL_BYTES_PER_RECORD = 30.0
FLOOR_RUNS = 3  # of `python -c pass` and `gpuscope --version`


def validate_output(argv: list[str], env: dict[str, str], gen: Generation) -> str:
    """Check the CSV summary: one row per kernel name, instance counts adding up to N."""
    _run, out = run_once([*argv, "--format", "csv"], env, capture=True)
    header, *rows = csv.reader(out.decode().splitlines())
    instances = next(i for i, c in enumerate(header) if c.startswith("Instances"))
    total = sum(int(r[instances]) for r in rows)
    if len(rows) != gen.distinct_names or total != gen.records:
        raise RuntimeError(f"stats output has {len(rows)} rows / {total} instances, "
                           f"expected {gen.distinct_names} / {gen.records}")
    return f"{len(rows)} rows, {total:,} instances (as generated)"


def import_floor(gpuscope_bin: str, env: dict[str, str], repeats: int) -> dict[str, float]:
    """Wall time and RSS of a bare interpreter and of ``gpuscope --version`` (imports only)."""
    bare = [run_once([sys.executable, "-c", "pass"], env)[0] for _ in range(repeats)]
    version = [run_once([gpuscope_bin, "--version"], env)[0] for _ in range(repeats)]
    return {
        "python_startup_s": statistics.median(r.wall_s for r in bare),
        "python_startup_rss_mb": statistics.median(r.max_rss_mb for r in bare),
        "gpuscope_version_s": statistics.median(r.wall_s for r in version),
        "gpuscope_version_rss_mb": statistics.median(r.max_rss_mb for r in version),
    }


def goals(main: Series, sizes: Sizes) -> dict[str, dict[str, Any]]:
    """Each goal's target, what was measured, and whether it passed."""
    measured = {
        "wall_s": (GOAL_WALL_S, main.stat("wall_s")["median"]),
        "max_rss_mb": (GOAL_RSS_MB, main.stat("max_rss_mb")["max"]),
        "bytes_per_record": (GOAL_BYTES_PER_RECORD, sizes.bytes_per_record),
    }
    return {k: {"target": t, "measured": m, "passed": m <= t} for k, (t, m) in measured.items()}


def _ok(goal: dict[str, Any]) -> str:
    return "PASS" if goal["passed"] else "**FAIL**"


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def markdown(env: dict[str, Any], gen: Generation, sizes: Sizes, series: list[Series], validation: str,
             floor: dict[str, float], goal: dict[str, dict[str, Any]]) -> str:
    out: list[str] = []
    w = out.append
    w(f"## `gpuscope stats` on {gen.records:,} kernel records\n")
    w(f"- Device: {env['cpu']}, {env['cores']} cores, {env['memory_gb']:.1f} GB RAM (no GPU involved)")
    w(f"- Date: {env['date']}; host {env['host']}; Python {env['python']}; DuckDB {env['duckdb']}; "
      f"numpy {env['numpy']}; pandas {env['pandas']}; gpuscope {env['gpuscope']}")
    w(f"- gpuscope source measured: {env['source']}")
    w(f"- Report: `{gen.path}`, {gen.records:,} kernel records, {gen.distinct_names} distinct kernel names "
      f"(Zipf, s={gen.zipf}), {gen.configs:,} launch configurations, {gen.strings:,} strings; "
      f"{gen.span_s:,.0f} s of GPU timeline, kernels busy {100 * gen.kernel_busy_share:.0f}% of it")
    w("- Generation: " + ("reused an existing report (--reuse)" if gen.reused else
                          f"{gen.seconds:.1f} s (bulk DuckDB inserts of {env['batch']:,}-row batches, "
                          "then CHECKPOINT)"))
    w(f"- Output check: {validation}")
    w("- Each run is a fresh `gpuscope` process (stdout to /dev/null); wall time around the process, "
      "peak RSS from wait4. One unmeasured warm-up run first, so the report and Python's files are in "
      "the page cache; a cold run evicts the report from the page cache first (posix_fadvise).")
    pyc = (f"bytecode cached in `{env['pycache_prefix']}` (PYTHONPYCACHEPREFIX)" if env["pycache_prefix"]
           else "environment as inherited" + (" (PYTHONDONTWRITEBYTECODE set)" if env["dont_write_bytecode"] else ""))
    w(f"- Python of the measured commands: {pyc}. Load average (1/5/15 min) before the timed runs: "
      f"{env['load_before']}, after: {env['load_after']} (on {env['cores']} cores, anything else running "
      f"shows up in wall times; CPU time is less affected)\n")

    runs = len(series[0].runs)
    w("### Goals\n")
    w("| Goal | Target | Measured | Result |")
    w("|---|---|---|---|")
    g = goal["wall_s"]
    w(f"| `gpuscope stats --report cuda_gpu_kern_sum` wall time (median of {runs}) | ≤ {g['target']:g} s "
      f"| {g['measured']:.2f} s | {_ok(g)} |")
    g = goal["max_rss_mb"]
    w(f"| same, peak RSS (max of {runs}) | ≤ {g['target']:g} MB | {g['measured']:.0f} MB | {_ok(g)} |")
    g = goal["bytes_per_record"]
    w(f"| bytes per kernel record on disk (whole file / N) | ≤ {g['target']:g} B | {g['measured']:.1f} B "
      f"| {_ok(g)} |")
    w("")

    w("### Whole command\n")
    w("| Command | Runs | Wall min / median / max (s) | Peak RSS min / median / max (MB) | "
      "CPU user+sys median (s) | Cold run: wall (s), RSS (MB) |")
    w("|---|---|---|---|---|---|")
    for s in series:
        wl, rs = s.stat("wall_s"), s.stat("max_rss_mb")
        cpu = statistics.median(r.user_s + r.sys_s for r in s.runs)
        cold = f"{s.cold.wall_s:.2f}, {s.cold.max_rss_mb:.0f}" if s.cold else "-"
        w(f"| `{s.label}` | {len(s.runs)} | {wl['min']:.2f} / {wl['median']:.2f} / {wl['max']:.2f} | "
          f"{rs['min']:.0f} / {rs['median']:.0f} / {rs['max']:.0f} | {cpu:.2f} | {cold} |")
    w(f"| `python -c pass` (floor) | {FLOOR_RUNS} | {floor['python_startup_s']:.2f} (median) | "
      f"{floor['python_startup_rss_mb']:.0f} (median) | | |")
    w(f"| `gpuscope --version` (imports only) | {FLOOR_RUNS} | {floor['gpuscope_version_s']:.2f} (median) | "
      f"{floor['gpuscope_version_rss_mb']:.0f} (median) | | |")
    w("")

    w("### Size on disk\n")
    w("| | Bytes | Per kernel record |")
    w("|---|---|---|")
    w(f"| Whole report file | {_mb(sizes.file_bytes)} | {sizes.bytes_per_record:.2f} B |")
    w(f"| Same report without kernel rows | {_mb(sizes.empty_report_bytes)} | |")
    w(f"| Kernel table alone (difference) | {_mb(sizes.kernel_table_bytes)} | "
      f"{sizes.kernel_bytes_per_record:.2f} B |")
    w(f"| DuckDB blocks: {sizes.used_blocks:,} used, {sizes.free_blocks:,} free, "
      f"{sizes.block_size // 1024} KiB each | | |")
    w("")
    if sizes.columns:
        w("Kernel columns, each stored alone in a fresh DuckDB file (compression as in the report):\n")
        w("| Column | Compression (segments) | Bytes | Per record |")
        w("|---|---|---|---|")
        for c in sorted(sizes.columns, key=lambda c: -c.bytes):
            w(f"| {c.column} | {c.compression} | {_mb(c.bytes)} | {c.bytes_per_record:.2f} B |")
        total = sum(c.bytes for c in sizes.columns)
        w(f"| **sum** | | {_mb(total)} | {total / gen.records:.2f} B |")
        w("")
    return "\n".join(out) + "\n"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=10_000_000, help="kernel records (default 10M)")
    p.add_argument("--names", type=int, default=600, help="distinct kernel names (default 600)")
    p.add_argument("--zipf", type=float, default=1.0, help="Zipf exponent of name frequencies")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=1_000_000, help="rows per bulk insert")
    p.add_argument("--report", type=Path, help="report path (default /tmp/stats_bench_<N>.gpuscope)")
    p.add_argument("--reuse", action="store_true",
                   help="measure an existing report of the same N, names, zipf and seed")
    p.add_argument("--repeats", type=int, default=5, help="measured runs per command (default 5)")
    p.add_argument("--gpuscope", help="the gpuscope console script (default: next to this Python)")
    p.add_argument("--no-cold", action="store_true", help="skip the cold-page-cache run")
    p.add_argument("--pycache-prefix", default="/tmp/stats_bench_pycache",
                   help="PYTHONPYCACHEPREFIX of the measured commands (bytecode cache outside the "
                        "repository); '' to leave the environment as it is")
    p.add_argument("--no-breakdown", action="store_true", help="skip the per-column sizes")
    p.add_argument("--diagnose", action="store_true",
                   help="also show where the time goes: phases, imports, EXPLAIN ANALYZE (stats_diagnose.py)")
    p.add_argument("--markdown", type=Path, default=Path("/tmp/stats_bench.md"))
    p.add_argument("--json", type=Path, help="also write the results as JSON here")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    report: Path = args.report or Path(f"/tmp/stats_bench_{args.records}.gpuscope")
    gpuscope_bin = args.gpuscope or str(Path(sys.executable).with_name("gpuscope"))
    if not Path(gpuscope_bin).exists():
        gpuscope_bin = shutil.which("gpuscope") or gpuscope_bin
    env = child_env(args.pycache_prefix or None)
    source = source_state()

    log(f"report {report}")
    make = load_or_make if args.reuse else make_report
    gen = make(report, args.records, args.names, args.seed, zipf=args.zipf, batch=args.batch, log=log)
    log("  reused" if gen.reused else f"  written in {gen.seconds:.1f} s")
    log("sizes")
    sizes = measure_sizes(gen, not args.no_breakdown, log)

    base = [gpuscope_bin, "stats", str(report), "--report", "cuda_gpu_kern_sum"]
    log("validating the stats output")
    validation = validate_output(base, env, gen)
    load_before = load_average()
    series = []
    for options in ([], ["--format", "csv"]):
        label = " ".join(["gpuscope stats REPORT --report cuda_gpu_kern_sum", *options])
        log(f"timing: {label}")
        series.append(measure(label, [*base, *options], env, args.repeats, None if args.no_cold else report))
    load_after = load_average()
    log("import floor")
    floor = import_floor(gpuscope_bin, env, FLOOR_RUNS)
    goal = goals(series[0], sizes)

    source_after = source_state()
    facts = {
        **machine(), "batch": args.batch, "load_before": load_before, "load_after": load_after,
        "source": source if source_after == source
        else f"{source} at the start, changed while measuring: {source_after}",
        "pycache_prefix": env.get("PYTHONPYCACHEPREFIX"),
        "dont_write_bytecode": env.get("PYTHONDONTWRITEBYTECODE"),
    }  # fmt: skip
    text = markdown(facts, gen, sizes, series, validation, floor, goal)
    doc: dict[str, Any] = {
        "environment": facts, "generation": asdict(gen), "sizes": asdict(sizes), "validation": validation,
        "import_floor": floor, "goals": goal,
        "series": [{**asdict(s), "wall_s": s.stat("wall_s"), "max_rss_mb": s.stat("max_rss_mb")} for s in series],
    }  # fmt: skip
    if args.diagnose:
        import stats_diagnose

        log("diagnosis: phases, imports, EXPLAIN ANALYZE")
        diagnosis = stats_diagnose.diagnose(report, env)
        text += stats_diagnose.markdown(diagnosis)
        doc["diagnosis"] = asdict(diagnosis)

    print(text)
    args.markdown.write_text(text)
    log(f"wrote {args.markdown}")
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2))
        log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
