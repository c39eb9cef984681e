"""Import speed and memory of ``gpuscope import`` on PyTorch profiler traces, small and large.

Traces: the largest shared sample trace (``--shared``, read where it is), and a synthetic trace of
``--size-gb`` gigabytes: the recorded GPT trace (tests/fixtures/gpt_eager.torch_trace.json.gz, 25,087
events) repeated, each copy shifted in time and in correlation and external ids, its 62 events
without a category (process and thread names) written once at the end as Kineto writes them, in
Kineto's own layout (one event a paragraph), plain and, with ``--gzip``, gzip (level 6). Each repeat imports
each input in a fresh process (``python -m gpuscope import``), the inputs interleaved; ``--reference``
adds the event-by-event import (``GPUSCOPE_IMPORT_BULK=0``) of each input once. Measured: wall time,
CPU time of the importing process and its workers together (``getrusage``), and the peak of their
summed resident memory (sampled every 20 ms with psutil), and the load average of the machine after
each import. ``--compare SRC`` adds, interleaved, the import of the gpuscope package under ``SRC``
(another version's ``src``, e.g. ``git archive`` of an older commit), so that both are measured under
the same load. The synthetic trace is deleted at the end.

    PYTHONPATH=src python bench/import_bench.py --size-gb 2 --repeats 3 --gzip --reference
    PYTHONPATH=src python bench/import_bench.py --size-gb 0.2 --size-gb 2 --repeats 5 --compare /tmp/old/src
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "gpt_eager.torch_trace.json.gz"
SHARED = ROOT.parent / "shared" / "traces" / "kineto"


def _kineto_text(ev: dict) -> str:
    """One event as Kineto writes it: a paragraph, args on lines of their own."""
    head = ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in ev.items() if k != "args")
    if "args" not in ev:
        return "  {\n    " + head + "\n  }"
    args = ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in ev["args"].items())
    return "  {\n    " + head + ",\n    \"args\": {\n      " + args + "\n    }\n  }"


def make_trace(out: Path, size_bytes: int) -> int:
    """Write the synthetic trace (about ``size_bytes``); return its number of events."""
    with gzip.open(FIXTURE, "rt") as fh:
        doc = json.load(fh)
    events = doc.pop("traceEvents")
    ts = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(ts) - min(ts) + 1000.0
    # each event as a %-template: its time and ids are filled in per copy
    templates = []
    for ev in events:
        e = json.loads(json.dumps(ev))
        values = []
        if isinstance(e.get("ts"), (int, float)):
            values.append(("ts", e["ts"]))
            e["ts"] = "\x00TS\x00"
        for key in ("correlation", "External id"):
            if isinstance((e.get("args") or {}).get(key), int):
                values.append(("id", e["args"][key]))
                e["args"][key] = f"\x00ID{key}\x00"
        text = _kineto_text(e).replace("%", "%%")
        text = text.replace('"\\u0000TS\\u0000"', "%.3f")
        for key in ("correlation", "External id"):
            text = text.replace(f'"\\u0000ID{key}\\u0000"', "%d")
        templates.append((text, values))
    # events without a category (process and thread names, Kineto's own instants): once, at the
    # end of traceEvents, where Kineto writes them
    tail = [t for t, ev in zip(templates, events) if "cat" not in ev]
    templates = [t for t, ev in zip(templates, events) if "cat" in ev]
    n = 0
    with open(out, "w") as fh:
        fh.write("{\n" + ",\n".join(f'  "{k}": {json.dumps(v)}' for k, v in doc.items()) + ',\n  "traceEvents": [\n')
        copy = 0
        while fh.tell() < size_bytes:
            shift, ids = copy * span, copy * 10_000_000
            parts = []
            for text, values in templates:
                parts.append(text % tuple(v + shift if k == "ts" else v + ids for k, v in values))
            fh.write(("" if copy == 0 else ",\n") + ",\n".join(parts))
            n += len(templates)
            copy += 1
        fh.write(",\n" + ",\n".join(text % tuple(v for _, v in values) for text, values in tail))
        n += len(tail)
        fh.write("\n  ]\n}\n")
    return n


def count_events(path: Path) -> int:
    """The number of events of a shared trace (read whole with the standard library)."""
    with gzip.open(path, "rt") if path.suffix == ".gz" else open(path) as fh:
        return len(json.load(fh)["traceEvents"])


Run = tuple[float, float, float, float]  # wall s, CPU s, peak RSS MiB, load average after


def import_once(trace: Path, out: Path, env_extra: dict[str, str], src: str | None = None) -> Run:
    """Import ``trace`` in a fresh process (with the gpuscope package under ``src`` where given);
    return (wall s, CPU s of it and its workers, peak summed RSS MiB, 1-minute load average after)."""
    out.unlink(missing_ok=True)
    env = dict(os.environ, **env_extra)
    if src is not None:
        env["PYTHONPATH"] = src
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "gpuscope", "import", str(trace), "-o", str(out)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        try:
            p = psutil.Process(proc.pid)
        except psutil.Error:
            return
        while not stop.is_set():
            try:
                total = p.memory_info().rss + sum(c.memory_info().rss for c in p.children(recursive=True))
                peak[0] = max(peak[0], total)
            except psutil.Error:
                pass
            stop.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = proc.communicate()
    wall = time.perf_counter() - t
    stop.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"import of {trace} failed: {err.decode()[-400:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return wall, cpu, peak[0] / 2**20, os.getloadavg()[0]


def _summary(events: int, runs: list[Run]) -> str:
    walls = [r[0] for r in runs]
    cpus = [r[1] for r in runs]
    rss = [r[2] for r in runs]
    loads = [r[3] for r in runs]
    rate = [events / w for w in walls]
    per_cpu = [events / c for c in cpus]
    return (f"{statistics.median(walls):.1f} s ({min(walls):.1f} / {max(walls):.1f}) | "
            f"{statistics.median(rate) / 1e6:.2f} M ({min(rate) / 1e6:.2f} / {max(rate) / 1e6:.2f}) | "
            f"{statistics.median(cpus):.1f} s ({min(cpus):.1f} / {max(cpus):.1f}) | "
            f"{statistics.median(per_cpu) / 1e6:.2f} M ({min(per_cpu) / 1e6:.2f} / {max(per_cpu) / 1e6:.2f}) | "
            f"{statistics.median(rss):.0f} MiB (max {max(rss):.0f}) | {min(loads):.1f}-{max(loads):.1f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size-gb", type=float, action="append", help="synthetic trace size (repeatable; default 2)")
    p.add_argument("--compare", default=None, help="also import with the gpuscope package under this folder")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--gzip", action="store_true", help="also import the gzip of the synthetic trace")
    p.add_argument("--reference", action="store_true", help="also the event-by-event import, once per input")
    p.add_argument("--dir", default=None, help="scratch folder (default: a temporary one)")
    args = p.parse_args()
    scratch = Path(args.dir or tempfile.mkdtemp(prefix="gpuscope-import-bench-"))
    scratch.mkdir(parents=True, exist_ok=True)
    inputs: dict[str, tuple[Path, int]] = {}
    shared = sorted(SHARED.glob("*.json.gz"), key=lambda f: f.stat().st_size) if SHARED.is_dir() else []
    if shared:
        inputs[f"shared {shared[-1].name}"] = (shared[-1], count_events(shared[-1]))
    made: list[Path] = []
    try:
        t = time.perf_counter()
        for size in args.size_gb or [2.0]:
            trace = scratch / f"synthetic-{size:g}.json"
            made.append(trace)
            events = make_trace(trace, int(size * 1e9))
            inputs[f"synthetic {trace.stat().st_size / 1e9:.2f} GB JSON"] = (trace, events)
            if args.gzip:
                gz = scratch / f"synthetic-{size:g}.json.gz"
                made.append(gz)
                with open(gz, "wb") as dst:
                    subprocess.run(["gzip", "-6", "-c", str(trace)], stdout=dst, check=True)
                inputs[f"same, {gz.stat().st_size / 1e6:.0f} MB gzip"] = (gz, events)
        print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
              f"{psutil.virtual_memory().total / 2**30:.1f} GiB; load average {os.getloadavg()[0]:.1f} at the start; "
              f"Python {platform.python_version()}; {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC")
        print(f"synthetic traces written in {time.perf_counter() - t:.0f} s")
        results: dict[str, list[Run]] = {k: [] for k in inputs}
        compared: dict[str, list[Run]] = {k: [] for k in inputs}
        reference: dict[str, list[Run]] = {k: [] for k in inputs}
        out = scratch / "out.gpuscope"
        for r in range(args.repeats):
            for name, (path, _) in inputs.items():  # interleaved
                results[name].append(import_once(path, out, {}))
                if args.compare:
                    compared[name].append(import_once(path, out, {}, args.compare))
                if args.reference and r == 0:
                    reference[name].append(import_once(path, out, {"GPUSCOPE_IMPORT_BULK": "0"}))
        print("| trace | events | wall median (min / max) | events/s (wall) | CPU, import + workers "
              "| events per CPU-second | peak RSS, import + workers | load average |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for name, (_, n) in inputs.items():
            print(f"| {name} | {n:,} | {_summary(n, results[name])} |")
            if compared[name]:
                print(f"| {name}, {args.compare} | {n:,} | {_summary(n, compared[name])} |")
            if reference[name]:
                print(f"| {name}, event by event | {n:,} | {_summary(n, reference[name])} |")
        print(f"load average {os.getloadavg()[0]:.1f} at the end")
    finally:
        if not args.dir:
            shutil.rmtree(scratch, ignore_errors=True)
        else:
            for f in [*made, scratch / "out.gpuscope"]:
                f.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
