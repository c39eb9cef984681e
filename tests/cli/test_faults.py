"""Fault injection: every way a profiled run can end, a full disk for the report and for the spool,
and a killed launcher. Each case checks the exit code the shell sees, that the report opens, and how
many of the steps the program printed the report kept, against the bounds docs/failures.md states:

- the program ends by itself (return, exception, sys.exit), or by SIGTERM, SIGHUP or SIGINT sent to
  it, to gpuscope or to the whole group, once or twice: nothing is lost;
- the program ends without running any Python (os._exit, SIGKILL): at most the last flush interval
  (0.5 s) of records is lost;
- gpuscope itself is killed (SIGKILL): the report opens with what was ingested (status ``recording``);
  the program runs on untraced, and its spool directory is removed;
- the report's disk fills: the program's exit code is kept, one error line, the report opens with
  what was stored before; the spool's disk fills: the lost records are counted in the report.

The program does 10 ms steps, each a range named ``step``, and prints ``step N`` after each.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

import gpuscope

from .conftest import Gpuscope, base_env, finish, wait_for_file

STEP_S = 0.010
FLUSH_BOUND_S = 0.6  # the agent's flush interval (0.5 s) and the step that was running
PROGRAM = """
import os, signal, sys, time
import gpuscope

mode, steps = sys.argv[1], int(sys.argv[2])
for i in range(steps):
    with gpuscope.annotate("step"):
        t = time.perf_counter()
        while time.perf_counter() - t < %(step)r:
            pass
    print(f"step {i}", flush=True)
    if i == 30:
        open("ready", "w").close()
    if i == 40:
        if mode == "exception":
            raise RuntimeError("boom")
        if mode == "exit":
            sys.exit(3)
        if mode == "os_exit":
            os._exit(4)
        if mode == "self_kill":
            os.kill(os.getpid(), signal.SIGKILL)
""" % {"step": STEP_S}


def _shell_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _printed(stdout: str) -> int:
    return sum(1 for line in stdout.splitlines() if line.startswith("step "))


def _recorded(path: Path) -> tuple[int, dict[str, object], bool]:
    """Steps in the report, its meta, and whether the process's end was recorded."""
    with gpuscope.load(str(path)) as report:
        steps = report.sql("""SELECT count(*) FROM nvtx_range r JOIN string s ON s.id = r.name_id
                              WHERE s.value = 'step' AND r.end_ns IS NOT NULL""")[0][0]
        ended = report.sql("SELECT count(*) FROM process WHERE end_ns IS NOT NULL")[0][0] > 0
        return int(steps), dict(report.meta), ended


@pytest.fixture
def prog(gs: Gpuscope) -> Gpuscope:
    gs.script("steps.py", PROGRAM)
    return gs


def _no_traceback_from_gpuscope(stderr: str) -> None:
    assert not re.search(r'File "[^"]*gpuscope/(capture|trace|cli|analysis|reporters)', stderr), stderr
    assert "duckdb" not in stderr.lower(), stderr


@pytest.mark.parametrize("mode, code", [("exception", 1), ("exit", 3), ("normal", 0)])
def test_program_ends_by_itself_nothing_lost(prog: Gpuscope, mode: str, code: int) -> None:
    res = prog.profile("--trace", "cpu", sys.executable, "steps.py", mode, "60")
    assert res.returncode == code, res.describe()
    steps, meta, ended = _recorded(prog.cwd / "report1.gpuscope")
    assert steps == _printed(res.stdout) and ended and meta["status"] == "complete", res.describe()
    _no_traceback_from_gpuscope(res.stderr)


@pytest.mark.parametrize("mode, code", [("os_exit", 4), ("self_kill", 137)])
def test_program_ends_without_python_loses_at_most_a_flush(prog: Gpuscope, mode: str, code: int) -> None:
    res = prog.profile("--trace", "cpu", sys.executable, "steps.py", mode, "60")
    assert res.returncode == code, res.describe()
    steps, meta, _ = _recorded(prog.cwd / "report1.gpuscope")
    printed = _printed(res.stdout)
    assert printed - FLUSH_BOUND_S / STEP_S <= steps <= printed and meta["status"] == "complete", res.describe()


# (whom, signals): the target alone, gpuscope alone, or the whole group (timeout, systemd, Slurm,
# Ctrl-C); doubled signals 5 ms apart, as a supervisor that repeats itself sends them.
SIGNALS = [
    ("group", [signal.SIGTERM]),
    ("group", [signal.SIGTERM, signal.SIGTERM]),
    ("launcher", [signal.SIGTERM]),
    ("target", [signal.SIGTERM]),
    ("group", [signal.SIGHUP]),
    ("launcher", [signal.SIGHUP]),
    ("group", [signal.SIGINT]),
    ("group", [signal.SIGINT, signal.SIGINT]),
    ("target", [signal.SIGINT]),
    ("target", [signal.SIGHUP]),
    ("launcher", [signal.SIGTERM, signal.SIGTERM]),
    ("group", [signal.SIGHUP, signal.SIGHUP]),
    ("group", [signal.SIGTERM, signal.SIGINT]),
]


def _target_pid(launcher: int) -> int:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(launcher)], capture_output=True, text=True)
    return int(out.stdout.split()[0])


@pytest.mark.parametrize("whom, signals", SIGNALS, ids=[f"{w}-{'+'.join(s.name for s in sigs)}" for w, sigs in SIGNALS])
def test_signals_lose_nothing(prog: Gpuscope, whom: str, signals: list[signal.Signals]) -> None:
    proc = prog.start("profile", "--trace", "cpu", sys.executable, "steps.py", "signal", "3000", new_session=True)
    wait_for_file(prog.cwd / "ready", proc)
    for i, sig in enumerate(signals):
        if i:
            time.sleep(0.005)
        if whom == "group":
            os.killpg(proc.pid, sig)
        elif whom == "launcher":
            os.kill(proc.pid, sig)
        else:
            os.kill(_target_pid(proc.pid), sig)
    res = finish(proc)
    assert _shell_code(res.returncode) == 128 + signals[0], res.describe()
    steps, meta, ended = _recorded(prog.cwd / "report1.gpuscope")
    printed = _printed(res.stdout)
    assert ended and meta["status"] == "complete" and meta["exit_signal"] == signals[0], res.describe()
    # a signal may land between a step's end and its print: one step either way
    assert printed - 1 <= steps <= printed + 1, f"{steps} steps recorded of {printed} printed\n{res.describe()}"
    _no_traceback_from_gpuscope(res.stderr)


def test_killed_launcher_keeps_what_was_ingested_and_the_program_stops_spooling(prog: Gpuscope) -> None:
    before = set(Path(os.environ.get("TMPDIR", "/tmp")).glob("gpuscope-spool-*"))
    proc = prog.start("profile", "--trace", "cpu", sys.executable, "steps.py", "signal", "500", new_session=True)
    wait_for_file(prog.cwd / "ready", proc)
    time.sleep(2.5)  # several flushes and ingests, even on a loaded machine; the program runs about 5 s
    spools = set(Path(os.environ.get("TMPDIR", "/tmp")).glob("gpuscope-spool-*")) - before
    os.kill(proc.pid, signal.SIGKILL)
    target_alive_for = time.monotonic()
    res = finish(proc)  # the program holds the pipes until it ends
    assert res.returncode == -signal.SIGKILL
    assert _printed(res.stdout) == 500, "the program was not left to run to its end"
    steps, meta, _ = _recorded(prog.cwd / "report1.gpuscope")
    assert meta["status"] == "recording" and 0 < steps < 500
    assert time.monotonic() - target_alive_for > 0.5
    for spool in spools:
        assert not spool.exists(), f"{spool} left behind"


# -- full disks (a small tmpfs; needs root) --------------------------------------------------------

@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A 2 MB tmpfs, mostly filled by the test."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)]).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)])


def _fill(mnt: Path, leave_kib: int) -> None:
    free = os.statvfs(mnt).f_bavail * os.statvfs(mnt).f_frsize
    with open(mnt / "filler", "wb") as fh:
        fh.write(b"\0" * max(0, free - leave_kib * 1024))


def test_full_report_disk_keeps_exit_code_and_what_was_stored(prog: Gpuscope, tiny_fs: Path) -> None:
    _fill(tiny_fs, 60)
    out = tiny_fs / "r.gpuscope"
    res = prog.profile("-o", str(out), "--trace", "cpu", sys.executable, "steps.py", "normal", "600")
    assert res.returncode == 0, res.describe()  # the program's code, not gpuscope's trouble
    _no_traceback_from_gpuscope(res.stderr)
    assert any("No space left" in line for line in res.errors), res.describe()
    steps, _, _ = _recorded(out)
    assert 0 < steps < 600 and _printed(res.stdout) == 600


def test_full_spool_disk_counts_what_was_lost(prog: Gpuscope, tiny_fs: Path) -> None:
    _fill(tiny_fs, 8)
    # sampled at 1 kHz: enough rows to fill the spool's space before the program's 600 steps are done
    env = base_env({"TMPDIR": str(tiny_fs), "GPUSCOPE_SAMPLE_HZ": "1000"})
    proc = subprocess.run([sys.executable, "-m", "gpuscope", "profile", "--trace", "cpu", sys.executable, "steps.py",
                           "normal", "600"], cwd=prog.cwd, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    _no_traceback_from_gpuscope(proc.stderr)
    assert "spool directory" in proc.stderr and "full" in proc.stderr, proc.stderr
    steps, _, _ = _recorded(prog.cwd / "report1.gpuscope")
    assert steps < 600
    with gpuscope.load(str(prog.cwd / "report1.gpuscope")) as report:
        said = report.sql("SELECT count(*) FROM diagnostic WHERE level = 'error' AND message LIKE '%spool%'")[0][0]
        dropped = report.sql("SELECT coalesce(sum(count), 0) FROM dropped WHERE source = 'spool'")[0][0]
    assert said > 0, "the report does not say that records were lost"
    if "Dropped records: spool" in proc.stderr:  # the program could say how many, once space came back
        assert dropped > 0
