"""Starts the program to profile as a child process, with the agent loaded before its first line.

The child gets the same argv, standard streams, working directory and environment, plus three
variables: PYTHONPATH gains a bootstrap directory whose ``sitecustomize`` starts the agent (and
then runs any ``sitecustomize`` the environment had), GPUSCOPE_SPOOL names the spool directory and
GPUSCOPE_TRACE the collectors. Every Python process started below the child inherits them, so
process trees (launch scripts, torchrun, spawned workers) are profiled too.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ...errors import GpuscopeError
from ...spool import SPOOL_ENV
from .agent import TRACE_ENV
from .launcher_watch import LAUNCHER_ENV

# How long a signal sent to the launcher waits before it is passed on to the program: sent to the
# whole process group (a supervisor, systemd, Slurm), the program got it already, and by then it says
# it is ending (spool.say_ending); a second one would cut its exit short.
FORWARD_AFTER_S = 0.2
_PYTHON_NAME = re.compile(r"^python(\d+(\.\d+)?)?$")
# Options of the python command that take a value as the next argument.
_PYTHON_OPTS_WITH_VALUE = {"-W", "-X", "--check-hash-based-pycs"}


@dataclass(frozen=True)
class Command:
    """The resolved command line of the program to profile."""

    argv: list[str]
    is_python: bool


def resolve_command(args: list[str], module: str | None = None) -> Command:
    """Turn what the user typed after ``gpuscope profile`` into an argv that can be executed.

    ``train.py ...`` runs with this Python; ``-m pkg.mod ...`` likewise; anything else is looked up
    on PATH. A Python script that does not exist is an error here, before anything starts.
    """
    if module is not None:
        return Command([sys.executable, "-m", module, *args], True)
    if not args:
        raise GpuscopeError("nothing to profile: give a command, a script or -m module")
    first = args[0]
    if first.endswith(".py"):
        _check_script(first)
        return Command([sys.executable, *args], True)
    exe = shutil.which(first)
    if exe is None:
        if os.path.isdir(first):
            raise GpuscopeError(f"{first}: is a directory; give a program, a .py script or -m module")
        if os.path.exists(first):
            raise GpuscopeError(f"{first}: not executable")
        raise GpuscopeError(f"{first}: command not found")
    is_python = bool(_PYTHON_NAME.match(os.path.basename(first)))
    if is_python:
        script = _python_script(args[1:])
        if script is not None:
            _check_script(script)
    return Command([exe, *args[1:]], is_python)


def _python_script(args: list[str]) -> str | None:
    """Return the script a ``python`` command line would run, or None for -c, -m or stdin."""
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in ("-c", "-m", "-"):
            return None
        if arg in _PYTHON_OPTS_WITH_VALUE:
            skip = True
            continue
        if arg.startswith("-"):
            continue
        return arg
    return None


def _check_script(path: str) -> None:
    if not os.path.exists(path):
        raise GpuscopeError(f"{path}: no such file")
    if os.path.isdir(path) and not os.path.exists(os.path.join(path, "__main__.py")):
        raise GpuscopeError(f"{path}: is a directory without __main__.py")


class _OwnStderr(io.TextIOBase):
    """gpuscope's own standard error in the launcher: written straight to fd 2, never buffered; once
    a write fails (the pipe's reader is gone, as with ``| head``), later lines are dropped (fd 2 stays
    as it is: the program gets, or keeps, the stderr it was given)."""

    def __init__(self, encoding: str) -> None:
        super().__init__()
        self._encoding = encoding
        self.broken = False

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._encoding

    @property
    def errors(self) -> str:  # type: ignore[override]
        return "backslashreplace"

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return 2

    def isatty(self) -> bool:
        return not self.broken and os.isatty(2)

    def write(self, text: str) -> int:
        """Write ``text`` to fd 2 unless an earlier write failed; return its length either way."""
        if self.broken or not text:
            return len(text)
        data = text.encode(self._encoding, "backslashreplace")
        try:
            while data:
                data = data[os.write(2, data):]
        except BlockingIOError:
            pass  # a stderr someone made non-blocking and that is full: this line is dropped
        except OSError:
            self.broken = True
        return len(text)

    def flush(self) -> None:
        return None


def _null_on(target: int) -> None:
    """Put /dev/null on the closed fd ``target``, not inherited by the program (it closes at exec)."""
    try:
        fd = os.open(os.devnull, (os.O_RDONLY if target == 0 else os.O_WRONLY) | os.O_CLOEXEC)
    except OSError:
        return
    if fd != target:
        os.dup2(fd, target, inheritable=False)
        os.close(fd)


def guard_standard_streams() -> None:
    """Make the launcher's standard streams safe for the program and for the run; call it before
    gpuscope opens any file.

    Each of fds 0, 1 and 2 that is closed gets /dev/null, so that no file gpuscope opens later (the
    report, a chunk) takes its number, in the launcher or in the program, which would read or write
    it as its own; it is closed again in the program at exec, which gets the closed streams it was
    given. With fd 2 closed, gpuscope's lines go nowhere, never to standard output. A stderr whose
    reader went away (``2>&1 >/dev/null | head``) costs gpuscope its later lines, never the run: the
    program keeps that stderr, as it would have without gpuscope.
    """
    closed = []
    for fd in (0, 1, 2):  # in this order: /dev/null opened for one is never given a lower one
        try:
            os.fstat(fd)
        except OSError:
            closed.append(fd)
            _null_on(fd)
    encoding = getattr(sys.__stderr__, "encoding", None) or "utf-8"
    sys.stderr = _OwnStderr(encoding)
    if 2 in closed:
        sys.stderr.broken = True


def prepare_bootstrap(spool_dir: Path) -> Path:
    """Create the directory that goes first on the child's PYTHONPATH; return it.

    It holds the bootstrap ``sitecustomize.py`` and a link to this gpuscope package, so the agent
    can be imported by a Python that does not have gpuscope installed.
    """
    boot = spool_dir / "boot"
    boot.mkdir()
    here = Path(__file__).resolve().parent
    shutil.copyfile(here / "_bootstrap" / "sitecustomize.py", boot / "sitecustomize.py")
    (boot / "gpuscope").symlink_to(here.parents[1], target_is_directory=True)
    return boot


# The variables a report stores (meta.environment): those that change what a deep-learning program
# computes or how fast, so that ``gpuscope try`` can run it again as it ran; never the rest (secrets).
_RECORDED_ENV = re.compile(r"^(CUDA_|PYTORCH_|TORCH|TORCHINDUCTOR_|NCCL_|OMP_|MKL_|OPENBLAS_|CUBLAS|CUDNN|NVIDIA_TF32|"
                           r"TRITON_|XLA_|PYTHONHASHSEED$|PYTHONPATH$|LOCAL_RANK$|RANK$|WORLD_SIZE$)")


def recorded_environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """The variables of ``env`` (default: this process's) that a report stores."""
    env = dict(os.environ) if env is None else env
    return {k: v for k, v in sorted(env.items()) if _RECORDED_ENV.match(k)}


def child_environment(spool_dir: Path, boot: Path, trace: list[str]) -> dict[str, str]:
    """Return the environment of the profiled program."""
    env = dict(os.environ)
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(boot) + (os.pathsep + old if old else "")
    env[SPOOL_ENV] = str(spool_dir)
    env[TRACE_ENV] = ",".join(trace)
    env[LAUNCHER_ENV] = str(os.getpid())
    return env


@dataclass
class ExitStatus:
    """How the profiled program ended."""

    returncode: int

    @property
    def signal(self) -> int | None:
        return -self.returncode if self.returncode < 0 else None

    @property
    def shell_code(self) -> int:
        """The exit code a shell reports for it: the code, or 128 + the signal number."""
        return 128 + -self.returncode if self.returncode < 0 else self.returncode

    def describe(self) -> str:
        sig = self.signal
        if sig is not None:
            try:
                name = signal.Signals(sig).name
            except ValueError:
                name = f"signal {sig}"
            return f"was killed by {name}"
        return f"exited with code {self.returncode}"


def run(
    argv: list[str],
    env: dict[str, str],
    on_poll: Callable[[], None],
    poll_s: float,
    on_start: Callable[[int], None] = lambda pid: None,
    held: dict[int, object] | None = None,
    ending: Callable[[int], bool] = lambda pid: False,
) -> ExitStatus:
    """Run ``argv`` to its end, calling ``on_start`` with its pid, then ``on_poll`` every
    ``poll_s`` seconds meanwhile.

    Ctrl-C reaches the child from the terminal, so the launcher ignores SIGINT and waits for the
    child to end; SIGTERM, SIGHUP and SIGQUIT sent to the launcher are passed to the child
    ``FORWARD_AFTER_S`` later, unless it has ended or ``ending(pid)`` says it has begun to (it got the
    signal from its process group).

    With ``held`` (a dict), these signals stay ignored after the child ended, so that a second one
    (a supervisor signals the group twice) cannot kill the launcher before the report is finished;
    ``held`` receives the handlers to put back with :func:`release_signals`.
    """
    try:
        child = subprocess.Popen(argv, env=env)
    except OSError as exc:
        raise GpuscopeError(f"{argv[0]}: cannot start: {exc.strerror or exc}") from None
    forwarded = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)

    def pass_on(signum: int) -> None:
        try:
            if child.poll() is None and not ending(child.pid):
                child.send_signal(signum)
        except (ProcessLookupError, ChildProcessError):
            pass

    def forward(signum: int, frame: object) -> None:
        timer = threading.Timer(FORWARD_AFTER_S, pass_on, (signum,))
        timer.daemon = True
        timer.start()

    previous = {s: signal.signal(s, forward) for s in forwarded}
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        on_start(child.pid)
        while True:
            try:
                code = child.wait(timeout=poll_s)
                break
            except subprocess.TimeoutExpired:
                on_poll()
    finally:
        for s, handler in previous.items():
            signal.signal(s, signal.SIG_IGN if held is not None else handler)
        if held is not None:
            held.update(previous)
    return ExitStatus(code)


def release_signals(held: dict[int, object]) -> None:
    """Put back the signal handlers that :func:`run` held."""
    for s, handler in held.items():
        signal.signal(s, handler)  # type: ignore[arg-type]
    held.clear()
