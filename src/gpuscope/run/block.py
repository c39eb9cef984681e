"""Profiling a block of a process that ``gpuscope profile`` did not start (a notebook, a script).

``with gpuscope.profile("x.gpuscope"):`` starts the same agent the launcher's bootstrap starts,
with a private spool directory, and when the block ends stops it, writes the report with the same
writer the launcher uses, and prints the same summary. Everything the agent installed is taken
back (PyTorch hooks, the nvtx package's functions, the annotation backend, CUPTI), so a later block
starts afresh. Inside the block ``gpuscope.stop()`` and ``gpuscope.start()`` pause and resume
collection. Under ``gpuscope profile`` the block is a capture range of that run instead (as
``gpuscope.start()`` before and ``gpuscope.stop()`` after it).

Limitations, compared with ``gpuscope profile``:

- CUDA may have been initialised before the block. CUPTI's activity API attaches late, so kernels,
  copies and API calls of the block are recorded; records that CUDA emits when a context is
  created (the device's properties) may be missing for contexts created earlier.
- NVTX ranges of C/C++ code (``torch.cuda.nvtx``) reach CUPTI only if the process's first NVTX
  call came after the block started (NVTX reads its injection library once).
- PyTorch ranges start with the module calls made inside the block; a module call already running
  when the block starts has no range.
- No host or NVML counters (they are sampled from outside the program), and no child processes.
"""

from __future__ import annotations

import atexit
import os
import platform
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from .. import annotation
from ..capture import collectors
from ..capture.process import agent as agent_mod


class Profile:
    """A profiled block: a context manager, or ``start()`` and ``stop()``."""

    def __init__(self, output: str | os.PathLike[str] | None = None, trace: str | None = None,
                 force_overwrite: bool = False, quiet: bool = False) -> None:
        self.output = output
        self.trace_spec = trace
        self.force_overwrite = force_overwrite
        self.quiet = quiet
        self.report: Path | None = None  # the report file, once written
        self._agent: Any = None
        self._borrowed: Any = None
        self._spool: str | None = None
        self._t0 = 0
        self._started_at = ""
        self.trace: list[str] = []
        self._restore: dict[str, Any] = {}

    def __enter__(self) -> Profile:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start collecting (or, under ``gpuscope profile``, open a capture window)."""
        running = agent_mod.current()
        if running is not None:
            if not getattr(running, "in_block", False):  # a block inside a block adds nothing
                self._borrowed = running
                outer = os.environ.get("GPUSCOPE_REPORT")  # session.REPORT_ENV: the run's report
                self.report = Path(outer) if outer else None
                running.capture.api(True)
            return
        from ..trace.files import reserve_report  # noqa: PLC0415

        path = reserve_report(str(self.output) if self.output is not None else None, self.force_overwrite)
        trace = collectors.parse_trace(self.trace_spec)
        if self.trace_spec is None:
            trace = collectors.BLOCK_DEFAULT_GPU if collectors.gpu_present() else collectors.BLOCK_DEFAULT_CPU
        trace = collectors.in_process(trace)
        self.report, self.trace = path, trace
        self._spool = tempfile.mkdtemp(prefix="gpuscope-spool-")
        self._restore = {"backend": annotation._backend}
        on_main = threading.current_thread() is threading.main_thread()
        if on_main:
            self._restore["signals"] = {s: signal.getsignal(s) for s in agent_mod.ENDING_SIGNALS}
        agent: Any = agent_mod.Agent(self._spool, set(trace))
        agent._launcher = None  # this process writes its own report: no launcher to outlive
        self._t0 = time.monotonic_ns()
        self._started_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        agent.start()
        # The program's exit and signals stay the program's: at exit the block ends, report written.
        atexit.unregister(agent.stop_at_exit)
        atexit.register(self.stop)
        if on_main:
            for signum, handler in self._restore["signals"].items():
                signal.signal(signum, handler)
        agent.in_block = True
        agent_mod._agent = agent
        self._agent = agent

    def stop(self) -> Path | None:
        """Stop collecting, write the report and return its path (under ``gpuscope profile``, the run's
        report, written when that run ends)."""
        if self._borrowed is not None:
            self._borrowed.capture.api(False)
            self._borrowed = None
            return self.report  # written when the gpuscope profile run ends
        agent, self._agent = self._agent, None
        if agent is None:
            return self.report
        atexit.unregister(self.stop)
        try:
            agent.stop()
            wall = time.monotonic_ns() - self._t0
        finally:
            self._take_back(agent)
        try:
            self._write(wall)
        finally:
            shutil.rmtree(self._spool or "", ignore_errors=True)
        return self.report

    # -- internals --------------------------------------------------------------------------
    def _take_back(self, agent: Any) -> None:
        """Undo what the agent installed in the process."""
        if agent_mod._agent is agent:
            agent_mod._agent = None
        annotation._backend = self._restore.get("backend")
        agent.uninstall()

    def _write(self, wall_ns: int) -> None:
        from . import program as session  # noqa: PLC0415  (the launcher's writer and meta, imported only now)

        assert self.report is not None and self._spool is not None
        writer = session._open_writer(self.report)
        problems: list[tuple[int, str, str]] = []
        try:
            writer.set_meta(
                command=[sys.executable, *sys.argv], cwd=os.getcwd(), user=session._user(),
                platform=platform.platform(), python=sys.version.split()[0], trace=self.trace,
                not_recorded=collectors.not_recorded(self.trace), in_process=True,
                started_at=self._started_at, host=socket.gethostname(),
            )
            problems = writer.ingest(self._spool, final=True)
        finally:
            writer.close(exit_code=None, exit_signal=None, wall_ns=wall_ns, processes=sorted(writer.pids()))
        if writer.unsummarized is not None:
            problems.append((0, "warning", f"the stats tables were not stored in {self.report} "
                                           f"({writer.unsummarized}); gpuscope stats computes them"))
        if not self.quiet:
            self._summary(writer.records, problems)

    def _summary(self, records: int, problems: list[tuple[int, str, str]]) -> None:
        from ..safe_text import terminal  # noqa: PLC0415
        from .summary import closing_line, end_of_run  # noqa: PLC0415  (analysis and reporters, only now)

        said = set()
        for _, level, message in problems:
            if message not in said:
                said.add(message)
                print(terminal(f"gpuscope: {'error: ' if level == 'error' else ''}{message}"), file=sys.stderr)
        assert self.report is not None
        sys.stderr.write(end_of_run(self.report, said))
        print(closing_line(self.report, records), file=sys.stderr)


def start() -> bool:
    """gpuscope.start(): turn collection on; return whether it is on (False without a profiler)."""
    running = agent_mod.current()
    return running.capture.api(True) if running is not None else False


def stop() -> bool:
    """gpuscope.stop(): turn collection off; return whether it is still on."""
    running = agent_mod.current()
    return running.capture.api(False) if running is not None else False
