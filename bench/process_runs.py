"""Commands timed as fresh processes, and the facts about the machine to record with the times.

Each run of a command is a separate process started from a small runner process; its wall time
is taken around the process and its peak RSS and CPU time from ``wait4``'s resource usage of that
one child.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import duckdb
import numpy as np
import pandas as pd

import gpuscope

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Run:
    wall_s: float
    max_rss_mb: float
    user_s: float
    sys_s: float


@dataclass
class Series:
    """Repeated runs of one command line, and the cold-cache run if there was one."""

    label: str
    argv: list[str]
    runs: list[Run]
    cold: Run | None = None

    def stat(self, key: str) -> dict[str, float]:
        values = [getattr(r, key) for r in self.runs]
        return {"min": min(values), "median": statistics.median(values), "max": max(values)}


# Runs the command as its child and reports the child's wall time and rusage. A separate small
# process is needed: a child forked (or vforked) straight from this big benchmark process would
# carry this process's memory high-water mark into its own ru_maxrss.
RUNNER_SNIPPET = r"""
import json, resource, subprocess, sys, time
t0 = time.perf_counter()
rc = subprocess.call(sys.argv[2:])
wall = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(sys.argv[1], "w") as fh:
    json.dump({"rc": rc, "wall_s": wall, "max_rss_kb": ru.ru_maxrss, "user_s": ru.ru_utime,
               "sys_s": ru.ru_stime}, fh)
"""


def child_env(pycache_prefix: str | None) -> dict[str, str]:
    """Environment of the measured commands.

    With a prefix, Python's bytecode cache is on, as in a normal install, but kept outside the
    repository: with PYTHONDONTWRITEBYTECODE set and no __pycache__ in the editable source tree,
    every run would otherwise recompile gpuscope's modules.
    """
    env = dict(os.environ)
    if pycache_prefix:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = pycache_prefix
    return env


def run_once(argv: Sequence[str], env: dict[str, str], capture: bool = False) -> tuple[Run, bytes]:
    """Run ``argv`` once from a fresh small Python process; wall time, peak RSS and CPU time.

    stdout goes to /dev/null unless ``capture``; a failing command raises with its stderr.
    """
    with tempfile.NamedTemporaryFile(prefix="stats_bench_run_", suffix=".json") as res:
        proc = subprocess.run(
            [sys.executable, "-c", RUNNER_SNIPPET, res.name, *argv],
            stdout=subprocess.PIPE if capture else subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
        )
        info = json.loads(Path(res.name).read_text() or "{}")
    if proc.returncode != 0 or info.get("rc") != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {proc.stderr.decode(errors='replace')[-2000:]}")
    return Run(info["wall_s"], info["max_rss_kb"] / 1024.0, info["user_s"], info["sys_s"]), proc.stdout or b""


def evict_from_page_cache(path: Path) -> None:
    """Drop the file's pages from the page cache (no root needed for clean pages)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def measure(label: str, argv: list[str], env: dict[str, str], repeats: int, cold: Path | None) -> Series:
    """A warm-up run, ``repeats`` measured runs, then one with ``cold`` out of the page cache."""
    run_once(argv, env)  # page cache and .pyc files as a user's second run finds them
    series = Series(label, argv, [run_once(argv, env)[0] for _ in range(repeats)])
    if cold:
        evict_from_page_cache(cold)
        series.cold = run_once(argv, env)[0]
    return series


def _proc_value(path: str, key: str) -> str | None:
    """The value after ``key:`` in a /proc file; None where there is none."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return None
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith(key)), None)


def machine() -> dict[str, Any]:
    memory_kb = (_proc_value("/proc/meminfo", "MemTotal") or "0 kB").split()[0]
    return {
        "cpu": _proc_value("/proc/cpuinfo", "model name") or platform.processor() or "unknown",
        "cores": os.cpu_count(), "memory_gb": int(memory_kb) / 1024**2,
        "date": _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        "host": socket.gethostname(), "kernel": platform.release(), "python": platform.python_version(),
        "duckdb": duckdb.__version__, "numpy": np.__version__, "pandas": pd.__version__,
        "gpuscope": gpuscope.__version__,
    }  # fmt: skip


def source_state() -> str:
    """The gpuscope source measured: commit, and whether src/ has uncommitted changes."""
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%h %s"], check=True,
                              capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "src"],
                               check=True, capture_output=True, text=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return f"commit {head}" + (f", plus uncommitted changes to {len(dirty)} files in src/" if dirty else ", src/ clean")


def load_average() -> str:
    """The 1/5/15-minute load averages: other work on the machine skews wall times."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"
