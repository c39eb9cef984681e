"""Where the time of ``gpuscope stats --report cuda_gpu_kern_sum`` goes (``stats_bench.py --diagnose``).

Three looks at one report: the phases of the command timed inside one fresh interpreter (imports,
opening the report, the summary query, rendering), the imports of the real command from
``python -X importtime``, and DuckDB's EXPLAIN ANALYZE of the summary's query, caught on its way
from ``cuda_gpu_kern_sum`` to DuckDB. None of them is part of the benchmark's results.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuscope.analysis.ops.cuda_summaries import cuda_gpu_kern_sum
from gpuscope.trace.report import Report

FORMATS = ("table", "csv")
REPEATS = 3  # of the import profile

PHASES_SNIPPET = r"""
import json, sys, time
t0 = time.perf_counter()
marks = []
def hwm_mb():
    # VmHWM: this process's own peak RSS (ru_maxrss may include the parent's, from before exec)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0
def mark(name):
    marks.append((name, time.perf_counter() - t0, hwm_mb()))
import gpuscope.cli
gpuscope.cli.build_parser()
mark("import gpuscope.cli, build the argument parser")
from gpuscope.analysis.ops.cuda_summaries import cuda_gpu_kern_sum
from gpuscope.reporters import FORMATS
from gpuscope.trace.report import Report
mark("imports stats needs (analysis, reporters, trace.report: duckdb)")
r = Report.open(sys.argv[1])
mark("Report.open")
n = r.count("kernel")
mark("count(kernel) (the summary's empty-table check)")
t = cuda_gpu_kern_sum(r)
mark("cuda_gpu_kern_sum: the SQL query (and the count again)")
text = FORMATS[sys.argv[2]]([t])
mark("render " + sys.argv[2])
r.close()
mark("close")
print(json.dumps(marks))
"""

# Modules whose import cost is shown (where the command imports them)
IMPORT_MODULES = [
    "gpuscope.cli", "gpuscope.cli.profile", "gpuscope.run.program", "gpuscope.trace.writer",
    "gpuscope.cli.export", "gpuscope.trace.chrome", "gpuscope.cli.stats",
    "gpuscope.analysis.ops.cuda_summaries", "gpuscope.trace.report", "gpuscope.reporters",
    "gpuscope.reporters.terminal", "pandas", "numpy", "duckdb",
]  # fmt: skip


@dataclass
class Phase:
    name: str
    seconds: float
    cumulative_s: float
    max_rss_mb: float


@dataclass
class ImportCost:
    module: str
    cumulative_s: float
    imported_by: str


@dataclass
class Diagnosis:
    phases: dict[str, list[Phase]]  # per output format
    import_total_s: float
    imports: list[ImportCost]
    plan: str


def diagnose(report: Path, env: dict[str, str]) -> Diagnosis:
    """Phases per output format, the command's imports and the summary query's plan."""
    total, imports = import_profile(["stats", str(report), "--report", "cuda_gpu_kern_sum"], env, REPEATS)
    by_format = {fmt: phases(report, fmt, env) for fmt in FORMATS}
    return Diagnosis(by_format, total, imports, explain_analyze(report))


def phases(report: Path, fmt: str, env: dict[str, str]) -> list[Phase]:
    """Time the phases of the stats command inside one fresh interpreter (warm page cache)."""
    out = subprocess.run([sys.executable, "-c", PHASES_SNIPPET, str(report), fmt], check=True,
                         capture_output=True, text=True, env=env).stdout
    result = []
    prev = 0.0
    for name, cum, rss in json.loads(out.strip().splitlines()[-1]):
        result.append(Phase(name, cum - prev, cum, rss))
        prev = cum
    return result


def import_profile(argv: list[str], env: dict[str, str], repeats: int) -> tuple[float, list[ImportCost]]:
    """``python -X importtime -m gpuscope <argv>``: all imports of the real command, and the heavy ones.

    A module is counted where it is first imported (later imports of it are free); its cost
    includes everything it imports first. Returns the total import time (sum over top-level
    imports, median of ``repeats`` runs) and the listed modules' costs (best of the runs).
    """
    best: dict[str, float] = {}
    parent_of: dict[str, str] = {}
    totals: list[float] = []
    for _ in range(repeats):
        err = subprocess.run([sys.executable, "-X", "importtime", "-m", "gpuscope", *argv], check=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env).stderr
        entries: list[tuple[int, str, int]] = []  # (depth, name, cumulative µs), children first
        for line in err.splitlines():
            if not line.startswith("import time:") or "|" not in line:
                continue
            _self, cum_text, label = line[len("import time:"):].split("|", 2)
            if cum_text.strip().isdigit():  # not the header line
                entries.append(((len(label) - len(label.lstrip())) // 2, label.strip(), int(cum_text)))
        totals.append(sum(cum for depth, _n, cum in entries if depth == 0) / 1e6)
        for i, (depth, name, cum) in enumerate(entries):
            if name in IMPORT_MODULES:
                best[name] = min(best.get(name, float("inf")), cum / 1e6)
                parent_of[name] = next((n for d, n, _c in entries[i + 1:] if d < depth), "-")
    costs = [ImportCost(m, best[m], parent_of[m]) for m in IMPORT_MODULES if m in best]
    return statistics.median(totals), costs


class _RecordingReport(Report):
    """A report that keeps the text of every query run on it."""

    queries: list[str]

    def sql(self, query: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
        self.queries.append(query)
        return super().sql(query, params)


def explain_analyze(report: Path) -> str:
    """DuckDB's profile of the query cuda_gpu_kern_sum runs, verbatim."""
    with _RecordingReport.open(report) as r:
        assert isinstance(r, _RecordingReport)
        r.queries = []
        cuda_gpu_kern_sum(r)
        summary = next(q for q in r.queries if "GROUP BY" in q)
        rows = r.con.execute("EXPLAIN ANALYZE " + summary).fetchall()
    return "\n".join(str(row[-1]) for row in rows)


def markdown(d: Diagnosis) -> str:
    out: list[str] = []
    w = out.append
    w("### Where the time goes (phases inside one fresh process, warm cache)\n")
    w("| Phase | " + " | ".join(f"{fmt}: s (RSS MB after)" for fmt in d.phases) + " |")
    w("|---|" + "---|" * len(d.phases))
    for i, name in enumerate(p.name for p in next(iter(d.phases.values()))):
        cells = [f"{ps[i].seconds:.3f} ({ps[i].max_rss_mb:.0f})" for ps in d.phases.values()]
        w(f"| {name} | " + " | ".join(cells) + " |")
    w("")
    w(f"Imports of the whole command (`python -X importtime -m gpuscope stats REPORT --report "
      f"cuda_gpu_kern_sum`): {d.import_total_s:.3f} s in all (median of {REPEATS}; -X importtime itself "
      f"adds some). Heavy modules, best of {REPEATS}; a module's time includes what it imports first and is "
      f"counted where it is first imported:\n")
    w("| Module | Cumulative s | First imported by |")
    w("|---|---|---|")
    for ic in d.imports:
        w(f"| {ic.module} | {ic.cumulative_s:.3f} | {ic.imported_by} |")
    w("")
    w("<details><summary>EXPLAIN ANALYZE of the cuda_gpu_kern_sum query</summary>\n")
    w("```")
    w(d.plan.strip())
    w("```\n</details>\n")
    return "\n".join(out) + "\n"
