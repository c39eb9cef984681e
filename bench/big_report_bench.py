"""Every reader command on a report of at least ten million rows of each kind: PyTorch operators,
stack samples, ranges and kernels (with their launch calls), each command a fresh process, its wall
time and peak resident set measured, repeats interleaved.

The report is built from the recorded GPU fixture ``program_custom_rnn_loop`` (an RNN cell in a
Python loop: 216,504 kernels, 192,003 launch calls, 96,000 ranges, 9,016 samples over 11 s) with
DuckDB, in about a minute:

- the whole run is repeated ``--copies`` times one after the other (times, correlation and range ids
  shifted), which gives the kernels and launch calls;
- every launch call gets a PyTorch operator around it on its thread (3 µs before to 2 µs after),
  its name, shapes and arguments taken in turn from the operators of the ``cpu_balanced`` fixture,
  so each operator owns one kernel as an eager PyTorch program's would;
- ranges and samples are repeated on further threads of the process (time shifted by a few µs)
  until each has at least as many rows as the kernels.

``stats`` runs with every report (the default), without the reports that once listed every
(operation, enclosing range) pair (``nvtx_gpu_proj_sum``, ``layer_sum``), and (``--only
stats:NAME``, repeatable) one report at a time. A command still running
after ``--limit`` seconds is stopped and shown so.

``gpuscope view`` is measured as started to served (the index build) and the window queries a page
makes (the whole run, then windows 10x narrower down to a millisecond, and a search), through its
HTTP API; its resident set is read before it is stopped.

``--synthetic N`` measures a report of ``N`` kernel records of :mod:`synthetic_report` instead
(kernels and their launches only; its stats tables stored in it, as the writer stores them). When
the tree of ``--previous`` reads an older schema version than the report's, it reads a copy of the
report as it would have written it: without the tables added since (``stats_summary``), with its
version in ``meta``. ``--previous DIR`` runs each command with the gpuscope of
``DIR/src`` as well, right before the current one (``git archive <commit> src | tar -x -C DIR``),
so both see the same machine load. A command named ``NAME:warm`` runs right after ``NAME`` and
reads what it kept beside the report; ``NAME`` itself starts from no kept output (the kept files
of analyze, roofline and stats are removed before it). ``--markdown FILE`` writes the table with
the machine and date.

    PYTHONPATH=src python bench/big_report_bench.py --copies 53 --repeats 3 [--limit 600] [--keep DIR]
    PYTHONPATH=src python bench/big_report_bench.py --synthetic 10000000 --previous /tmp/prev \
        --only analyze --only roofline --only stats --markdown bench/results/big_runs.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import duckdb

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from conftest import unpack_fixture  # noqa: E402

BASE = "program_custom_rnn_loop"
OPS = "cpu_balanced"
# the stats reports that do not list every (operation, enclosing range) pair (nvtx_gpu_proj_sum and
# layer_sum do)
WITHOUT_PAIRS = ["cuda_gpu_kern_sum", "cuda_api_sum", "cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum",
                 "cuda_gpu_sum", "cuda_kern_exec_sum", "nvtx_sum", "step_sum", "cpu_hotspots",
                 "cpu_hotspots_lines", "cpu_thread_sum", "host_sum", "op_sum", "sync_sum", "launch_sum",
                 "roofline_sum", "memory_sum", "rank_sum", "collective_sum"]
COMMANDS = {
    "export": ["export", "{r}", "-o", "{d}/x.trace.json", "--force-overwrite"],
    "export-parquet": ["export", "{r}", "-f", "parquet", "-o", "{d}/x.parquet", "--force-overwrite"],
    "analyze": ["analyze", "{r}"],
    "roofline": ["roofline", "{r}"],
    "stats-without-pairs": ["stats", "{r}", *(a for n in WITHOUT_PAIRS for a in ("-r", n))],
    "report": ["report", "{r}", "-o", "{d}/x.html", "--force-overwrite"],
    "stats": ["stats", "{r}"],
}
KEPT = ("analyze-*.txt", "roofline-*.txt", "table-*.txt")  # output_cache's files beside the report
WARM = ("analyze", "roofline", "stats", "stats:cuda_gpu_kern_sum", "report")
# one command per stats report as well: stats:NAME
from gpuscope.analysis import STATS_REPORTS
from gpuscope.trace import schema

COMMANDS.update({f"stats:{n}": ["stats", "{r}", "-r", n, "-f", "csv"] for n in STATS_REPORTS})
TIMED_TABLES = ("kernel", "launch_call", "nvtx_range", "cpu_sample", "memcpy", "memset", "sync", "sync_site",
                "host_counter", "thread_time")


def _one(con: duckdb.DuckDBPyConnection, sql: str) -> int:
    return int(con.execute(sql).fetchone()[0])  # type: ignore[index]


def _time_columns(con: duckdb.DuckDBPyConnection, table: str) -> list[str]:
    return [c for (c, *_rest) in con.execute(f"DESCRIBE {table}").fetchall()]


def build(d: Path, copies: int) -> tuple[Path, dict[str, int]]:
    """Write the big report into ``d``; return its path and rows per kind."""
    report = unpack_fixture(BASE, d)
    ops_src = unpack_fixture(OPS, d)
    con = duckdb.connect(str(report))
    t0, t1 = con.execute("SELECT min(start_ns), max(end_ns) FROM process").fetchone()  # type: ignore[misc]
    span = int(t1 - t0) + 1_000_000
    corr = _one(con, "SELECT max(correlation_id) FROM launch_call") + 1
    rid = _one(con, "SELECT max(id) FROM nvtx_range") + 1
    con.execute(f"CREATE TEMP TABLE k AS SELECT range AS k FROM range(1, {copies})")
    for table in TIMED_TABLES:
        cols = _time_columns(con, table)
        shifted = []
        for c in cols:
            if c in ("start_ns", "end_ns", "ts_ns"):
                shifted.append(f"{c} + k * {span}")
            elif c == "correlation_id":
                shifted.append(f"{c} + k * {corr}")
            elif c == "id" and table == "nvtx_range":
                shifted.append(f"{c} + k * {rid}")
            else:
                shifted.append(f'"{c}"')
        con.execute(f"INSERT INTO {table} SELECT {', '.join(shifted)} FROM {table}, k")
    kernels = _one(con, "SELECT count(*) FROM kernel")
    # one operator around each launch call, names and shapes from a CPU run's operators
    con.execute(f"ATTACH '{ops_src}' AS ops (READ_ONLY)")
    base = _one(con, "SELECT max(id) FROM string") + 1
    con.execute(f"""CREATE TEMP TABLE tmpl AS
                    SELECT row_number() OVER (ORDER BY name_id, shapes, dtypes, scalars) - 1 AS i, * FROM (
                      SELECT DISTINCT name_id, shapes, dtypes, out_shapes, scalars FROM ops.torch_op)""")
    con.execute(f"INSERT INTO string SELECT id + {base}, value FROM ops.string WHERE id IN "
                "(SELECT name_id FROM tmpl)")
    n = _one(con, "SELECT count(*) FROM tmpl")
    con.execute(f"""INSERT INTO torch_op SELECT l.start_ns - 3000, l.end_ns + 2000, l.pid, l.tid, t.name_id + {base},
                    NULL, t.shapes, t.dtypes, t.out_shapes, t.scalars
                    FROM launch_call l JOIN tmpl t ON t.i = l.correlation_id % {n}""")
    # ranges and samples on further threads until each has as many rows as the kernels
    for table, col in (("nvtx_range", "start_ns"), ("cpu_sample", "ts_ns")):
        rows = _one(con, f"SELECT count(*) FROM {table}")
        extra = -(-kernels // rows) - 1
        if extra > 0:
            cols = _time_columns(con, table)
            moved = [f"{c} + e * 1000" if c in ("start_ns", "end_ns", "ts_ns") else
                     "tid + e * 100000" if c == "tid" else
                     f"id + e * {rid * copies}" if (c == "id" and table == "nvtx_range") else f'"{c}"' for c in cols]
            con.execute(f"INSERT INTO {table} SELECT {', '.join(moved)} FROM {table}, range(1, {extra + 1}) r(e)")
    con.execute(f"UPDATE process SET end_ns = end_ns + {(copies - 1) * span}")
    wall = _one(con, "SELECT value FROM meta WHERE key = 'wall_ns'")
    con.execute("UPDATE meta SET value = ? WHERE key = 'wall_ns'", [str(wall + (copies - 1) * span)])
    trace = json.loads(con.execute("SELECT value FROM meta WHERE key = 'trace'").fetchone()[0])  # type: ignore[index]
    con.execute("UPDATE meta SET value = ? WHERE key = 'trace'", [json.dumps([*trace, "torch-ops"])])
    not_rec = json.loads(con.execute("SELECT value FROM meta WHERE key = 'not_recorded'").fetchone()[0])  # type: ignore[index]
    not_rec.pop("torch_ops", None)
    con.execute("UPDATE meta SET value = ? WHERE key = 'not_recorded'", [json.dumps(not_rec)])
    con.execute("DETACH ops")
    con.execute("CHECKPOINT")
    counts = {t: _one(con, f"SELECT count(*) FROM {t}") for t in ("torch_op", "cpu_sample", "nvtx_range", "kernel",
                                                                   "launch_call")}
    con.close()
    ops_src.unlink()
    return report, counts


def forget(report: Path) -> None:
    """Remove the outputs kept beside ``report``, so that the next command derives them."""
    for d in (report.with_name(report.name + ".cache"),):
        for pattern in KEPT:
            for f in d.glob(pattern):
                f.unlink()


def run(argv: list[str], limit: float, src: str | None = None) -> tuple[float, float, float, str]:
    """Run one gpuscope command, stopped after ``limit`` seconds; return its wall time (s), CPU time
    (s, user and system, all its threads: less sensitive than wall time to other work on a shared
    machine), peak resident set (MB) and how it ended: ``done``, ``stopped`` (at the limit) or
    ``failed`` (a non-zero exit)."""
    t = time.perf_counter()
    with open(os.devnull, "w") as out, tempfile.TemporaryFile() as err:
        env = {**os.environ, "PYTHONPATH": src} if src else None
        proc = subprocess.Popen([sys.executable, "-m", "gpuscope", *argv], stdout=out, stderr=err, env=env)
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - t > limit:
                proc.kill()
                _, status, usage = os.wait4(proc.pid, 0)
                return time.perf_counter() - t, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, "stopped"
            time.sleep(0.1)
        wall = time.perf_counter() - t
        code = os.waitstatus_to_exitcode(status)
        if code:  # said, and the round goes on
            err.seek(0)
            print(f"gpuscope {' '.join(argv)} failed ({code}):\n{err.read()[-2000:].decode()}", flush=True)
            return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, "failed"
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, "done"


def _get(url: str) -> tuple[float, bytes]:
    t = time.perf_counter()
    with urllib.request.urlopen(url, timeout=600) as resp:
        body = resp.read()
    return time.perf_counter() - t, body


def view(report: Path) -> dict[str, float]:
    """Serve ``report`` with ``gpuscope view``; return its start-up, query times (s) and resident set (MB)."""
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "gpuscope", "view", str(report), "--no-browser"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = proc.stdout.readline().strip()  # type: ignore[union-attr]
        if not url.startswith("http"):
            raise SystemExit(f"gpuscope view printed no address ({proc.wait()})")
        out = {"view_served": time.perf_counter() - t}
        con = duckdb.connect(str(report), read_only=True)
        t0, t1 = con.execute("SELECT min(start_ns), max(end_ns) FROM kernel").fetchone()  # type: ignore[misc]
        con.close()
        windows = []
        width = t1 - t0
        while width >= 1_000_000:
            mid = t0 + (t1 - t0) // 3
            windows.append(_get(f"{url}api/window?t0={mid}&t1={mid + width}&px=1600")[0])
            width //= 10
        out["view_window_max"] = max(windows)
        out["view_window_median"] = statistics.median(windows)
        out["view_search"] = _get(f"{url}api/search?q=gemm")[0]
        out["view_rss_mb"] = _hwm(proc.pid)
        return out
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _hwm(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _report(args: argparse.Namespace, d: Path) -> tuple[Path, dict[str, int]]:
    """The report to measure: made (or reused from ``--keep``), with its rows per kind."""
    if args.synthetic:
        report = d / f"synthetic_{args.synthetic}.gpuscope"
        # made in a process of its own: a command's peak resident set (wait4's) starts at the size
        # of the process it was started from, which making the report would leave at a gigabyte
        made = subprocess.run(
            [sys.executable, "-c", "import sys; from pathlib import Path; from synthetic_report import load_or_make; "
             "g = load_or_make(Path(sys.argv[1]), int(sys.argv[2])); "
             "print(f\"{'reusing' if g.reused else 'made'} {g.path} ({g.seconds:.0f} s\" + "
             "(f', its stats tables computed and stored in {g.summaries_seconds:.1f} s)' if not g.reused else ')'))",
             str(report), str(args.synthetic)],
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}, check=True,
            stdout=subprocess.PIPE, text=True)
        print(made.stdout.strip())
    else:
        report = d / f"{BASE}.gpuscope"
        if args.keep and report.exists():
            print(f"reusing {report}")
        else:
            t = time.perf_counter()
            report, _ = build(d, args.copies)
            print(f"built in {time.perf_counter() - t:.0f} s")
    con = duckdb.connect(str(report), read_only=True)
    counts = {t: _one(con, f"SELECT count(*) FROM {t}") for t in ("torch_op", "cpu_sample", "nvtx_range", "kernel",
                                                                   "launch_call")}
    con.close()
    return report, counts


def for_previous(report: Path, src: Path) -> Path:
    """The report as the gpuscope of ``src`` (an older tree) would have written it: when that reads
    an older schema version, a copy beside ``report`` without the tables added since and with that
    version in its meta (made once, kept while it is newer than ``report``); else ``report`` itself."""
    found = re.search(r"^SCHEMA_VERSION = (\d+)$", (src / "gpuscope/trace/schema.py").read_text(), re.M)
    old = int(found.group(1)) if found else schema.SCHEMA_VERSION
    if old >= schema.SCHEMA_VERSION:
        return report
    copy = report.with_name(f"schema{old}_{report.name}")
    if copy.exists() and copy.stat().st_mtime > report.stat().st_mtime:
        return copy
    shutil.copyfile(report, copy)
    con = duckdb.connect(str(copy))
    for version, tables in schema.ADDED_IN.items():
        if version > old:
            for table in tables:
                con.execute(f"DROP TABLE IF EXISTS {table}")
    con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [json.dumps(old)])
    con.execute("CHECKPOINT")
    con.close()
    return copy


def _span(values: list[float], unit: str, digits: int) -> str:
    """``median (min-max)`` of ``values``."""
    f = f"{{:.{digits}f}}"
    med = f.format(statistics.median(values))
    return f"{med} {unit} ({f.format(min(values))}-{f.format(max(values))})" if len(values) > 1 else f"{med} {unit}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--copies", type=int, default=53)
    p.add_argument("--synthetic", type=int, metavar="N", help="measure a synthetic report of N kernel records instead")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--only", action="append", choices=[*sorted(COMMANDS), *(f"{w}:warm" for w in WARM), "view"])
    p.add_argument("--limit", type=float, default=600, help="stop a command after this many seconds")
    p.add_argument("--keep", type=Path, help="build the report here (or reuse it if it is there)")
    p.add_argument("--previous", type=Path, metavar="DIR",
                   help="also run each command with the gpuscope of DIR/src (the previous version)")
    p.add_argument("--markdown", type=Path, metavar="FILE", help="write the table, machine and date to FILE")
    args = p.parse_args()
    d = args.keep or Path(tempfile.mkdtemp(prefix="gpuscope-bench-"))
    d.mkdir(parents=True, exist_ok=True)
    report, counts = _report(args, d)
    about = (f"report: {report.name}, {report.stat().st_size / 1e6:.0f} MB, rows "
             + ", ".join(f"{k} {v:,}" for k, v in counts.items()))
    machine = (f"machine: {platform.machine()}, {os.cpu_count()} cores, {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB, "
               f"Python {platform.python_version()}, DuckDB {duckdb.__version__}, {time.strftime('%Y-%m-%d')}")
    print(about)
    print(machine)
    chosen = args.only or [*list(COMMANDS)[:-1], "view", "stats"]
    versions = [("previous", str(args.previous / "src")), ("now", None)] if args.previous else [("now", None)]
    reports = {"now": report}
    if args.previous:  # a report of this schema version, when the previous one cannot read it
        reports["previous"] = for_previous(report, args.previous / "src")
        if reports["previous"] != report:
            print(f"previous reads {reports['previous']} (schema version of its own)")
    times: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    rss: dict[str, list[float]] = {}
    ended: dict[str, str] = {}
    for _ in range(args.repeats):
        for name in chosen:
            if name == "view":
                for key, value in view(report).items():
                    (rss if key.endswith("_mb") else times).setdefault(key, []).append(value)
                continue
            base, warm = name.split(":warm")[0] if name.endswith(":warm") else name, name.endswith(":warm")
            for version, src in versions:
                if warm and version == "previous":
                    continue  # the previous version keeps nothing: its warm run is its cold one
                argv = [a.format(r=reports[version], d=d) for a in COMMANDS[base]]
                if not warm:
                    forget(reports[version])
                key = f"{name} [{version}]"
                wall, used, peak, how = run(argv, args.limit, src)
                if how != "done":
                    ended[key] = how
                times.setdefault(key, []).append(wall)
                cpu.setdefault(key, []).append(used)
                rss.setdefault(key, []).append(peak)
                print(f"  {key}: {wall:.1f} s wall, {used:.1f} s CPU, {peak:.0f} MB"
                      f"{'' if how == 'done' else f' ({how})'}, load average {os.getloadavg()[0]:.1f}", flush=True)
    lines = ["| command | version | wall, median (min-max) | CPU, median | peak RSS, median (min-max) | ended |",
             "| --- | --- | ---: | ---: | ---: | --- |"]
    for key, values in times.items():
        name, _, version = key.partition(" [")
        peak = rss.get("view_rss_mb") if key.startswith("view") else rss.get(key)
        how = {"stopped": f"stopped at {args.limit:.0f} s", "failed": "failed"}.get(ended.get(key, ""), "done")
        lines.append(f"| {name} | {version.rstrip(']') or 'now'} | {_span(values, 's', 2)} | "
                     f"{f'{statistics.median(cpu[key]):.1f} s' if key in cpu else ''} | "
                     f"{_span(peak, 'MB', 0) if peak else ''} | {how} |")
    print("\n".join(lines))
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(f"{machine}\n\n{about}\n\n{args.repeats} rounds, commands interleaved\n\n"
                                 + "\n".join(lines) + "\n")
        print(f"wrote {args.markdown}")


if __name__ == "__main__":
    main()
