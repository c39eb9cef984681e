"""Validation of ``gpuscope analyze`` against what fixes measure (tests/workloads).

Two kinds of programs:

- the planted workloads (``sync_item.py``, ...: one planted bottleneck, NVTX ``step`` ranges,
  ``--fixed``): planted and fixed run untraced in separate processes, interleaved, ``--old-rounds``
  rounds (planted, fixed, planted, fixed, ...);
- the programs (``mlp_adam.py``, ...: ordinary scripts without step marks, several candidate fixes
  each, see tests/workloads/harness.py): every variant timed in one process, interleaved, with
  ``--measure --rounds N``;
- with ``--suite clients``, instead of both: the client programs (``tests/workloads/clients``: the same
  kind of script, built on transformers, torchvision, Lightning, JAX, CuPy, Triton), measured and
  diagnosed the same way.

Then each program as written runs under ``gpuscope profile -t TRACE``, its report is diagnosed, and
the best measured fix is compared with the top finding, and its measured gain with the estimated
share of the findings that name it (bench/diagnosis_compare.py says how). Writes
``diagnosis.json`` and ``diagnosis.md`` (tables for bench/RESULTS.md) to ``--out``, and keeps the
reports in ``--out/reports``. Rows already in ``--out/diagnosis.json`` are kept and replaced by
name, so a run can be split:

    python3 bench/diagnosis.py --out /tmp/diagnosis                       # everything (about 9 min on an H100)
    python3 bench/diagnosis.py --out /tmp/diagnosis --part 1/2            # half of it, by estimated time
    python3 bench/diagnosis.py --out /tmp/diagnosis --only bmm_loop,sync_item
    python3 bench/diagnosis.py --out /tmp/diagnosis --skip-old --rounds 7
    python3 bench/diagnosis.py --rediagnose /tmp/diagnosis [--reports DIR]  # the analysis only, on kept reports
    python3 bench/diagnosis.py --merge A B --out C                        # rows of several runs in one table
    python3 bench/diagnosis.py --out /tmp/clients --suite clients [--part 1/3]  # the client programs

Exits 1 when a program does not pass.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from diagnosis_compare import compare, finding_row, markdown  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = ROOT / "tests" / "workloads"
CLIENTS_DIR = WORKLOADS / "clients"
TRACE = "cuda,nvtx,torch,host,nvml,cpu"  # the GPU defaults without operator samples (as the fixtures were recorded), plus Python samples
TIMEOUT_S = int(os.environ.get("GPUSCOPE_BENCH_TIMEOUT", "240"))  # per process

# planted workload -> (the planted problem, the rules whose finding names its fix)
PLANTED: dict[str, tuple[str, tuple[str, ...]]] = {
    "sync_item": (".item() every step, then 3 ms of host work", ("host_sync",)),
    "pageable_copy": ("64 MB copied from pageable memory each step", ("pageable_copies",)),
    "slow_dataloader": ("DataLoader(num_workers=0), 5 ms of Python per batch", ("data_loader",)),
    "launch_bound": ("300 tiny kernels per step launched from Python", ("launch_bound",)),
    "fp32_gemm": ("float32 matmuls with TF32 off", ("no_tensor_cores",)),
    "small_gemms": ("256 small same-shape matmuls in a Python loop", ("small_gemms",)),
    "cpu_preprocess": ("per-value Python normalization in the loop", ("hot_line",)),
    "sync_d2h": ("blocking 8 MB device-to-host copy, then 3 ms of host work", ("sync_copies",)),
    "first_compile": ("torch.compile with a cold cache", ("startup",)),
}
# program -> estimated seconds on an H100 for its whole part of the run (processes started, timed
# runs, the traced run, the analysis); --part balances the halves by these
PROGRAMS: dict[str, float] = {
    "mlp_adam": 15, "bmm_loop": 15, "big_gemms_bf16": 13, "mlp_item_nonzero": 15, "infer_cnn_small": 14,
    "infer_transformer_fp32": 13, "sync_not_bottleneck": 14, "dataloader_and_sync": 22, "pageable_inference": 15,
    "results_to_host": 15, "python_tokenize": 15, "compiled_mlp": 50, "conv_train_bf16": 20,
    "elementwise_chain": 20, "custom_rnn_loop": 40, "conv_infer_fp16": 15, "compiled_graphs_infer": 60,
    "naive_attention_bf16": 40, "adam_foreach_off": 15, "triton_substeps": 25,
}
# client program (tests/workloads/clients) -> estimated seconds on an H100, as PROGRAMS (compiling ones longer)
CLIENTS: dict[str, float] = {
    "hf_gpt2_generate": 150, "hf_bert_infer": 90, "hf_gpt2_train": 60, "tv_resnet50_train": 80,
    "tv_resnet50_amp": 40, "tv_resnet18_infer": 60, "nanogpt_compiled": 90, "nanogpt_reduce_overhead": 90,
    "sdpa_explicit_mask": 30, "torch_transformer_lm_fp32": 40, "lightning_mlp": 60, "jax_mlp": 50,
    "cupy_elementwise": 30, "triton_small_blocks": 40, "dataloader_cnn": 40, "eager_norm_chain": 50,
    "compiled_graph_break": 60,
}
PLANTED_COST_S = {name: 60.0 if name == "first_compile" else 29.0 for name in PLANTED}


def _run(cmd: list[str], log: Path) -> tuple[int, float]:
    t = time.perf_counter()
    with open(log, "w") as fh:
        try:
            rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, timeout=TIMEOUT_S, cwd=ROOT).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    return rc, time.perf_counter() - t


def _load(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.exists() else None


def _profile(name: str, script: str, out: Path, trace: str, extra: list[str] = []) -> tuple[int, float]:  # noqa: B006
    cmd = [sys.executable, "-m", "gpuscope", "profile", "-t", trace, "-o", str(out / "reports" / name),
           "--force-overwrite", script, *extra]
    return _run(cmd, out / "work" / f"{name}.traced.log")


def run_planted(name: str, out: Path, rounds: int, trace: str) -> dict[str, Any]:
    """Time a planted workload and its fix in separate processes, interleaved; profile the planted one."""
    work = out / "work"
    script = str(WORKLOADS / f"{name}.py")
    fixed = ["--fixed", "--cache-dir", str(work / "compile-cache")] if name == "first_compile" else ["--fixed"]
    times: dict[str, list[float]] = {"planted": [], "fixed": []}
    rc: dict[str, int] = {}
    wall: dict[str, float] = {}
    timings: dict[str, list[dict[str, Any] | None]] = {"planted": [], "fixed": []}
    metric = "total_s" if name == "first_compile" else "median_step_s"
    for r in range(rounds):
        for kind, extra in (("planted", []), ("fixed", fixed)):
            timing = work / f"{name}.{kind}.{r}.json"
            timing.unlink(missing_ok=True)
            rc[f"{kind}_{r}"], wall[f"{kind}_{r}"] = _run([sys.executable, script, *extra, "--timing-out", str(timing)],
                                                         work / f"{name}.{kind}.{r}.log")
            doc = _load(timing)
            timings[kind].append(doc)
            if doc:
                times[kind].append(doc[metric])
    rc["traced"], wall["traced"] = _profile(name, script, out, trace)
    rules = list(PLANTED[name][1])
    ok = len(times["planted"]) == len(times["fixed"]) == rounds
    variants = {
        "planted": {"as_written": True, "rules": [], "work_changing": False, "samples_per_iteration": 1,
                    "round_s": times["planted"] if ok else []},
        "fixed": {"as_written": False, "rules": rules, "work_changing": False, "samples_per_iteration": 1,
                  "round_s": times["fixed"] if ok else []},
    }
    device = next((d["device"] for d in timings["planted"] if d), None)
    return {"program": name, "style": "planted", "description": PLANTED[name][0], "nothing_to_fix": False,
            "one_time": metric == "total_s", "metric": metric, "device": device, "variants": variants,
            "timing": timings, "rc": rc, "wall_s": {k: round(v, 1) for k, v in wall.items()}}


def run_program(name: str, out: Path, rounds: int, trace: str, extra: list[str] = []) -> dict[str, Any]:  # noqa: B006
    """Time every variant of a program in one process (``--measure``); profile it as written.

    ``extra``: more arguments for both runs of the program (``--device cpu --quick`` to try the
    bench on a machine without a GPU).
    """
    work = out / "work"
    script = str((CLIENTS_DIR if name in CLIENTS else WORKLOADS) / f"{name}.py")
    timing = work / f"{name}.measure.json"
    timing.unlink(missing_ok=True)
    rc: dict[str, int] = {}
    wall: dict[str, float] = {}
    rc["measure"], wall["measure"] = _run([sys.executable, script, "--measure", "--rounds", str(rounds),
                                           "--timing-out", str(timing), *extra], work / f"{name}.measure.log")
    rc["traced"], wall["traced"] = _profile(name, script, out, trace, extra)
    doc = _load(timing) or {}
    return {"program": name, "style": "program", "description": doc.get("description", ""),
            "nothing_to_fix": bool(doc.get("nothing_to_fix", False)), "one_time": False, "metric": "per_iteration_s",
            "device": doc.get("device"), "marks": doc.get("marks"), "variants": doc.get("variants", {}),
            "timing": doc, "rc": rc, "wall_s": {k: round(v, 1) for k, v in wall.items()}}


def diagnose_report(report: Path, md_out: Path | None = None) -> dict[str, Any]:
    """Diagnose one report: its findings as plain data, the rules skipped, the mean breakdown shares."""
    from gpuscope.analysis.diagnosis import diagnose
    from gpuscope.reporters import findings_markdown
    from gpuscope.trace.report import Report

    with Report.open(report) as r:
        t = time.perf_counter()
        diag = diagnose(r)
        seconds = time.perf_counter() - t
    if md_out is not None:
        md_out.write_text(findings_markdown.render(diag))
    parts = diag.processes[0].mean_parts() if diag.processes else {}
    steps = diag.processes[0].steps if diag.processes else None
    return {
        "analyze_s": round(seconds, 2),
        "step_source": diag.step_source,
        "steps": len(steps) if steps is not None else 0,
        "findings": [finding_row(f) for f in diag.findings],
        "skipped": [{"rule": s.rule, "reason": s.reason} for s in diag.skipped],
        "breakdown_share": ({k: v / parts["duration_ns"] for k, v in parts.items() if k != "duration_ns"}
                            if parts and parts.get("duration_ns") else None),
    }


def judge(row: dict[str, Any], report: Path | None, md_out: Path | None = None) -> dict[str, Any]:
    """Diagnose ``report`` (when there is one) into ``row`` and compare it with the measured fixes."""
    if report is not None and report.exists():
        row["diagnosis"] = diagnose_report(report, md_out)
    findings = (row.get("diagnosis") or {}).get("findings", [])
    row["comparison"] = compare(row["variants"], findings, row["nothing_to_fix"], row.get("one_time", False))
    if not any(v.get("round_s") for v in row["variants"].values()):
        row["comparison"].update({"pass": False, "why": "no timing (see the logs in work/)"})
    elif not row.get("diagnosis"):
        row["comparison"].update({"pass": False, "why": "no report"})
    return row


def _order() -> list[str]:
    return [*PLANTED, *PROGRAMS, *CLIENTS]


def merge_rows(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of both, the new replacing the old of the same program, in the order of the tables."""
    by_name = {r["program"]: r for r in old}
    by_name.update({r["program"]: r for r in new})
    rank = {n: i for i, n in enumerate(_order())}
    return sorted(by_name.values(), key=lambda r: rank.get(r["program"], len(rank)))


def split(names: list[str], part: int, parts: int) -> list[str]:
    """Part ``part`` (1-based) of ``parts`` of ``names``, balanced by estimated time; in the names' order."""
    cost = {**PLANTED_COST_S, **PROGRAMS, **CLIENTS}
    load = [0.0] * parts
    home: dict[str, int] = {}
    for n in sorted(names, key=lambda n: (-cost.get(n, 20.0), names.index(n))):
        k = min(range(parts), key=lambda i: (load[i], i))
        home[n] = k
        load[k] += cost.get(n, 20.0)
    return [n for n in names if home[n] == part - 1]


def write(out: Path, rows: list[dict[str, Any]], trace: str, seconds: float | None = None) -> None:
    """Write diagnosis.json and diagnosis.md to ``out``."""
    device = next((r["device"] for r in rows if r.get("device")), "unknown")
    doc = {"device": device, "trace": trace, "programs": rows}
    if seconds is not None:
        doc["seconds"] = round(seconds, 1)
    (out / "diagnosis.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out / "diagnosis.md").write_text(markdown(rows, device, trace))


def _existing(out: Path) -> list[dict[str, Any]]:
    doc = _load(out / "diagnosis.json")
    return doc.get("programs", []) if doc else []


def find_report(name: str, dirs: list[Path], tmp: Path) -> Path | None:
    """The report of ``name`` in ``dirs`` (plain, or gzipped as NAME, program_NAME or diagnosis_NAME)."""
    for d in dirs:
        if (d / f"{name}.gpuscope").exists():
            return d / f"{name}.gpuscope"
        for stem in (name, f"program_{name}", f"diagnosis_{name}"):
            gz = d / f"{stem}.gpuscope.gz"
            if gz.exists():
                target = tmp / f"{name}.gpuscope"
                with gzip.open(gz, "rb") as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                return target
    return None


def rediagnose(src: Path, out: Path, report_dirs: list[Path]) -> list[dict[str, Any]]:
    """Re-run the analysis on the kept reports of ``src`` with its saved timings; write to ``out``."""
    doc = _load(src / "diagnosis.json")
    if not doc:
        sys.exit(f"no diagnosis.json in {src}")
    dirs = [src / "reports", src.parent / "fixtures", *report_dirs]
    rows = []
    (out / "reports").mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for row in doc["programs"]:
            report = find_report(row["program"], dirs, Path(tmp))
            if report is None:
                print(f"{row['program']}: no report in {', '.join(map(str, dirs))}; comparison kept as it was")
                rows.append(row)
                continue
            rows.append(judge(row, report, out / "reports" / f"{row['program']}.analyze.md"))
            _print(rows[-1])
    write(out, rows, doc.get("trace", TRACE))
    return rows


def _print(row: dict[str, Any]) -> None:
    c = row.get("comparison", {})
    est = f"{c['estimate']:.0%}" if c.get("estimate") is not None else "-"
    gain = f"{c['measured']:.0%}" if c.get("measured") is not None else "-"
    print(f"{row['program']}: best fix {c.get('best_fix')} {gain}, top finding {c.get('top_rule')} "
          f"(estimate {est}); {'pass' if c.get('pass') else 'FAIL'}: {c.get('why')}; wall {row.get('wall_s', {})}",
          flush=True)


def _names(args: argparse.Namespace, p: argparse.ArgumentParser) -> list[str]:
    if args.suite == "clients":
        suite = list(CLIENTS)
    else:
        suite = [n for n in [*PLANTED, *PROGRAMS]
                 if not (args.skip_old and n in PLANTED) and not (args.skip_new and n in PROGRAMS)]
    names = suite
    if args.only:
        only = args.only.split(",")
        known = CLIENTS if args.suite == "clients" else {**PLANTED, **PROGRAMS}
        unknown = [n for n in only if n not in known]
        if unknown:
            p.error(f"unknown program(s) {', '.join(unknown)}; choose from {', '.join(known)}")
        names = [n for n in names if n in only]
    if args.part:
        part, parts = (int(x) for x in args.part.split("/"))
        if not 1 <= part <= parts:
            p.error("--part is K/N with 1 <= K <= N")
        names = split(names, part, parts)
    return names


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", help="directory for results and reports (default with --rediagnose: that directory)")
    p.add_argument("--only", help="comma-separated programs (default: all)")
    p.add_argument("--skip-old", action="store_true", help="leave out the planted workloads")
    p.add_argument("--skip-new", action="store_true", help="leave out the programs")
    p.add_argument("--suite", choices=("workloads", "clients"), default="workloads",
                   help="workloads: the planted workloads and programs of tests/workloads (default); clients: "
                        "the client programs of tests/workloads/clients instead")
    p.add_argument("--part", help="K/N: run part K of N of the selected programs, balanced by estimated time")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds of each program's --measure")
    p.add_argument("--old-rounds", type=int, default=2, help="interleaved planted/fixed rounds of the planted ones")
    p.add_argument("--trace", default=TRACE, help=f"collectors of the traced run (default {TRACE})")
    p.add_argument("--rediagnose", metavar="DIR", help="only re-run the analysis on DIR's reports and timings")
    p.add_argument("--reports", action="append", default=[], help="more directories to look for reports in")
    p.add_argument("--merge", nargs="+", metavar="DIR", help="merge the rows of these runs into --out")
    p.add_argument("--program-args", default="",
                   help="more arguments for the programs' runs ('--device cpu --quick': a try without a GPU)")
    args = p.parse_args()
    if args.rediagnose:
        out = Path(args.out or args.rediagnose)
        rows = rediagnose(Path(args.rediagnose), out, [Path(d) for d in args.reports])
    elif args.merge:
        if not args.out:
            p.error("--merge needs --out")
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        rows = _existing(out)
        trace = TRACE
        for d in args.merge:
            doc = _load(Path(d) / "diagnosis.json") or {}
            rows = merge_rows(rows, doc.get("programs", []))
            trace = doc.get("trace", trace)
        write(out, rows, trace)
    else:
        if not args.out:
            p.error("--out is required")
        out = Path(args.out)
        (out / "work").mkdir(parents=True, exist_ok=True)
        (out / "reports").mkdir(exist_ok=True)
        names = _names(args, p)
        os.environ.setdefault("PYTHONUNBUFFERED", "1")
        t0 = time.perf_counter()
        print(f"running {', '.join(names)} (estimated {sum({**PLANTED_COST_S, **PROGRAMS, **CLIENTS}[n] for n in names):.0f} s)",
              flush=True)
        rows = _existing(out)
        for name in names:
            if name in PLANTED:
                row = run_planted(name, out, args.old_rounds, args.trace)
            else:
                row = run_program(name, out, args.rounds, args.trace, shlex.split(args.program_args))
            judge(row, out / "reports" / f"{name}.gpuscope", out / "reports" / f"{name}.analyze.md")
            _print(row)
            rows = merge_rows(rows, [row])
            write(out, rows, args.trace, time.perf_counter() - t0)  # after each program: a cut-off run keeps its rows
        rows = [r for r in rows if r["program"] in names]
    print((out / "diagnosis.md").read_text())
    print(f"wrote {out / 'diagnosis.json'}, {out / 'diagnosis.md'}; reports in {out / 'reports'}")
    return 0 if all((r.get("comparison") or {}).get("pass") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
