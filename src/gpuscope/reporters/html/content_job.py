"""The analyses' sections of the viewer's page (run, findings, roofline, tables), computed once
per report and kept beside it (:mod:`...trace.sidecar`, file ``content.json``).

A report with more timeline slices than the viewer's cap is analysed in a process of its own at a
lower priority: the analyses of ten million kernels take minutes and gigabytes, which that process
gives back when it ends, while the viewer's server stays small and its timeline answers at once.
The same process finds the steps that the index leaves unmarked above ``STEP_LIMIT``.

    python -m gpuscope.reporters.html.content_job REPORT ORIGIN_NS PARENT_PID   (prints the sections as JSON)

The process ends as soon as its parent (the viewer's server) has gone, however that ended: it
checks every second that the parent is still the one that started it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ...trace import sidecar

NAME = "content.json"
VERSION = 1


def compute(report_path: Path, origin: int, with_steps: bool) -> dict[str, Any]:
    """Return the page's sections of the report at ``report_path`` (spans in ns from ``origin``),
    with its steps as timeline rows (``{"pid", "step", "start", "end"}``) when ``with_steps``."""
    from ...trace.report import Report
    from . import sections

    with Report.open(report_path) as report:
        content = sections(report, origin)
        if with_steps:
            from ...analysis.steps.source import step_windows

            content["steps"] = [{"pid": int(r.pid), "step": int(r.step), "start": int(r.start_ns) - origin,
                                 "end": int(r.end_ns) - origin} for r in step_windows(report).itertuples(index=False)]
    return content


def in_child(report_path: Path, origin: int) -> dict[str, Any]:
    """Return :func:`compute` (with the steps) run in a child process at a lower priority; raise
    RuntimeError with the child's last line when it fails."""
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.run([sys.executable, "-m", __name__, str(report_path), str(origin), str(os.getpid())],
                          capture_output=True,
                          env=env, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        lines = proc.stderr.decode(errors="replace").strip().splitlines()
        raise RuntimeError(lines[-1] if lines else f"exit status {proc.returncode}")
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def cached(report_path: Path) -> dict[str, Any] | None:
    """Return the sections kept beside the report while they match it, else None."""
    mapped = sidecar.read(report_path, NAME)
    if mapped is None:
        return None
    try:
        data = json.loads(bytes(mapped.buffer()))
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("version") != VERSION or data.get("key") != sidecar.report_key(report_path):
        return None
    content = data.get("content")
    return content if isinstance(content, dict) else None


def keep(report_path: Path, key: dict[str, int], content: dict[str, Any]) -> Path | None:
    """Write the sections beside the report (made from it when its key was ``key``); return where."""
    text = json.dumps({"version": VERSION, "key": key, "content": content}, separators=(",", ":"), default=str)
    return sidecar.write(report_path, NAME, [text.encode()])


ORPHANED = 3  # the exit status when the parent had gone


def _watch(parent: int) -> None:
    """End this process (status ORPHANED) once its parent is no longer ``parent``."""
    while True:
        if os.getppid() != parent:
            os._exit(ORPHANED)
        time.sleep(1.0)


def main(argv: list[str]) -> int:
    """Print the sections (with steps) of the report ``argv[0]`` as JSON, times from ``argv[1]``,
    while the process ``argv[2]`` is the parent; return the exit status (2 with a one-line
    message for a damaged report, ORPHANED when the parent had gone)."""
    from ...errors import GpuscopeError

    if os.getppid() != int(argv[2]):
        return ORPHANED
    threading.Thread(target=_watch, args=(int(argv[2]),), daemon=True).start()
    if hasattr(os, "nice"):
        os.nice(10)  # below the viewer's server, which answers the page meanwhile
    try:
        content = compute(Path(argv[0]), int(argv[1]), with_steps=True)
    except GpuscopeError as exc:
        print(f"gpuscope: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(json.dumps(content, separators=(",", ":"), default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
