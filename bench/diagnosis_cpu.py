"""Validation of ``gpuscope analyze`` without a GPU, on the CPU-only programs of tests/workloads/cpu.

For each program: time the as-written loop against each candidate fix in one process, interleaved
over several rounds (``--measure``: median step time after warm-up; the best fix's median gain and
its spread over the rounds); profile the as-written program with the default collectors of a
machine without a GPU (``gpuscope profile``: torch, host, torch-shapes, cpu); diagnose the report; and
compare the top finding's estimated saving (share of the profiled step) with the best fix's
measured gain (share of the unprofiled step). Writes a table (stdout and ``--out/diagnosis_cpu.md``)
and ``--out/diagnosis_cpu.json``, and keeps the reports in ``--out/reports``; ``--fixtures`` also
gzips them into tests/fixtures as ``cpu_<program>.gpuscope.gz``.

    python3 bench/diagnosis_cpu.py --out /tmp/diagnosis-cpu
    python3 bench/diagnosis_cpu.py --out /tmp/diagnosis-cpu --only infer_hot_line --rounds 7
    python3 bench/diagnosis_cpu.py --out /tmp/diagnosis-cpu --rediagnose   # after a change to a rule

Exits 1 when a program's expected rule is not the top finding.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = ROOT / "tests" / "workloads" / "cpu"
FIXTURES = ROOT / "tests" / "fixtures"
TIMEOUT_S = 300
AGREE = 0.30  # the estimate is within this share of the measured gain
IDLE = 0.10  # share of the cores busy under which the machine counts as idle (--wait-idle)
NOTHING = 0.05  # a balanced program: no finding and no measured gain above this share of the step

# program -> (what is wrong, the rule expected on top; None: nothing above NOTHING)
PROGRAMS: dict[str, tuple[str, str | None]] = {
    "dataloader_starved": ("DataLoader(num_workers=0), Python in the Dataset", "data_loader"),
    "infer_hot_line": ("inference, argmax in Python over the logits", "hot_line"),
    "one_thread": ("torch.set_num_threads(1) on large matmuls", "cpu_idle_cores"),
    "balanced": ("nothing (batches from memory, every core)", None),
    "infer_transformer": ("nothing (a small transformer, one batched call per step, no step marks)", None),
    "infer_mlp_per_item": ("inference, the model called once per item of the batch", "hot_line"),
    "train_small": ("nothing (a small MLP training loop)", None),
    "preprocess_loop": ("inference, batches normalized in Python value by value", "hot_line"),
}


def _run(cmd: list[str], log: Path) -> int:
    with open(log, "w") as fh:
        try:
            return subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=TIMEOUT_S, cwd=ROOT).returncode
        except subprocess.TimeoutExpired:
            return 124


def _stat() -> tuple[int, int]:
    """The machine's CPU time so far, all and idle, in clock ticks (/proc/stat)."""
    with open("/proc/stat") as fh:
        v = [int(x) for x in fh.readline().split()[1:]]
    return sum(v), v[3] + v[4]


def _busy() -> float:
    """The machine's CPU use over one second (all programs), as a share of its cores."""
    a = _stat()
    time.sleep(1.0)
    b = _stat()
    return 1.0 - (b[1] - a[1]) / max(b[0] - a[0], 1)


def wait_idle(limit_s: float, busy: float = IDLE) -> float:
    """Wait (at most ``limit_s``) until the machine's CPU use is under ``busy`` of its cores for a
    second; return the last reading. Timings of a loaded machine measure its load as much as the fix."""
    end = time.monotonic() + limit_s
    now = _busy()
    while now >= busy and time.monotonic() < end:
        time.sleep(2.0)
        now = _busy()
    return now


def diagnose_report(path: Path) -> dict[str, Any]:
    """The top finding (advisory ones left out), every finding, and the breakdown of a report."""
    sys.path.insert(0, str(ROOT / "src"))
    from gpuscope.analysis.diagnosis import diagnose
    from gpuscope.reporters.findings_json import as_dict
    from gpuscope.trace.report import Report

    with Report.open(path) as report:
        diag = diagnose(report, min_share=0.0)
        doc = as_dict(diag)
        other = report.sql(
            """WITH t AS (SELECT ts_ns, sum(value) FILTER (WHERE name LIKE 'cpu%.util_percent') AS m,
                                sum(value) FILTER (WHERE name = 'process.cpu_percent') AS p
                          FROM host_counter GROUP BY ts_ns)
               SELECT avg(greatest(m - p, 0)) / 100 FROM t""")[0][0]
    actionable = [f for f in doc["findings"] if not f["advisory"]]
    return {"top": actionable[0] if actionable else None, "findings": doc["findings"],
            "mean_ns": doc["processes"][0]["mean_ns"] if doc["processes"] else {},
            "step_source": doc["step_source"], "other_cores": round(float(other or 0.0), 2)}


def _busy_during(cmd: list[str], log: Path) -> tuple[int, float]:
    """Run ``cmd``; return its exit code and the machine's CPU use meanwhile, beyond the command's own."""
    ticks = os.sysconf("SC_CLK_TCK")
    a, before = _stat(), resource.getrusage(resource.RUSAGE_CHILDREN)
    rc = _run(cmd, log)
    b, after = _stat(), resource.getrusage(resource.RUSAGE_CHILDREN)
    own = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * ticks
    total, idle = b[0] - a[0], b[1] - a[1]
    return rc, max(0.0, (total - idle - own) / max(total, 1))


def measure(name: str, out: Path, rounds: int, fixtures: bool, idle_s: float = 0.0,
            attempts: int = 1) -> dict[str, Any]:
    """Measure the fixes of one program, profile it as written, and diagnose the report. With
    ``attempts`` > 1, a measurement or profile during which other programs kept the machine busy
    (over 15% of its cores, or 0.3 cores in the report's host counters) is made again."""
    work, reports = out / "work", out / "reports"
    script = str(WORKLOADS / f"{name}.py")
    py = sys.executable
    problem, expected = PROGRAMS[name]
    row: dict[str, Any] = {"program": name, "problem": problem, "expected": expected}
    timing = work / f"{name}.measure.json"
    for attempt in range(attempts):
        wait_idle(idle_s)
        timing.unlink(missing_ok=True)
        row["measure_rc"], row["busy_during_measure"] = _busy_during(
            [py, script, "--measure", str(timing), "--rounds", str(rounds)], work / f"{name}.measure.log")
        row["measure_attempts"] = attempt + 1
        if row["busy_during_measure"] < 0.15:
            break
    measured = json.loads(timing.read_text()) if timing.exists() else None
    row["measured"] = measured
    report = reports / f"{name}.gpuscope"
    diag = None
    for attempt in range(attempts):
        wait_idle(idle_s)
        row["profile_rc"] = _run([py, "-m", "gpuscope", "profile", "-o", str(reports / name), "--force-overwrite",
                                  script], work / f"{name}.profile.log")
        row["profile_attempts"] = attempt + 1
        diag = diagnose_report(report) if report.exists() else None
        if diag is None or diag["other_cores"] < 0.3:
            break
    row["diagnosis"] = diag
    return judge(row, measured, report if fixtures else None)


def declared_fixes(name: str) -> dict[str, tuple[str, tuple[str, ...]]] | None:
    """The candidate fixes a program declares (``FIXES = {name: (description, rules)}``, read from its
    source without running it), or None where it declares none (or ``FIXES`` of another shape)."""
    import ast

    tree = ast.parse((WORKLOADS / f"{name}.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "FIXES" for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return None
            if isinstance(value, dict) and all(isinstance(v, (tuple, list)) and len(v) == 2
                                               and isinstance(v[1], (tuple, list)) for v in value.values()):
                return {str(k): (str(v[0]), tuple(v[1])) for k, v in value.items()}
            return None
    return None


def judge(row: dict[str, Any], measured: dict[str, Any] | None, fixture: Path | None = None) -> dict[str, Any]:
    """Compare the top finding of ``row["diagnosis"]`` with the best measured fix; with ``fixture``,
    gzip that report into tests/fixtures."""
    diag, expected = row["diagnosis"], row["expected"]
    top = diag["top"] if diag else None
    gain = float(measured["gain"]) if measured else None
    estimate = float(top["share"]) if top else 0.0
    row["best_fix"] = measured["best_fix"] if measured else None
    row["gain"] = gain
    if measured and row["best_fix"]:
        best = measured["variants"][row["best_fix"]]
        row["gain_spread"] = [best["gain_min"], best["gain_max"]]
    row["top_rule"] = top["rule"] if top else None
    row["estimate"] = estimate
    fixes = declared_fixes(row["program"])
    if fixes is not None and measured and row["best_fix"] in fixes:
        # the declared rules of the fix that measured best name the finding that should come first
        # (none where no fix gains more than NOTHING)
        rules = fixes[row["best_fix"]][1] if gain is not None and gain >= NOTHING else ()
        row["best_fix_rules"] = list(rules)
        row["declared_ok"] = (row["top_rule"] in rules) if rules else estimate < NOTHING
    if expected is None:
        row["top_ok"] = estimate < NOTHING
        row["agrees"] = gain is not None and estimate < NOTHING and gain < NOTHING
    else:
        row["top_ok"] = row["top_rule"] == expected
        row["agrees"] = bool(gain and gain > 0 and abs(estimate - gain) <= AGREE * gain)
    if fixture is not None and fixture.exists():
        with open(fixture, "rb") as src, gzip.open(FIXTURES / f"cpu_{row['program']}.gpuscope.gz", "wb",
                                                     compresslevel=9) as dst:
            shutil.copyfileobj(src, dst)
    return row


def rediagnose(out: Path, name: str) -> dict[str, Any]:
    """The row of one program from the timings and report an earlier run kept in ``out``, diagnosed again."""
    problem, expected = PROGRAMS[name]
    timing, report = out / "work" / f"{name}.measure.json", out / "reports" / f"{name}.gpuscope"
    measured = json.loads(timing.read_text()) if timing.exists() else None
    row: dict[str, Any] = {"program": name, "problem": problem, "expected": expected,
                           "diagnosis": diagnose_report(report) if report.exists() else None}
    return judge(row, measured)


def table(rows: list[dict[str, Any]]) -> str:
    """The results as a Markdown table."""
    out = ["| program | problem | best measured fix | its gain (spread) | top finding | estimate | within ±30%? | "
           "top finding names the best fix? |",
           "| --- | --- | --- | ---: | --- | ---: | --- | --- |"]
    for r in rows:
        spread = r.get("gain_spread")
        gain = "-" if r["gain"] is None else f"{r['gain']:.1%}" + (
            f" ({spread[0]:.0%} to {spread[1]:.0%})" if spread else "")
        top = r["top_rule"] or "none"
        if r["expected"] is None:
            top = f"{top} (none above {NOTHING:.0%} expected)"
        elif not r["top_ok"]:
            top += f" (expected {r['expected']})"
        verdict = "yes" if r["agrees"] else "no"
        if r["expected"] is None:
            verdict += f" (both under {NOTHING:.0%})" if r["agrees"] else ""
        declared = "-" if "declared_ok" not in r else ("yes" if r["declared_ok"] else "no")
        out.append(f"| {r['program']} | {r['problem']} | {r['best_fix'] or '-'} | {gain} | {top} | "
                   f"{r['estimate']:.1%} | {verdict} | {declared} |")
    return "\n".join(out) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="directory for the reports, logs, table and JSON")
    p.add_argument("--rediagnose", action="store_true",
                   help="diagnose the reports kept in --out again, with the timings kept there "
                        "(after a change to a rule)")
    p.add_argument("--only", help="comma-separated programs (default: all)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds of each measurement (default 5)")
    p.add_argument("--fixtures", action="store_true", help="gzip the reports into tests/fixtures")
    p.add_argument("--attempts", type=int, default=1,
                   help="make a measurement or profile again (up to this many times) when other programs kept "
                        "the machine busy meanwhile")
    p.add_argument("--wait-idle", type=float, default=0.0, metavar="SECONDS",
                   help=f"before each measurement and profile, wait up to this long for the machine to be idle "
                        f"(under {IDLE:.0%} of its cores busy)")
    args = p.parse_args()
    out = Path(args.out)
    for sub in ("work", "reports"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    names = args.only.split(",") if args.only else list(PROGRAMS)
    if args.rediagnose:
        rows = [rediagnose(out, n) for n in names]
    else:
        rows = [measure(n, out, args.rounds, args.fixtures, args.wait_idle, args.attempts) for n in names]
    text = table(rows)
    (out / "diagnosis_cpu.md").write_text(text)
    (out / "diagnosis_cpu.json").write_text(json.dumps(rows, indent=2, default=str) + "\n")
    print(text, end="")
    return 0 if all(r["top_ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
