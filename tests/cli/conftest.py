"""Helpers for running the ``gpuscope`` command as a user does: a subprocess in a scratch directory."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

import pytest

import gpuscope

# Variables of a gpuscope session; the test process must not hand its own (if any) to the command.
_SESSION_VARS = ("GPUSCOPE_SPOOL", "GPUSCOPE_TRACE", "PYTHONPATH")
# Longest wait for anything in these tests; a correct run takes a few seconds at most.
TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Result:
    """How one ``gpuscope`` command ended and what it printed."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def stderr_lines(self) -> list[str]:
        return self.stderr.splitlines()

    @property
    def own_lines(self) -> list[str]:
        """gpuscope's own lines on stderr (they start with ``gpuscope:``)."""
        return [line for line in self.stderr_lines if line.startswith("gpuscope:")]

    @property
    def errors(self) -> list[str]:
        """The ``gpuscope: error: ...`` lines."""
        return [line for line in self.stderr_lines if line.startswith("gpuscope: error:")]

    def lines_mentioning(self, text: str) -> list[str]:
        return [line for line in self.stderr_lines if text in line]

    def describe(self) -> str:
        """Everything about the run, for assertion messages."""
        return (f"gpuscope {' '.join(self.args)}\nexit {self.returncode}\n"
                f"--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}")


def base_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a gpuscope command: this one, with this venv's ``python`` first on PATH."""
    env = {k: v for k, v in os.environ.items() if k not in _SESSION_VARS}
    # the gpuscope these tests imported (a checkout's src/ ahead of an installed copy elsewhere)
    env["PYTHONPATH"] = str(Path(gpuscope.__file__).resolve().parents[1])
    bindir = os.path.dirname(sys.executable)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env.update(extra or {})
    return env


class Gpuscope:
    """Runs ``python -m gpuscope ...`` with ``cwd`` as its working directory."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd

    def script(self, name: str, body: str) -> Path:
        """Write a target script (``body`` is dedented) into ``cwd`` and return its path."""
        path = self.cwd / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(body))
        return path

    def run(
        self,
        *args: str,
        stdin: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = TIMEOUT_S,
    ) -> Result:
        """Run gpuscope to its end and return what it printed."""
        proc = subprocess.run(
            [sys.executable, "-m", "gpuscope", *args],
            cwd=self.cwd,
            input=stdin if stdin is not None else "",
            capture_output=True,
            text=True,
            env=dict(env) if env is not None else base_env(),
            timeout=timeout,
        )
        return Result(tuple(args), proc.returncode, proc.stdout, proc.stderr)

    def start(self, *args: str, new_session: bool = False) -> subprocess.Popen[str]:
        """Start gpuscope without waiting; stdout and stderr are pipes."""
        return subprocess.Popen(
            [sys.executable, "-m", "gpuscope", *args],
            cwd=self.cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=base_env(),
            start_new_session=new_session,
            # A test run started in the background inherits an ignored SIGINT (and under nohup an
            # ignored SIGHUP), and so would the program: give gpuscope (and so the program) the
            # default dispositions a terminal gives.
            preexec_fn=_default_signals,
        )

    def profile(self, *args: str, **kw: Any) -> Result:
        """``gpuscope profile ARGS...``."""
        return self.run("profile", *args, **kw)


@pytest.fixture
def gs(tmp_path: Path) -> Gpuscope:
    """A gpuscope runner working in this test's own directory."""
    return Gpuscope(tmp_path)


def _default_signals() -> None:
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def wait_for_file(path: Path, proc: subprocess.Popen[str], timeout: float = TIMEOUT_S) -> None:
    """Wait until ``path`` exists; fail early, with the output, if ``proc`` ends first."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"gpuscope ended ({proc.returncode}) before {path.name} appeared:\n{out}\n{err}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"{path.name} did not appear within {timeout} s")
        time.sleep(0.02)


def finish(proc: subprocess.Popen[str], args: tuple[str, ...] = ()) -> Result:
    """Wait for a started gpuscope to end and return what it printed."""
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"gpuscope did not end within {TIMEOUT_S} s:\n{out}\n{err}")
    return Result(args, proc.returncode, out, err)


@dataclass(frozen=True)
class ReportFacts:
    """What the CLI tests look at in a report file."""

    meta: dict[str, Any]
    processes: list[dict[str, Any]]


def read_report(path: Path) -> ReportFacts:
    """Open ``path`` with the public API and return its meta and process rows."""
    with gpuscope.load(str(path)) as report:
        procs = report.processes().to_dict("records")
        return ReportFacts(dict(report.meta), procs)


def signal_name(code: int) -> str:
    """Name of the signal behind a shell-style exit code, for messages."""
    try:
        return signal.Signals(code - 128).name
    except ValueError:
        return "?"


@pytest.fixture(scope="module")
def real_report(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A small report written by a real ``gpuscope profile`` run (shared by a module's tests)."""
    d = tmp_path_factory.mktemp("real")
    g = Gpuscope(d)
    g.script("hello.py", "print('hello')\n")
    res = g.profile("hello.py")
    assert res.returncode == 0, res.describe()
    path = d / "report1.gpuscope"
    assert path.is_file(), res.describe()
    yield path


def chromium_path() -> str | None:
    """Return the Chromium to drive: $GPUSCOPE_CHROMIUM, else Debian's chromium on PATH."""
    for name in (os.environ.get("GPUSCOPE_CHROMIUM"), "chromium", "chromium-browser"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


# Here, once for the whole test run: two sync Playwright instances cannot run at the same time, and a fixture
# imported into two test modules would start one per module.
@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """A headless Chromium; skipped where there is none, unless GPUSCOPE_REQUIRE_BROWSER is set (CI)."""
    required = bool(os.environ.get("GPUSCOPE_REQUIRE_BROWSER"))
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if required:
            pytest.fail("playwright is not installed (pip install -e '.[test]')")
        pytest.skip("playwright is not installed")
    path = chromium_path()
    if path is None:
        if required:
            pytest.fail("no chromium on PATH (apt-get install chromium)")
        pytest.skip("no chromium on PATH")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()
