"""Every reader command on every kind of good report: a reader that fails on a report it should read is
caught here, named by report and command.

The reports: every recorded report in tests/fixtures/ (GPU runs of an H100 and an H200, CPU runs, a
crashed run, capture ranges, NCCL ranks); reports made row by row for the edges (no steps, one step, two
steps, no kernels, nothing at all, NVTX ranges that never ended); a real CPU run whose loop ends inside
the overhead probe (its capture windows hold no timed step with collection off); and imported traces
(the PyTorch profiler trace of tests/fixtures, and the public Kineto and Nsight Systems traces of
../shared/traces when they are there).

The commands, on each report: ``stats`` (text, every report), every ``stats`` report as csv,
``analyze`` (text and json), ``export`` (Chrome JSON), ``report`` (HTML), ``roofline``, ``kernels`` and
``diff REPORT REPORT``. Each must exit 0 with no traceback, no internal error and no word of damage
on stderr, and print what it exists to print (JSON that parses, a non-empty table, an HTML page).
One refusal is expected and checked as such: ``kernels`` on a report without kernels exits 2 with its
one line "... has no kernels ...". ``view`` serves a page until stopped, and is not run here.

Cost: one Python per report runs all its commands (imports paid once), two of them at a time. The
csv reports of ``stats`` run as one command; only when it fails does each report run alone, so that
the failure names it. Measured on a 2-core machine that other work kept busy (load average 3.5-4):
6 min 18 s, 7 min of CPU in all (about 3.8 min on two idle cores); with GPUSCOPE_READER_MATRIX=all,
which adds the six slowest recorded reports (HEAVY), 10 min 38 s. Reports of a kind others already
cover (LIKE_OTHERS: more GPU runs of one process, more four-rank jobs) are read with it too.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from conftest import FIXTURES
from gpuscope.analysis import STATS_REPORTS
from import_helpers import SHARED_TRACES
from report_builder import ReportBuilder, torch_training

from .conftest import base_env

pytestmark = pytest.mark.slow

WORKERS = 2  # drivers at a time: CI machines have 2 cores
# The recorded reports that took 40 s or more each on a shared 2-core machine (every command, seconds in
# brackets): read only with GPUSCOPE_READER_MATRIX=all, to keep the file within CI's few minutes.
HEAVY = {"client_eager_norm_chain": 139, "program_adam_foreach_off": 115, "diagnosis_launch_bound": 77,
         "program_custom_rnn_loop": 51, "program_triton_substeps": 46, "program_dataloader_and_sync": 43,
         "client_jax_mlp_paced": 49}
# Recorded reports of a kind the others already cover (GPU training and inference runs of one process,
# four-rank tensor-parallel jobs): read only with GPUSCOPE_READER_MATRIX=all, to keep CI within its time.
LIKE_OTHERS = {"client_dataloader_cnn", "client_hf_gpt2_train", "client_nanogpt_compiled",
               "client_torch_transformer_lm_fp32", "client_tv_resnet50_amp", "client_tv_resnet18_infer",
               "dist4_tp_heavy_split_8_8", "dist4_tp_heavy_split_15_1"}
EVERY_REPORT = os.environ.get("GPUSCOPE_READER_MATRIX") == "all"
DRIVER_TIMEOUT_S = 420  # for every command on one report; the largest fixture takes about 110 s
PROBE_TIMEOUT_S = 120  # the profiled CPU run of 11 steps takes a few seconds

# Runs every reader command on one report in one Python, each as the CLI runs it (main(argv)), and
# prints one JSON object: the report's kernel count and, per command, its exit code, the end of its
# stderr and what it made (characters printed, whether JSON parsed, the size of a written file).
DRIVER = textwrap.dedent("""
    import contextlib, io, json, os, sys, time, traceback
    from gpuscope.cli import main
    from gpuscope.analysis import STATS_REPORTS

    report, out, trace = sys.argv[1], sys.argv[2], (sys.argv[3] if len(sys.argv) > 3 else "")
    results = []

    def run(label, argv, check=None):
        err, std = io.StringIO(), io.StringIO()
        began = time.perf_counter()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(std):
            try:
                code = main(argv)
            except BaseException:
                code = -1
                traceback.print_exc(file=err)
        entry = {"command": label, "argv": argv, "code": code, "stderr": err.getvalue()[-3000:],
                 "stdout_chars": len(std.getvalue().strip()), "made": None,
                 "seconds": round(time.perf_counter() - began, 2)}
        if code == 0 and check is not None:
            try:
                entry["made"] = check(std.getvalue())
            except Exception as exc:
                entry["made"] = "unreadable: " + repr(exc)[:500]
        results.append(entry)
        return code

    def json_doc(text):
        doc = json.loads(text)
        return "json " + type(doc).__name__ + " of " + str(len(doc))

    def trace_file(_):
        with open(out + ".trace.json") as fh:
            doc = json.load(fh)
        events = doc["traceEvents"] if isinstance(doc, dict) else doc
        return "trace of " + str(len(events)) + " events"

    def html_file(_):
        with open(out + ".html", encoding="utf-8") as fh:
            text = fh.read()
        return "html of " + str(len(text)) + " chars" if "<html" in text[:2000].lower() else "not html"

    if trace:
        run("import", ["import", trace, "-o", report], lambda _: "report of " + str(os.path.getsize(report)) + " bytes")
    kernels = None
    if os.path.exists(report):
        from gpuscope.trace.report import Report
        with Report.open(report) as r:
            kernels = r.count("kernel")
    run("stats", ["stats", report])
    batch = ["stats", report, "-f", "csv"] + [a for n in STATS_REPORTS for a in ("-r", n)]
    def sections(text):
        return [line[2:].strip() for line in text.splitlines() if line.startswith("# ")]

    if run("stats -f csv (every report)", batch, sections) != 0:
        for name in STATS_REPORTS:  # which report failed
            run("stats -r " + name + " -f csv", ["stats", "-r", name, report, "-f", "csv"])
    run("analyze", ["analyze", report])
    run("analyze -f json", ["analyze", report, "-f", "json"], json_doc)
    run("export", ["export", report, "-o", out + ".trace.json", "--force-overwrite"], trace_file)
    run("report", ["report", report, "-o", out + ".html", "--force-overwrite"], html_file)
    run("roofline", ["roofline", report])
    run("kernels", ["kernels", report])
    run("diff", ["diff", report, report])
    print(json.dumps({"kernels": kernels, "results": results}))
""")

STATS_COMMANDS = ["stats -f csv (every report)"] + [f"stats -r {n} -f csv" for n in STATS_REPORTS]
COMMANDS = ["stats", *STATS_COMMANDS, "analyze", "analyze -f json", "export", "report", "roofline", "kernels",
            "diff"]
PRINTS = {"stats", "stats -f csv (every report)", "analyze", "analyze -f json", "roofline", "diff"}
MAKES = {"analyze -f json": "json dict", "export": "trace of", "report": "html of", "import": "report of"}
ALARMS = ("Traceback", "internal error", "damaged")

# A program of 11 optimizer steps: the overhead probe switches collection off after step 10, and the
# loop ends inside it, so no step with collection off is timed.
PROBE_PROGRAM = textwrap.dedent("""
    import torch
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    x = torch.randn(4, 16)
    for _ in range(11):
        opt.zero_grad()
        m(x).pow(2).mean().backward()
        opt.step()
""")


# --- the reports ---------------------------------------------------------------------------------------

def _launches(b: ReportBuilder, count: int, start: int = 0, period: int = 100_000) -> None:
    """``count`` kernels launched from thread 1, one per ``period`` ns from ``start``."""
    for i in range(count):
        t = start + i * period
        b.kernel("gemm" if i % 2 else "relu", t + 20_000, t + 60_000, tid=1, launch=t)


def _no_steps(path: Path) -> None:
    b = ReportBuilder(path)
    _launches(b, 3)
    b.open().close()


def _one_step(path: Path) -> None:
    b = ReportBuilder(path)
    _launches(b, 6)
    b.range("Net", 0, 250_000, 1, category="forward")
    b.mark("step", 600_000, 1)
    b.open().close()


def _two_steps(path: Path) -> None:
    torch_training(path).close()


def _no_kernels(path: Path) -> None:
    b = ReportBuilder(path)
    for step in range(3):
        t = step * 1_000_000
        b.range("Net", t, t + 400_000, 1, category="forward")
        b.range("work", t + 500_000, t + 900_000, 1, source="nvtx")
        b.mark("step", t + 1_000_000, 1)
    b.open().close()


def _nothing(path: Path) -> None:
    ReportBuilder(path).open().close()


def _open_nvtx(path: Path) -> None:
    b = ReportBuilder(path)
    _launches(b, 8)
    b.range("outer", 0, None, 1, source="nvtx", domain="app")  # never ended
    b.range("inner", 100_000, 300_000, 1, source="nvtx", domain="app")
    b.range("tail", 500_000, None, 1, source="nvtx")  # never ended either
    b.range("other thread", 200_000, None, 2, source="nvtx")
    b.mark("step", 400_000, 1)
    b.mark("step", 800_000, 1)
    b.open().close()


def _probe_at_last_step(path: Path) -> None:
    program = path.parent / "probe_program.py"
    program.write_text(PROBE_PROGRAM)
    env = base_env({"CUDA_VISIBLE_DEVICES": "", "GPUSCOPE_PROBE_GAP_S": "0", "GPUSCOPE_PROBE_MIN_OFF_MS": "0"})
    done = subprocess.run([sys.executable, "-m", "gpuscope", "profile", "-o", str(path), sys.executable,
                           str(program)], capture_output=True, text=True, env=env, cwd=path.parent,
                          timeout=PROBE_TIMEOUT_S)
    assert done.returncode == 0 and path.is_file(), done.stderr[-3000:]
    import duckdb

    con = duckdb.connect(str(path), read_only=True)
    try:
        reasons = [r for (r,) in con.execute("SELECT reason FROM capture_window").fetchall()]
    finally:
        con.close()
    assert any("overhead probe" in str(r) for r in reasons), f"no probe in the run: {reasons}\n{done.stderr}"


@dataclass(frozen=True)
class Case:
    """One report of the matrix: how to make it, and the trace it is imported from (if any)."""

    name: str
    make: Callable[[Path], None] | None = None
    trace: Path | None = None


def _unpack(name: str) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        with gzip.open(FIXTURES / f"{name}.gpuscope.gz", "rb") as src, open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)
    return make


def _cases() -> list[Case]:
    recorded = sorted(FIXTURES.glob("*.gpuscope.gz"), key=lambda p: -p.stat().st_size)  # largest first
    cases = [Case(p.name.removesuffix(".gpuscope.gz"), _unpack(p.name.removesuffix(".gpuscope.gz")))
             for p in recorded]
    cases += [Case("made:no_steps", _no_steps), Case("made:one_step", _one_step), Case("made:two_steps", _two_steps),
              Case("made:no_kernels", _no_kernels), Case("made:nothing", _nothing),
              Case("made:open_nvtx_ranges", _open_nvtx), Case("run:probe_at_last_step", _probe_at_last_step),
              Case("import:gpt_eager_torch_trace", trace=FIXTURES / "gpt_eager.torch_trace.json.gz"),
              Case("import:shared_kineto_triton",
                   trace=SHARED_TRACES / "kineto" / "hta-triton_example--triton_example.json.gz"),
              Case("import:shared_kineto_bert",
                   trace=SHARED_TRACES / "kineto" / "tracelens-h100--gaunernst_bert-small-uncased__1016001.json.gz"),
              Case("import:shared_nsys_healthy", trace=SHARED_TRACES / "nsys" / "nsys-ai--healthy_1pct.sqlite")]
    return cases


CASES = _cases()


# --- running them ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Outcome:
    """What the commands did on one report."""

    kernels: int | None
    results: dict[str, dict[str, Any]]


class Matrix:
    """Runs the driver on every report, ``WORKERS`` at a time, as soon as the first test asks."""

    def __init__(self, root: Path, wanted: set[str]) -> None:
        self.root = root
        self.wanted = wanted
        self._lock = threading.Lock()
        self._futures: dict[str, Future[Outcome]] = {}
        self._pool = ThreadPoolExecutor(max_workers=WORKERS)

    def outcome(self, name: str) -> Outcome:
        with self._lock:
            if not self._futures:
                for case in CASES:
                    if case.name in self.wanted and (case.trace is None or case.trace.exists()):
                        self._futures[case.name] = self._pool.submit(self._run, case)
        return self._futures[name].result()

    def _run(self, case: Case) -> Outcome:
        d = self.root / case.name.replace(":", "_")
        d.mkdir()
        path = d / "report.gpuscope"
        if case.make is not None:
            case.make(path)
        argv = [sys.executable, "-c", DRIVER, str(path), str(d / "out")]
        if case.trace is not None:
            argv.append(str(case.trace))
        done = subprocess.run(argv, capture_output=True, text=True, env=base_env(), cwd=d, timeout=DRIVER_TIMEOUT_S)
        assert done.returncode == 0 and done.stdout.strip(), f"the driver failed on {case.name}:\n{done.stderr[-5000:]}"
        doc = json.loads(done.stdout.strip().splitlines()[-1])
        (d / "outcome.json").write_text(json.dumps(doc))  # kept with the outputs, for a look after a failure
        return Outcome(doc["kernels"], {r["command"]: r for r in doc["results"]})

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="session")
def matrix(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Matrix]:
    """The commands' outcomes on every report of the matrix that a selected test reads."""
    wanted = {item.callspec.params["report"] for item in request.session.items
              if hasattr(item, "callspec") and "report" in item.callspec.params and not item.get_closest_marker("skip")}
    m = Matrix(tmp_path_factory.mktemp("reader_matrix"), wanted)
    yield m
    m.close()


# --- what each command must do -----------------------------------------------------------------------------

# (report, command) pairs that fail today: reason, the exact error. None now.
KNOWN: dict[tuple[str, str], str] = {}


def _params() -> Iterator[Any]:
    for case in CASES:
        marks = []
        if case.trace is not None and not case.trace.exists():
            marks.append(pytest.mark.skip(reason=f"sample trace {case.trace.name} is not here"))
        if case.name in HEAVY and not EVERY_REPORT:
            marks.append(pytest.mark.skip(reason=f"{HEAVY[case.name]} s of reading: GPUSCOPE_READER_MATRIX=all reads it"))
        elif case.name in LIKE_OTHERS and not EVERY_REPORT:
            marks.append(pytest.mark.skip(reason="a kind other reports cover: GPUSCOPE_READER_MATRIX=all reads it"))
        for command in (["import"] if case.trace is not None else []) + COMMANDS:
            reason = KNOWN.get((case.name, command))
            extra = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            yield pytest.param(case.name, command, marks=marks + extra, id=f"{case.name}-{command}")


def _describe(entry: dict[str, Any]) -> str:
    return (f"gpuscope {' '.join(entry['argv'])}\nexit {entry['code']}, made {entry['made']}\n"
            f"--- stderr (end) ---\n{entry['stderr']}")


@pytest.mark.parametrize("report, command", list(_params()))
def test_reader_reads_good_report(matrix: Matrix, report: str, command: str) -> None:
    outcome = matrix.outcome(report)
    batch = outcome.results["stats -f csv (every report)"]
    if command.startswith("stats -r "):
        if batch["code"] == 0:  # every csv report ran in the one command: its table is there
            name = command.split()[2]
            assert name in (batch["made"] or []), _describe(batch) + f"\nno table {name} in: {batch['made']}"
            return
    entry = outcome.results.get(command)
    assert entry is not None, f"{command} did not run on {report}"
    what = _describe(entry)
    for alarm in ALARMS:
        assert alarm not in entry["stderr"], what
    if command == "kernels" and outcome.kernels == 0:
        # nothing to list: the documented refusal, one line
        lines = entry["stderr"].strip().splitlines()
        assert entry["code"] == 2, what
        assert len(lines) == 1 and lines[0].startswith("gpuscope: error: ") and "has no kernels" in lines[0], what
        return
    assert entry["code"] == 0, what
    if command in PRINTS or command == "kernels" or command.startswith("stats -r "):
        assert entry["stdout_chars"] > 0, what
    if command in MAKES:
        assert str(entry["made"]).startswith(MAKES[command]), what


def test_the_matrix_covers_every_stats_report_and_fixture() -> None:
    """A stats report or a recorded fixture added later joins the matrix by itself."""
    names = {c.name for c in CASES}
    assert {p.name.removesuffix(".gpuscope.gz") for p in FIXTURES.glob("*.gpuscope.gz")} <= names
    assert {f"stats -r {n} -f csv" for n in STATS_REPORTS} <= set(COMMANDS)
    assert len([c for c in CASES if c.make is not None and c.name.startswith(("made:", "run:"))]) == 7
    assert set(HEAVY) | LIKE_OTHERS <= names  # a renamed fixture is not skipped by a stale name
