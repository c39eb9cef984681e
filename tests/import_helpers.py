"""Helpers of the import and diff tests: the shared sample traces, and gpuscope run as a user runs it."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import gpuscope

# Traces other tools wrote (not part of the project): tests read them in place and skip without them.
SHARED_TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
if not SHARED_TRACES.is_dir():
    SHARED_TRACES = Path(os.environ.get("GPUSCOPE_SHARED_TRACES", "/nonexistent"))


def shared(name: str) -> Path:
    """Return the path of the shared sample trace ``name`` (``kineto/...``), or skip the test."""
    path = SHARED_TRACES / name
    if not path.exists():
        pytest.skip(f"shared sample trace {name} is not here")
    return path


def load_json(path: Path) -> Any:
    """The whole JSON document at ``path`` (gzip or plain), read with the standard library."""
    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    with (gzip.open(path, "rt") if gz else open(path)) as fh:
        return json.load(fh)


@dataclass(frozen=True)
class Run:
    """How one gpuscope command ended."""

    returncode: int
    stdout: str
    stderr: str


def gpuscope_cli(*args: str, cwd: Path, timeout: float = 120) -> Run:
    """Run ``python -m gpuscope ARGS`` in ``cwd`` with this test's gpuscope package."""
    env = dict(os.environ)
    src = str(Path(gpuscope.__file__).resolve().parents[1])
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.run([sys.executable, "-m", "gpuscope", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=timeout, stdin=subprocess.DEVNULL)
    return Run(proc.returncode, proc.stdout, proc.stderr)
