"""Capture ranges on a GPU: the kernels of exactly the asked steps, against a full run of the same program.

Run from the repository root on the GPU machine (gpuscope importable, e.g. PYTHONPATH=src):

    python3 tests/device/check_capture_range.py --out /tmp/gpuscope-device/capture [--work DIR]

It profiles workloads/capture_steps.py (the launch-bound MLP, one optimizer step per step):

- ``full``: the whole run of 30 steps: the truth, per step, by step_sum;
- ``steps``: ``--steps 10-20``: step_sum must list steps 10 to 20 with the full run's kernel count
  and kernel names for each, and nothing else may be in the report (capture_truth.check_steps,
  which tests/unit/test_recorded_capture_steps.py reruns in CI on the recording);
- ``profiler_api``: ``--capture-range=cudaProfilerApi`` around steps 12 to 16
  (torch.cuda.profiler.start/stop): the kernels of those five steps, one capture window;
- ``nvtx``: ``--capture-range=nvtx --nvtx-capture backward`` on workloads/mlp.py --nvtx
  (torch.cuda.nvtx ranges): the kernels launched inside the backward ranges of a full run, and the
  backward ranges themselves as NVTX records from CUPTI;
- ``inprocess``: ``with gpuscope.profile()`` over steps 5 to 9 of a process that initialised CUDA
  before (not under gpuscope profile): the kernels of those five steps.

The reports go to ``--work`` (default: a temporary folder, removed at the end). ``--out`` gets only
small files:

- ``check_capture.json``: per part, the steps seen, kernels per step captured and in the full run,
  whether the kernel names equal the full run's, the trimmed counts, pass or fail (also printed);
- ``capture_steps.gpuscope.gz``: the ``--steps 10-20`` report, and ``capture_steps.facts.json``:
  the full run's kernels per step (count and names): together the fixture of
  tests/unit/test_recorded_capture_steps.py (copy both to tests/fixtures/).

Exits 1 when a check fails. ``trimmed`` shows how many records CUPTI delivered from outside the
windows (turning collection on and off is not instantaneous).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback
from collections import Counter
from typing import Any, Callable, Iterator

import gpuscope
from capture_truth import (
    StepKernels,
    check_steps,
    dump_facts,
    kernel_names,
    kernels_outside_windows,
    step_kernels,
    to_facts,
    windows,
)
from gpuscope.analysis.ops.attribution import ops_table

HERE = os.path.dirname(os.path.abspath(__file__))
WL = os.path.join(HERE, "workloads")
WORKLOAD = os.path.join(WL, "capture_steps.py")
STEPS = 30
FIRST, LAST = 10, 20
FIXTURE = "capture_steps"
FIXTURE_LIMIT = 1_500_000  # bytes gzipped; a larger fixture is too big to commit


def _gs(*args: str) -> None:
    # the program's output goes to stderr: stdout carries only the JSON result
    subprocess.run([sys.executable, "-m", "gpuscope", "profile", "--force-overwrite", *args], check=True,
                   timeout=300, stdout=sys.stderr)


def _gzip(src: str, dst: str) -> int:
    """Write ``src`` gzipped to ``dst`` (no name or time inside: the same report gives the same bytes);
    return its size."""
    with open(src, "rb") as fin, open(dst, "wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
        shutil.copyfileobj(fin, gz)
    return os.path.getsize(dst)


def _compare(path: str, expected: Counter[str], truth: StepKernels | None) -> dict[str, Any]:
    """The numbers of a captured report against the kernels it should hold (``truth``: the full
    run of the same program, for kernels per step)."""
    with gpuscope.load(path) as r:
        seen = step_kernels(r)
        names = kernel_names(r)
        out: dict[str, Any] = {"steps_seen": sorted(seen.counts)}
        if truth is not None:
            out["kernels_per_step"] = {s: [n, truth.counts.get(s)] for s, n in sorted(seen.counts.items())}
        out |= {"names_equal": names == expected, "kernels": sum(names.values()),
                "expected_kernels": sum(expected.values()), "outside_windows": kernels_outside_windows(r),
                **windows(r), "diagnostics": [m for (m,) in r.sql("SELECT DISTINCT message FROM diagnostic")]}
    return out


class Parts:
    """The parts of the check, each writing its reports to ``work``."""

    def __init__(self, work: str, out: str, layers: int) -> None:
        self.work, self.out = work, out
        self.args = ["--layers", str(layers)]  # the same for every run of the workload
        self.truth = StepKernels({}, {})

    def report(self, name: str) -> str:
        return os.path.join(self.work, name)

    def full(self) -> dict[str, Any]:
        _gs("-o", self.report("full"), WORKLOAD, "--steps", str(STEPS), *self.args)
        with gpuscope.load(self.report("full.gpuscope")) as r:
            self.truth = step_kernels(r)
            devices = sorted({n for (n,) in r.sql("SELECT DISTINCT name FROM device")})
        facts = to_facts(self.truth, workload=" ".join(["capture_steps.py", "--steps", str(STEPS), *self.args]),
                         capture=f"--steps {FIRST}-{LAST}", devices=devices)
        with open(os.path.join(self.out, f"{FIXTURE}.facts.json"), "w") as fh:
            fh.write(dump_facts(facts))
        return {"ok": sorted(self.truth.counts) == list(range(1, STEPS + 1)), "steps": len(self.truth.counts),
                "kernels_per_step": self.truth.counts, "devices": devices}

    def steps(self) -> dict[str, Any]:
        _gs("-o", self.report("steps"), "--steps", f"{FIRST}-{LAST}", WORKLOAD, "--steps", str(STEPS), *self.args)
        with gpuscope.load(self.report("steps.gpuscope")) as r:
            result = check_steps(r, self.truth, FIRST, LAST)
            result["diagnostics"] = [m for (m,) in r.sql("SELECT DISTINCT message FROM diagnostic")]
        size = _gzip(self.report("steps.gpuscope"), os.path.join(self.out, f"{FIXTURE}.gpuscope.gz"))
        result["fixture_bytes"] = size
        if size > FIXTURE_LIMIT:
            result["fixture_note"] = f"over {FIXTURE_LIMIT} bytes: rerun with fewer --layers before committing it"
        return result

    def profiler_api(self) -> dict[str, Any]:
        _gs("-o", self.report("profiler_api"), "--capture-range=cudaProfilerApi", WORKLOAD, "--steps", str(STEPS),
            *self.args, "--profiler-start", "12", "--profiler-stop", "16")
        result = _compare(self.report("profiler_api.gpuscope"), self.truth.names_in(12, 16), self.truth)
        result["ok"] = (result["names_equal"] and result["windows"] == 1 and not result["outside_windows"]
                        and result["reasons"] == ["cudaProfilerStart to cudaProfilerStop"])
        return result

    def nvtx(self) -> dict[str, Any]:
        mlp = os.path.join(WL, "mlp.py")
        run = [mlp, "--steps", "10", "--warmup", "0", "--nvtx"]
        _gs("-o", self.report("nvtx_full"), *run)
        _gs("-o", self.report("nvtx"), "--capture-range=nvtx", "--nvtx-capture", "backward", *run)
        with gpuscope.load(self.report("nvtx_full.gpuscope")) as r:
            expected = Counter(n for (n,) in r.sql(
                f"""SELECT s.value FROM {ops_table(r)} o JOIN string s ON s.id = o.name_id
                    WHERE o.kind = 'kernel' AND EXISTS (
                        SELECT 1 FROM nvtx_range g JOIN string n ON n.id = g.name_id
                        WHERE n.value = 'backward' AND g.source = 'nvtx' AND g.pid = o.pid
                          AND o.launch_ns BETWEEN g.start_ns AND g.end_ns)"""))
        result = _compare(self.report("nvtx.gpuscope"), expected, None)
        with gpuscope.load(self.report("nvtx.gpuscope")) as r:
            cupti_ranges = Counter(n for (n,) in r.sql(
                "SELECT s.value FROM nvtx_range g JOIN string s ON s.id = g.name_id WHERE g.source = 'nvtx'"))
        result["cupti_ranges"] = dict(cupti_ranges)
        result["ok"] = (result["names_equal"] and cupti_ranges.get("backward") == 10 and result["windows"] == 10
                        and not result["outside_windows"])
        return result

    def inprocess(self) -> dict[str, Any]:
        env = dict(os.environ)
        env.pop("GPUSCOPE_SPOOL", None)
        path = self.report("inprocess.gpuscope")
        subprocess.run([sys.executable, WORKLOAD, "--steps", "15", *self.args, "--inprocess", path,
                        "--inprocess-steps", "5-9"], check=True, timeout=300, env=env, stdout=sys.stderr)
        result = _compare(path, self.truth.names_in(5, 9), None)  # step numbers start at the block
        with gpuscope.load(path) as r:
            in_process = r.meta.get("in_process")
            step_marks = r.count("nvtx_range WHERE kind = 'mark' AND category = 'step'")
        result |= {"in_process": in_process, "step_marks": step_marks}
        result["ok"] = (result["names_equal"] and in_process is True and step_marks == 5
                        and not result["outside_windows"])
        return result


def _run(name: str, part: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run one part; a part that raises fails with its error, and the others still run."""
    try:
        return part()
    except Exception as exc:  # recorded in the result, and the traceback printed to stderr
        traceback.print_exc()
        return {"ok": False, "error": f"{name}: {type(exc).__name__}: {exc}"}


@contextlib.contextmanager
def _work_dir(path: str | None) -> Iterator[str]:
    """The folder for the reports: ``path`` (kept), or a temporary one removed at the end."""
    if path:
        os.makedirs(path, exist_ok=True)
        yield path
    else:
        with tempfile.TemporaryDirectory(prefix="gpuscope-capture-") as d:
            yield d


def _dumps(doc: dict[str, Any]) -> str:
    """JSON with one line per top-level key: short enough to print whole."""
    lines = [f"{json.dumps(k)}: {json.dumps(v, default=str)}" for k, v in doc.items()]
    return "{\n " + ",\n ".join(lines) + "\n}\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="/tmp/gpuscope-device/capture",
                   help="where check_capture.json and the fixture go (small files only)")
    p.add_argument("--work", help="where the reports go and stay (default: a temporary folder, removed)")
    p.add_argument("--layers", type=int, default=8, help="Linear+ReLU layers of the workload, in every run")
    args = p.parse_args()
    out = os.path.abspath(args.out)
    if args.work and os.path.abspath(args.work).startswith(out + os.sep):
        p.error(f"--work {args.work} lies under --out {args.out}: keep the reports out of the results folder")
    os.makedirs(out, exist_ok=True)
    results: dict[str, Any] = {}
    with _work_dir(args.work) as work:
        parts = Parts(work, out, args.layers)
        results["full"] = _run("full", parts.full)
        if results["full"].get("error"):
            results["error"] = "the full run failed: the other parts need its truth"
        else:
            for name in ("steps", "profiler_api", "nvtx", "inprocess"):
                results[name] = _run(name, getattr(parts, name))
    ok = all(v.get("ok", False) for v in results.values() if isinstance(v, dict)) and "error" not in results
    text = _dumps({"check": "capture", "ok": ok, "layers": args.layers, **results})
    with open(os.path.join(out, "check_capture.json"), "w") as fh:
        fh.write(text)
    sys.stdout.write(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
