"""Mapping one run of a Kineto trace (:func:`map_run`), and the worker processes of a parallel import
that map the runs they are sent and send back their columns.

A worker is started by :class:`Worker` as ``python -c`` with this module (not through multiprocessing, which
would import the importing program's main module again in each worker). Requests and answers are
pickles, each preceded by its length, on the worker's stdin and stdout; the worker ends at the end of
its stdin. Only the importing process writes to the worker, and only what it pickled itself.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

import msgspec

from . import kineto_columns
from .kineto_chunks import Run

_START = "from gpuscope.trace.importers.kineto_worker import serve; serve()"
# glibc's malloc: keep the memory of one run for the next instead of handing its large blocks back to
# the system and faulting them in again (a quarter of a worker's time was spent in the kernel so)
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(256 << 20), "MALLOC_TRIM_THRESHOLD_": str(512 << 20)}


def _send(fh: IO[bytes], obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    fh.write(len(data).to_bytes(8, "little"))
    fh.write(data)
    fh.flush()


def _receive(fh: IO[bytes]) -> Any:
    head = fh.read(8)
    if len(head) < 8:
        raise EOFError("the worker ended")
    size = int.from_bytes(head, "little")
    data = fh.read(size)
    if len(data) < size:
        raise EOFError("the worker ended")
    return pickle.loads(data)


def map_run(run: Run, path: Path, base: int) -> kineto_columns.ChunkColumns | tuple[str, str]:
    """Map one run; return its columns, or (``values`` or ``syntax``, message) where it cannot."""
    try:
        if run.tail:
            return kineto_columns.map_chunk(run.load(path), base, True)
        return kineto_columns.map_chunk(run.array(path), base, array=True)
    except (msgspec.ValidationError, kineto_columns.Unusual) as exc:
        return "values", str(exc)
    except msgspec.DecodeError as exc:
        return "syntax", str(exc)
    except RecursionError:  # nested too deep to decode: the streaming parser says where
        return "syntax", "nested too deep"


def serve() -> None:
    """Answer requests ``(run, path, base)`` with :func:`map_run`'s result until stdin ends."""
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            run, path, base = _receive(inp)
        except EOFError:
            return
        _send(out, map_run(run, path, base))


class Worker:
    """One worker process, with at most one request outstanding."""

    def __init__(self) -> None:
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[3])  # the folder that holds the gpuscope package
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.update(MALLOC_ENV)
        self.proc = subprocess.Popen([sys.executable, "-c", _START], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env)

    def send(self, request: tuple[Any, ...]) -> None:
        """Send one request."""
        assert self.proc.stdin is not None
        _send(self.proc.stdin, request)

    def receive(self) -> Any:
        """Wait for the answer to the request sent last and return it (EOFError if the worker died)."""
        assert self.proc.stdout is not None
        return _receive(self.proc.stdout)

    def close(self) -> None:
        """End the worker (it ends at the end of its stdin) and wait for it."""
        for fh in (self.proc.stdin, self.proc.stdout):
            if fh is not None:
                try:
                    fh.close()
                except OSError:
                    pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
