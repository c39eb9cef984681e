"""One run of ``gpuscope try``: the program under the launcher's bootstrap, collection off, step marks
kept, a fix's switches on, stopped at the step or time budget.

The program runs with the argv, working directory and environment it was profiled with; its output
goes to files in a directory of gpuscope's own (never into the program's), and the run's results come
back as the JSON that :mod:`..capture.trial` writes. The agent runs with a capture range that never opens
(``api``) and no probe: nothing is recorded, and its spool is removed after the run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..capture.capture_range import CAPTURE_ENV, CaptureSpec
from ..capture.process import launch as launcher
from ..capture.process.launcher_watch import LAUNCHER_ENV
from ..errors import GpuscopeError
from .fixes import Fix
from ..capture.trial import TRY_ENV

TRACE = ["torch"]  # what makes step marks: PyTorch's optimizer steps and outermost module calls
ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"
KILL_WAIT_S = 5.0


@dataclass(frozen=True)
class Program:
    """How the program ran when it was profiled."""

    argv: list[str]
    cwd: str
    env: dict[str, str]  # the whole environment of the runs


@dataclass(frozen=True)
class Budget:
    """Where each run is stopped: at this many step marks, or at the first mark past this time."""

    steps: int
    time_s: float

    @property
    def hard_limit_s(self) -> float:
        """When gpuscope ends a run that no step mark ended (start-up and compilation come first)."""
        return self.time_s + max(60.0, self.time_s)


@dataclass
class Outcome:
    """What one run did."""

    variant: str
    round: int
    exit_code: int
    wall_s: float
    steps_ns: list[int] = field(default_factory=list)  # mark-to-mark step times
    source: str = ""  # what marked the steps: gpuscope, torch (optimizer) or module (outermost calls)
    stopped: str | None = None  # "steps", "time", "killed", or None (the program ended by itself)
    error: str | None = None  # the last line the program wrote to stderr, when it failed
    results: dict[str, Any] = field(default_factory=dict)  # inprocess.py's JSON

    @property
    def failed(self) -> bool:
        """Whether the program failed (an exit code other than 0, a signal, or gpuscope stopped it)."""
        return self.exit_code != 0 or self.stopped == "killed"

    @property
    def ending(self) -> str:
        """How the run ended, in words: "exited with code 1", "was killed by SIGSEGV", "stopped by gpuscope"."""
        if self.stopped == "killed":
            return "stopped by gpuscope"
        return launcher.ExitStatus(self.exit_code).describe()


def environment(program: Program, spool: Path, fixes: list[Fix], settings: dict[str, Any]) -> dict[str, str]:
    """The environment of one run: the program's, the bootstrap's, collection off, the fixes' variables."""
    boot = launcher.prepare_bootstrap(spool)
    env = dict(program.env)
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(boot) + (os.pathsep + old if old else "")
    env.update({k: v for k, v in launcher.child_environment(spool, boot, TRACE).items() if k.startswith("GPUSCOPE_")})
    env.pop(LAUNCHER_ENV, None)  # no launcher reads this spool: the agent must not wait for one
    env[CAPTURE_ENV] = CaptureSpec(range="api", probe=False).to_env()
    for fix in fixes:
        for key, value in fix.env.items():
            if key == ALLOC_CONF and env.get(key):
                env[key] = f"{env[key]},{value}"
            else:
                env[key] = value
    env[TRY_ENV] = json.dumps(settings)
    return env


def run(program: Program, variant: str, round_: int, fixes: list[Fix], settings: list[dict[str, Any]],
        budget: Budget, workdir: Path, losses: int = 5, warmup: int = 0) -> Outcome:
    """Run the program once with ``fixes`` (none: as written); return what it did. After ``warmup``
    steps the program waits for the device once, and again at the end of the run, so that the timed
    window holds the device's work of its steps (see :func:`window_step`)."""
    tag = f"{variant}-{round_}"
    spool = workdir / f"spool-{tag}"
    spool.mkdir()
    out = workdir / f"{tag}.json"
    env = environment(program, spool, fixes, {"patches": settings, "steps": budget.steps,
                                              "time_budget_s": budget.time_s, "losses": losses, "out": str(out),
                                              "warmup": warmup})
    began = time.monotonic()
    stopped = None
    with open(workdir / f"{tag}.stdout", "wb") as so, open(workdir / f"{tag}.stderr", "wb") as se:
        try:
            child = subprocess.Popen(program.argv, cwd=program.cwd, env=env, stdin=subprocess.DEVNULL,
                                     stdout=so, stderr=se, start_new_session=True)
        except OSError as exc:
            raise GpuscopeError(f"{program.argv[0]}: cannot start: {exc.strerror or exc}") from None
        try:
            code = child.wait(timeout=budget.hard_limit_s)
        except subprocess.TimeoutExpired:
            stopped = "killed"
            code = _end(child)
        except BaseException:
            _end(child)
            raise
    wall = time.monotonic() - began
    shutil.rmtree(spool, ignore_errors=True)
    results = _read(out)
    outcome = Outcome(variant, round_, code, wall, results=results, stopped=stopped or results.get("stopped"))
    outcome.source, outcome.steps_ns = step_times(results.get("marks") or {})
    if outcome.failed:
        outcome.error = (f"stopped by gpuscope after {budget.hard_limit_s:g} s: no step mark came past the time "
                         "budget" if stopped == "killed" else last_line(workdir / f"{tag}.stderr")
                         or _exit_words(code))
    return outcome


def window_step(results: dict[str, Any]) -> float | None:
    """The mean step over the timed window, device work included: from the wait for the device after
    the warm-up steps to the wait at the end of the run, over the steps between (None where the run
    kept no window). Mark-to-mark times are the host's: a program that never waits for the device
    queues its steps ahead of it, and those times are the launch time, not the step's."""
    w = results.get("window")
    try:
        steps = int(w["steps"])
        return (int(w["end_ns"]) - int(w["start_ns"])) / steps if steps > 0 else None
    except (TypeError, KeyError, ValueError):
        return None


def step_times(marks: dict[str, list[int]]) -> tuple[str, list[int]]:
    """The steps of the best source of marks (gpuscope's, then the optimizer's, then module calls),
    timed mark to mark."""
    rank = {"module": 0, "torch": 1, "gpuscope": 2}
    if not marks:
        return "", []
    source = max(marks, key=lambda s: rank.get(s, -1))
    t = sorted(int(x) for x in marks[source])
    return source, [b - a for a, b in zip(t, t[1:])]


def last_line(path: Path) -> str | None:
    """The last line of a file that is not blank (a traceback's error line)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 8192))
            lines = fh.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if line.strip():
            return line.strip()[:300]
    return None


def _exit_words(code: int) -> str:
    return launcher.ExitStatus(code).describe().replace("was", "the program was").replace("exited", "the program exited")


def _read(path: Path) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _end(child: subprocess.Popen[bytes]) -> int:
    """End the run's process group: SIGTERM, then SIGKILL; return its exit code."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(child.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            return child.wait(timeout=KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            continue
    return child.wait()
