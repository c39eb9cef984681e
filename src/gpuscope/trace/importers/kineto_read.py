"""How the events of a Kineto trace reach the importer: in bulk, in parallel, or one by one.

Runs of whole events (:mod:`.kineto_chunks`) are decoded and turned into columns
(:mod:`.kineto_columns`) in this process or, for a large trace, in worker processes (one per core
this process may run on, up to :data:`MAX_WORKERS`, none on a single core; ``GPUSCOPE_IMPORT_WORKERS``
sets the number, 0 for none;
``GPUSCOPE_IMPORT_BULK=0`` parses the whole trace event by event, as a reference). The importer
takes the results in the order of the runs, so the report is the same however many workers there
are. A run whose values the bulk mapping does not take is mapped event by event; a run that does not
decode as JSON events (a damaged file, or a false boundary) and everything after it is parsed event
by event by the streaming parser, which names the event where the damage is.
"""

from __future__ import annotations

import os
import pickle
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

import msgspec

from . import kineto_chunks, kineto_columns, kineto_events, kineto_stream
from .kineto_chunks import Run
from .kineto_worker import Worker, map_run



class KinetoImporter(Protocol):
    """What this module needs of kineto.KinetoImporter (named here: kineto imports this module)."""

    base: int

    def event(self, ev: dict[str, Any]) -> None: ...

    def apply(self, chunk: kineto_columns.ChunkColumns) -> None: ...

MAX_WORKERS = 4  # each holds about one run's objects (~100 MB): the import stays within 1 GB
PARALLEL_BYTES = 64 << 20  # smaller traces are mapped in this process (a worker takes ~0.3 s to start)


def workers_for(path: Path) -> int:
    """How many worker processes to map the runs of the trace at ``path`` with (0: none)."""
    given = os.environ.get("GPUSCOPE_IMPORT_WORKERS")
    if given is not None and given.strip().isdigit():
        return int(given)
    size = path.stat().st_size * (8 if kineto_stream.is_gzip(path) else 1)  # JSON compresses about 8:1
    cores = usable_cores()
    return min(MAX_WORKERS, cores) if size >= PARALLEL_BYTES and cores > 1 else 0


def usable_cores() -> int:
    """The number of cores this process may run on (its CPU affinity where the system tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def read_events(path: Path, importer: KinetoImporter, counter: list[int], header: dict[str, Any]) -> None:
    """Map every event of the trace at ``path`` into ``importer``; ``counter[0]`` counts them."""
    runs = None if os.environ.get("GPUSCOPE_IMPORT_BULK") == "0" else kineto_chunks.event_runs(path, header)
    if runs is None:
        _per_event(importer, kineto_stream.events(path, counter))
        return
    kineto_events.reset_decoders()
    workers = workers_for(path)
    pool = [Worker() for _ in range(workers)]
    try:
        with runs.stream:
            done = _mapped(path, runs, importer, counter, pool)
            if done and (runs.error is not None or runs.stuck):  # what was read before a gzip error, then it
                _per_event(importer, kineto_stream.events(path, counter, runs.rest([])))
    finally:
        for worker in pool:
            worker.close()


class _Sent:
    """A run sent to a worker, its answer not yet read."""

    def __init__(self, worker: Worker, run: Run, path: Path, base: int) -> None:
        self.worker, self.run, self.path, self.base = worker, run, path, base
        worker.send((run, path, base))

    def result(self) -> Any:
        try:
            return self.worker.receive()
        except (EOFError, OSError, pickle.UnpicklingError):  # a worker that died: map the run here
            return map_run(self.run, self.path, self.base)


def _mapped(path: Path, runs: kineto_chunks.EventRuns, importer: KinetoImporter, counter: list[int],
            pool: list[Worker]) -> bool:
    """Map the runs (in turn by the workers of ``pool``, each with one run at a time; here without
    workers); return False where the rest of the trace was parsed event by event."""
    pending: deque[tuple[Run, Any]] = deque()
    base = importer.base
    # two runs a worker where a request is a few bytes (a part of a plain file); one where it carries
    # the run's text, so that a worker never blocks on its answer while the importer blocks on a request
    window = max(1, len(pool) * (2 if runs.at is not None else 1))
    for i, run in enumerate(runs):
        if pool:
            pending.append((run, _Sent(pool[i % len(pool)], run, path, base)))
        else:
            pending.append((run, map_run(run, path, base)))
        while len(pending) >= window:
            if not _take(path, runs, importer, counter, pending):
                return False
    while pending:
        if not _take(path, runs, importer, counter, pending):
            return False
    return True


def _take(path: Path, runs: kineto_chunks.EventRuns, importer: KinetoImporter, counter: list[int],
          pending: deque[tuple[Run, Any]]) -> bool:
    run, result = pending.popleft()
    if isinstance(result, _Sent):
        result = result.result()
    if isinstance(result, kineto_columns.ChunkColumns):
        importer.apply(result)
        counter[0] += result.events
        return True
    events = _plain(run.load(path), run.tail) if result[0] == "values" else None
    if events is not None:
        _per_event(importer, events)
        counter[0] += len(events)
        return True
    for _, later in pending:  # read the answers still due, so that each worker is free again
        if isinstance(later, _Sent):
            later.result()
    rest = [run] + [r for r, _ in pending]
    pending.clear()
    _per_event(importer, kineto_stream.events(path, counter, runs.rest(rest)))
    return False


def _per_event(importer: KinetoImporter, events: Iterable[dict[str, Any]]) -> None:
    for ev in events:
        importer.event(ev)


def _plain(text: bytes, tail: bool) -> list[dict[str, Any]] | None:
    """The run's events as plain JSON objects, or None where its text is not JSON."""
    try:
        if tail:
            return msgspec.json.decode(kineto_columns.TAIL_PREFIX + text)["traceEvents"]  # type: ignore[no-any-return]
        return msgspec.json.decode(b"[" + text + b"]")  # type: ignore[no-any-return]
    except (msgspec.DecodeError, RecursionError):  # the streaming parser says what is wrong, and where
        return None
