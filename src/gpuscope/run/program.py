"""One profiling session: spool, report writer, the program's run, and the finished report."""

from __future__ import annotations

import dataclasses
import getpass
import os
import platform
import shutil
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..capture.capture_range import CAPTURE_ENV, CaptureSpec
from ..capture.collectors import not_recorded
from ..capture.counters.host import HostSampler
from ..capture.counters.nvml import NvmlSampler
from ..capture.process import launch as launcher
from ..errors import GpuscopeError
from ..spool import is_ending, leave_report
from ..trace import outputs
from ..trace.writer import Diagnostic, ReportWriter
from . import stored_stats

REPORT_ENV = "GPUSCOPE_REPORT"

INGEST_INTERVAL_S = 0.25
HOST_INTERVAL_S = 0.1
NVML_INTERVAL_S = 0.05


@dataclass
class SessionResult:
    """What ``profile`` reports at the end."""

    report: Path
    exit: launcher.ExitStatus
    records: int
    failed: str | None = None  # why the report could not be written to its end (a full disk)


def profile(
    command: launcher.Command,
    output: Path,
    trace: list[str],
    on_diagnostic: Callable[[Diagnostic], None],
    capture: CaptureSpec | None = None,
) -> SessionResult:
    """Run ``command`` under the collectors in ``trace`` and write the report to ``output``;
    ``capture`` limits collection to a capture range."""
    spool = Path(tempfile.mkdtemp(prefix="gpuscope-spool-"))
    held: dict[int, object] = {}
    writer: ReportWriter | None = None
    try:
        writer = _open_writer(output)
        assert writer.partial is not None
        try:  # if the launcher is killed, the program moves what was ingested into place (agent.py)
            leave_report(str(spool), writer.partial.file, str(output))
        except OSError:
            pass  # a full spool directory: said below, when the bootstrap cannot be written either

        def ingest(final: bool = False) -> None:
            try:
                new = writer.ingest(str(spool), final=final)
            except Exception as exc:  # noqa: BLE001  (the program keeps running; say what was lost)
                new = [(0, "error", f"writing the report failed: {type(exc).__name__}: {exc}")]
            for d in new:
                on_diagnostic(d)

        writer.set_meta(
            command=command.argv,
            cwd=os.getcwd(),
            environment=launcher.recorded_environment(),
            host=socket.gethostname(),
            user=_user(),
            platform=platform.platform(),
            python=sys.version.split()[0],
            trace=trace,
            not_recorded=not_recorded(trace),
            started_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            # the host's real time beside its monotonic clock: aligns reports of several hosts (analysis/distributed/nodes.py)
            clock_anchor={"realtime_ns": time.time_ns(), "monotonic_ns": time.monotonic_ns()},
        )
        try:
            boot = launcher.prepare_bootstrap(spool)
        except OSError as exc:
            raise GpuscopeError(f"cannot prepare the spool directory {spool} ({exc.strerror or exc}); "
                                "set TMPDIR to a directory with free space") from None
        env = launcher.child_environment(spool, boot, trace)
        env[REPORT_ENV] = str(output)  # where a gpuscope.profile() block inside the program is recorded
        if capture is not None and capture.limited:
            capture = dataclasses.replace(capture, origin_ns=time.monotonic_ns())
            env[CAPTURE_ENV] = capture.to_env()
            writer.set_meta(capture_range={"limited": True, "description": capture.describe(),
                                           "spec": dataclasses.asdict(capture)})
        elif capture is not None and not capture.probe:
            env[CAPTURE_ENV] = capture.to_env()  # the whole run, every step of it
        else:
            env.pop(CAPTURE_ENV, None)
        host: list[HostSampler | NvmlSampler] = []

        def start_host(pid: int) -> None:
            say = lambda m: on_diagnostic((0, "warning", m))  # noqa: E731
            samplers: list[HostSampler | NvmlSampler] = []
            if "host" in trace:
                samplers.append(HostSampler(pid, HOST_INTERVAL_S, say))
            if "nvml" in trace:
                samplers.append(NvmlSampler(NVML_INTERVAL_S, say))
            host.extend(s for s in samplers if s.start())

        def poll() -> None:
            for sampler in host:
                writer.add_host_counters(sampler.take())
            ingest()

        t0 = time.monotonic_ns()
        status = launcher.run(command.argv, env, poll, INGEST_INTERVAL_S, start_host, held,
                              ending=lambda pid: is_ending(str(spool), pid))
        wall = time.monotonic_ns() - t0
        for sampler in host:
            sampler.stop()
            writer.add_host_counters(sampler.take())
        ingest(final=True)
        if not command.is_python and not writer.pids():
            on_diagnostic((0, "warning", "no Python process reported to gpuscope: nothing was traced"))
        if _nearly_full(spool):  # the program may not even have been able to say what it lost
            full = (f"the spool directory {spool.parent} is full: records may have been lost (the report's "
                    "'dropped' table counts those the program could report); set TMPDIR to a directory with "
                    "free space")
            on_diagnostic((0, "error", full))
            if writer.failed is None:
                writer.record_problem(0, full)
        writer.close(
            exit_code=status.returncode if status.signal is None else None,
            exit_signal=status.signal,
            wall_ns=wall,
            processes=sorted(writer.pids()),
        )
        if writer.unsummarized is not None:
            on_diagnostic((0, "warning", f"the stats tables were not stored in {output} ({writer.unsummarized}); "
                                         "gpuscope stats computes them"))
        if writer.unplaced is not None:
            on_diagnostic((0, "error", writer.unplaced))
        elif writer.failed is not None and writer.checkpoint_failed and not writer.lost_chunks:
            on_diagnostic((0, "warning", f"{output} was not checkpointed ({writer.failed}): its records are in "
                                         f"{output.name}.wal; keep that file beside it"))
        elif writer.failed is not None:
            lost = f"; {writer.lost_chunks} chunks of records lost" if writer.lost_chunks else ""
            on_diagnostic((0, "error", f"{output} could not be written to its end ({writer.failed}){lost}; "
                                       "it keeps what was stored before"))
        return SessionResult(output, status, writer.records, writer.failed)
    finally:
        if writer is not None:
            writer.abandon()  # when gpuscope failed, not the program: what was recorded, status 'recording'
        launcher.release_signals(held)  # ending signals were ignored from the program's end to here
        shutil.rmtree(spool, ignore_errors=True)


def _open_writer(output: Path) -> ReportWriter:
    """Return a writer of the report whose name trace.files.reserve_report claimed: it writes under a
    name of its own and moves the report to ``output`` when closed. On failure the claim is removed
    (if no other run has put a report there meanwhile)."""
    partial = outputs.PartialReport(output)
    try:
        return ReportWriter(output, partial=partial, summarize=stored_stats.store)
    except Exception as exc:  # noqa: BLE001  (duckdb raises IOException and friends)
        partial.discard()
        outputs.release_claim(output)
        raise GpuscopeError(f"cannot create {output}: {str(exc).strip().splitlines()[0]}") from None


def _nearly_full(directory: Path, margin: int = 1 << 20) -> bool:
    """Whether the file system of ``directory`` has less than ``margin`` bytes free."""
    try:
        st = os.statvfs(directory)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < margin


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())
