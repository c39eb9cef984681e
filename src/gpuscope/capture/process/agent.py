"""The in-process agent: started by the bootstrap before any user code of a profiled Python process.

It reads its settings from the environment the launcher prepared, starts the collectors of the
registry (capture/collectors.py: ``RECORDERS``) that ``--trace`` asks for, flushes what they hold to
the spool every ``FLUSH_INTERVAL_S`` (and soon after a capture window closes), and delivers
everything at exit and on SIGTERM. A capture range (``GPUSCOPE_CAPTURE``) turns collection on and
off meanwhile (control.py). It knows no collector by name: each goes through the lifecycle of the
``Collector`` protocol. Standard library only, apart from the collectors' own optional imports.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ...spool import SPOOL_ENV, SpoolWriter, place_left_report, say_ending
from ..capture_range import CAPTURE_ENV, CaptureSpec
from ..collectors import RECORDERS, STOP_THREAD, Collector, Recorder
from ..python import imports
from ..python.stacks import StackTable
from . import tracebacks
from .control import CaptureControl
from .launcher_watch import Launcher

if TYPE_CHECKING:
    from ..python.ranges import RangeRecorder

TRACE_ENV = "GPUSCOPE_TRACE"
# Signals whose default action ends the process: the agent delivers everything first (if the program
# left them to their default), and while it delivers, a second one waits (SIGINT is ignored).
ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
FLUSH_INTERVAL_S = 0.5

_agent: Agent | None = None


class Agent:
    """Owns the spool writer and the collectors of one process (the ``Context`` they start with)."""

    def __init__(self, spool_dir: str, trace: set[str], capture: CaptureSpec | None = None,
                 recorders: list[Recorder] | None = None) -> None:
        self.trace = trace
        self.spool = SpoolWriter(spool_dir)
        self.recorders = RECORDERS if recorders is None else recorders
        self.stacks = StackTable()
        self.collectors: list[Collector] = []  # every collector started, in the order started
        self._started: list[tuple[Recorder, Collector]] = []
        self._by_name: dict[str, Collector] = {}
        self._stopped_names: set[str] = set()
        self._import_hooks: dict[str, list[Callable[[ModuleType], None]]] | None = None
        self.clock = "monotonic"
        self.clock_offset_ns = 0
        self._rows: dict[str, list[tuple[Any, ...]]] = {}
        self._rows_lock = threading.Lock()
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._pending_signal: int | None = None
        self._on_signal: Callable[[int, Any], None] | None = None  # the agent's own handler, once hooked
        self._said_ending = False
        self.flush_thread_ns = 0  # the flush thread's CPU time, read after each flush
        self._launcher = Launcher.from_env()
        self._pid = os.getpid()
        self._capture_started = False
        self.capture = CaptureControl(self, capture or CaptureSpec())

    # -- public ----------------------------------------------------------------------------
    def start(self) -> None:
        """Start the collectors and the flush thread, and hook process exit."""
        self._start_recorders()
        self.capture.start()
        self._capture_started = True
        self._add_row("process", self._process_row())
        self.flush()
        self._thread = threading.Thread(target=self._flush_loop, name="gpuscope-flush", daemon=True)
        self._thread.start()
        atexit.register(self.stop_at_exit)
        _when_main_ends(self._main_ended)
        self._hook_ending_signals()
        os.register_at_fork(after_in_child=_forget_in_child)

    @property
    def ranges(self) -> RangeRecorder:
        """The range recorder (python/ranges.py): annotations, step marks and capture triggers go through it."""
        return self.collector("ranges")

    def collector(self, name: str) -> Any:
        """Return the collector of the recorder named ``name`` if it has started, else None."""
        return self._by_name.get(name)

    def now_ns(self) -> int:
        """Return the current time on the session clock."""
        return time.monotonic_ns() + self.clock_offset_ns

    def use_clock(self, name: str, now: Callable[[], int]) -> None:
        """Make ``now`` the session clock (CUPTI's): collectors started from now on use its offset."""
        self.clock = name
        self.clock_offset_ns = _offset(now)

    def when_imported(self, module: str, hook: Callable[[ModuleType], None]) -> None:
        """Call ``hook(module)`` once the program has imported ``module`` (now, if it has)."""
        if self._import_hooks is not None:  # while the recorders start: after theirs, in one finder
            self._import_hooks.setdefault(module, []).append(hook)
        else:
            imports.when_imported({module: [hook]}, self._hook_failed)

    def diag(self, level: str, message: str) -> None:
        """Record a one-line diagnostic; the launcher prints it and stores it in the report."""
        self._add_row("diagnostic", (self.now_ns(), level, message))
        if level == "error":
            self.flush_rows()

    def add_row(self, table: str, row: tuple[Any, ...]) -> None:
        """Add one row of a report table to the next flush."""
        self._add_row(table, row)

    def flush(self) -> None:
        """Hand every record collected so far to the spool."""
        for recorder, collector in list(self._started):
            flush = getattr(collector, "flush", None)
            if flush is not None:
                self._guarded(recorder, "flush", flush)
        self.flush_rows()

    def flush_rows(self) -> None:
        taken = [c.take_rows() for c in list(self.collectors)]  # a hook may add one meanwhile
        with self._rows_lock:
            rows, self._rows = self._rows, {}
        for collected in taken:
            for table, items in collected.items():
                rows.setdefault(table, []).extend(items)
        for table, items in self.stacks.take().items():  # after the rows that refer to them
            rows.setdefault(table, []).extend(items)
        if rows:
            self.spool.write(rows=rows)

    def stop(self) -> None:
        """Deliver everything and stop the collectors; safe to call more than once. A Ctrl-C while
        it runs is ignored, and a SIGTERM or SIGHUP waits for it: to the agent's handler (see
        :meth:`_hook_ending_signals`), or to the program's own, which is called once delivery is done
        (what it raises, SystemExit most often, is raised from here then)."""
        if self._stopped or os.getpid() != self._pid:
            return
        self._stopped = True
        held = _hold_sigint()  # before anything of the agent's runs: a second Ctrl-C raises in no frame of its own
        waiting = self._hold_program_handlers()
        try:
            self._say_ending()
            if self._launcher is not None and self._launcher.gone():
                self._orphaned()
            self._deliver()
        finally:
            _release_sigint(held)
            self._release_program_handlers(waiting)

    def _say_ending(self) -> None:
        """Tell the launcher that this process has begun to end (once)."""
        if self._launcher is not None and not self._said_ending and os.getpid() == self._pid:
            self._said_ending = True
            say_ending(self.spool.directory, self._pid)

    def _main_ended(self) -> None:
        """The main thread has ended: the process is ending, unless threads of the program go on."""
        main = threading.main_thread()
        if not any(t is not main and not t.daemon and t.is_alive() for t in threading.enumerate()):
            held = _hold_sigint()
            try:
                self._say_ending()
            finally:
                _release_sigint(held)

    def stop_at_exit(self) -> None:
        """:meth:`stop`, run by atexit: the program is ending already, so what the program's own signal
        handler raises for a signal that waited for the delivery (a supervisor's second SIGTERM, or
        the launcher's copy of one sent to the whole group) ends nothing more and is not said."""
        try:
            self.stop()
        except (SystemExit, KeyboardInterrupt):
            pass

    def _hold_program_handlers(self) -> dict[int, tuple[Any, list[tuple[int, Any]]]]:
        """Make the ending signals that the program handles itself wait while the agent delivers;
        return, for each, the program's handler and the signals that came (see
        :meth:`_release_program_handlers`)."""
        held: dict[int, tuple[Any, list[tuple[int, Any]]]] = {}
        if threading.current_thread() is not threading.main_thread():
            return held
        for signum in ENDING_SIGNALS:
            try:
                handler = signal.getsignal(signum)
            except (ValueError, OSError):
                continue
            if not callable(handler) or handler is self._on_signal:
                continue  # the default, ignored, or the agent's own (which waits already)
            came: list[tuple[int, Any]] = []
            try:
                signal.signal(signum, lambda sig, frame, came=came: came.append((sig, frame)))
            except (ValueError, OSError):
                continue
            held[signum] = (handler, came)
        return held

    @staticmethod
    def _release_program_handlers(held: dict[int, tuple[Any, list[tuple[int, Any]]]]) -> None:
        """Put the program's handlers back, then call each once for a signal that came meanwhile."""
        for signum, (handler, _) in held.items():
            signal.signal(signum, handler)
        for signum, (handler, came) in held.items():
            if came:
                handler(*came[0])

    def uninstall(self) -> None:
        """Put back what the collectors installed in the process, and drop the import hooks still
        waiting (a profiled block ends; after :meth:`stop`)."""
        for recorder, collector in reversed(self._started):
            uninstall = getattr(collector, "uninstall", None)
            if uninstall is not None:
                self._guarded(recorder, "uninstall", uninstall)
        imports.forget_all()

    def _deliver(self) -> None:
        for recorder, collector in list(self._started):
            ending = getattr(collector, "ending", None)
            if ending is not None:
                self._guarded(recorder, "ending", ending)
        self.capture.finish()
        self._stop_event.set()
        self.capture.flush_soon.set()
        self._shutdown(lambda phase: phase <= STOP_THREAD)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)  # no flush may race CUPTI's detaching
        if self.flush_thread_ns:  # its CPU time while the program ran: it holds the GIL while it works
            self._add_row("collector", ("flush", 0, 0, self.flush_thread_ns, 0, ""))
        self._shutdown(lambda phase: True)
        self._add_row("process_end", (self.now_ns(),))
        self.flush_rows()

    # -- internals --------------------------------------------------------------------------
    def _start_recorders(self) -> None:
        """Start the recorders the trace asks for, in registry order: those of process start now, the
        others once the program imports their module (their hooks first, then the ones collectors
        asked for with :meth:`when_imported`)."""
        self._import_hooks = {}
        asked: dict[str, list[Callable[[ModuleType], None]]] = {}
        for recorder in self.recorders:
            if not recorder.wanted(self.trace):
                continue
            if recorder.when is None:
                self._start_one(recorder, None)
            else:
                asked.setdefault(recorder.when, []).append(
                    lambda module, recorder=recorder: self._start_one(recorder, module, raise_errors=True))
        for module, hooks in self._import_hooks.items():
            asked.setdefault(module, []).extend(hooks)
        self._import_hooks = None
        if asked:
            imports.when_imported(asked, self._hook_failed)

    def _start_one(self, recorder: Recorder, module: ModuleType | None, raise_errors: bool = False) -> None:
        try:
            collector = recorder.start_function()(self, module)
        except Exception as exc:  # noqa: BLE001  (a collector that fails to start leaves the program as it is)
            if raise_errors:
                raise  # said by the import hook: "gpuscope could not hook into <module>"
            self.diag("warning", f"the {recorder.name} collector did not start: {type(exc).__name__}: {exc}")
            return
        if collector is None:
            return
        self._started.append((recorder, collector))
        self._by_name[recorder.name] = collector
        self.collectors.append(collector)
        if self._capture_started:  # started later (at an import): the capture window's current state
            self.capture.apply_to(collector)

    def _hook_failed(self, name: str, exc: BaseException) -> None:
        self.diag("warning", f"gpuscope could not hook into {name}: {type(exc).__name__}: {exc}")

    def _shutdown(self, phases: Callable[[int], bool]) -> None:
        """Shut down the collectors of the ``phases`` not yet shut down: by phase, and within one in
        the reverse of the order they started."""
        started = list(enumerate(self._started))
        for _, (recorder, collector) in sorted(started, key=lambda item: (item[1][0].stops, -item[0])):
            if not phases(recorder.stops) or recorder.name in self._stopped_names:
                continue
            self._stopped_names.add(recorder.name)
            shutdown = getattr(collector, "shutdown", None)
            if shutdown is not None:
                self._guarded(recorder, "stop", lambda: shutdown(self))

    def _guarded(self, recorder: Recorder, what: str, call: Callable[[], Any]) -> None:
        """Run one lifecycle call of a collector; what escapes it is said, never raised."""
        try:
            call()
        except Exception as exc:  # noqa: BLE001
            self._add_row("diagnostic", (self.now_ns(), "warning",
                                         f"the {recorder.name} collector failed to {what}: {type(exc).__name__}: {exc}"))

    def _process_row(self) -> tuple[Any, ...]:
        return (
            os.getppid(),
            sys.executable,
            json.dumps(_argv()),
            os.getcwd(),
            self.now_ns(),
            None,
            self.clock,
            self.clock_offset_ns,
        )

    def _add_row(self, table: str, row: tuple[Any, ...]) -> None:
        with self._rows_lock:
            self._rows.setdefault(table, []).append(row)

    def _flush_loop(self) -> None:
        soon = self.capture.flush_soon
        while True:
            soon.wait(FLUSH_INTERVAL_S)
            soon.clear()
            if self._stop_event.is_set():
                self.flush_thread_ns = time.thread_time_ns()
                return
            if self._launcher is not None and self._launcher.gone():
                self._orphaned()
            self.flush()  # to a closed spool once orphaned: what collectors hold is dropped, not kept
            self.flush_thread_ns = time.thread_time_ns()

    def _orphaned(self) -> None:
        """The launcher died (SIGKILL, out of memory): nobody reads the spool any more. Stop writing
        to it, move the report it was writing into place (what it ingested), remove the spool, and
        stop the collectors' own threads (the sampler); the program runs on untraced."""
        self.spool.closed = True
        self._launcher = None
        self._shutdown(lambda phase: phase <= STOP_THREAD)
        import shutil  # noqa: PLC0415

        place_left_report(self.spool.directory)
        shutil.rmtree(self.spool.directory, ignore_errors=True)

    def _hook_ending_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def on_signal(signum: int, frame: Any) -> None:
            if self._stopped:  # a delivery is under way: it ends the process when it is done
                if self._pending_signal is None:
                    self._pending_signal = signum
                return
            self.stop()
            signum = self._pending_signal or signum
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

        self._on_signal = on_signal
        for signum in ENDING_SIGNALS:
            # A program that handles the signal itself exits through atexit, which delivers.
            if signal.getsignal(signum) is signal.SIG_DFL:
                signal.signal(signum, on_signal)


def _when_main_ends(call: Callable[[], None]) -> None:
    """Call ``call`` as soon as the main thread has ended, before atexit runs anything (where the
    threading module offers it; else with atexit, after the program's own exit functions)."""
    register = getattr(threading, "_register_atexit", None)
    try:
        if register is None:
            raise RuntimeError
        register(call)
    except RuntimeError:
        atexit.register(call)


def _hold_sigint() -> Any:
    """Ignore SIGINT (on the main thread) and return the handler to put back."""
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        return signal.signal(signal.SIGINT, signal.SIG_IGN)
    except (ValueError, OSError):
        return None


def _release_sigint(previous: Any) -> None:
    if previous is not None:
        try:
            signal.signal(signal.SIGINT, previous)
        except (ValueError, OSError):
            pass


def _offset(cupti_now: Any) -> int:
    """Return CUPTI's clock minus CLOCK_MONOTONIC, from the closest of a few paired readings."""
    best: tuple[int, int] | None = None
    for _ in range(5):
        a = time.monotonic_ns()
        c = cupti_now()
        b = time.monotonic_ns()
        if best is None or b - a < best[0]:
            best = (b - a, c - (a + b) // 2)
    assert best is not None
    return best[1]


def _argv() -> list[str]:
    try:
        with open("/proc/self/cmdline", "rb") as fh:
            parts = fh.read().split(b"\0")
        return [p.decode("utf-8", "backslashreplace") for p in parts if p]
    except OSError:
        return [sys.executable, *sys.argv]


def _forget_in_child() -> None:
    # CUDA and CUPTI do not survive fork; a forked child (DataLoader worker, multiprocessing) is
    # not traced, and must not deliver its parent's state at its exit.
    global _agent
    if _agent is not None:
        _agent._stopped = True
        _agent._stop_event.set()
    _agent = None


def current() -> Agent | None:
    """Return the agent of this process, if it is being profiled."""
    return _agent


def start_from_env() -> Agent | None:
    """Start the agent if the launcher asked for it through the environment; return it."""
    global _agent
    spool = os.environ.get(SPOOL_ENV)
    if not spool or _agent is not None:
        return _agent
    if not os.path.isdir(spool):
        return None  # a process that outlived its profiling session
    trace = {t for t in os.environ.get(TRACE_ENV, "cuda").split(",") if t}
    closed = _hold_closed_std_fds()
    tracebacks.install()
    try:
        _agent = Agent(spool, trace, CaptureSpec.from_env(os.environ.get(CAPTURE_ENV)))
        if 2 in closed:
            _agent.spool.say_on_stderr = False
        _agent.start()
    finally:
        for fd in closed:
            os.close(fd)
    return _agent


def _hold_closed_std_fds() -> list[int]:
    """Put /dev/null on each of fds 0, 1 and 2 that the program was started with closed, and return
    them: what the agent opens to keep (a pidfd, a collector's files) then gets another number, and
    the program finds them closed, as it was given them, once they are closed again."""
    closed = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            closed.append(fd)
    for fd in closed:
        try:
            null = os.open(os.devnull, os.O_RDWR)
        except OSError:
            return [c for c in closed if c < fd]
        if null != fd:
            os.dup2(null, fd, inheritable=False)
            os.close(null)
    return closed
