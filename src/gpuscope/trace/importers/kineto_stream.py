"""Reading a PyTorch profiler (Kineto) JSON trace incrementally: its header, then its events one by one.

The trace is parsed with ijson's C backend (yajl): ``traceEvents`` is read item by item, so memory
stays bounded by one event whatever the file's size (``json.load`` of a 2 GB trace takes tens of GB).
The header (``deviceProperties``, ``distributedInfo``, ``baseTimeNanoseconds``, ...) is read by a
first, short pass that stops at ``traceEvents``: Kineto writes it first, and a trace re-saved with
sorted keys has it first too. Gzip is recognised by its magic bytes; decompression runs on a
background thread (zlib releases the GIL), so it overlaps parsing on a second core.
"""

from __future__ import annotations

import gzip
import queue
import threading
import zlib
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import IO, Any

import ijson

from ...errors import GpuscopeError

CHUNK = 1 << 20


def _raw(path: Path) -> IO[bytes]:
    try:
        return open(path, "rb")
    except OSError as exc:
        raise GpuscopeError(f"{path}: cannot read ({exc.strerror})") from None


def is_gzip(path: Path) -> bool:
    """Return whether ``path`` starts with gzip's magic bytes."""
    with _raw(path) as fh:
        return fh.read(2) == b"\x1f\x8b"


class _ThreadedGunzip:
    """A gzip file decompressed on a background thread, read as a stream of bytes."""

    def __init__(self, path: Path) -> None:
        self._queue: queue.Queue[bytes | BaseException | None] = queue.Queue(maxsize=8)
        self._buffer = b""
        self._pos = 0
        self._done = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(path,), daemon=True)
        self._thread.start()

    def _run(self, path: Path) -> None:
        try:
            with gzip.open(path, "rb") as fh:
                while not self._stop.is_set():
                    data = fh.read(CHUNK)
                    if not data:
                        break
                    self._queue.put(data)
            self._queue.put(None)
        except (OSError, EOFError, zlib.error) as exc:
            self._queue.put(exc)

    def __enter__(self) -> _ThreadedGunzip:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read(self, size: int = -1) -> bytes:
        """Return up to ``size`` bytes (the rest of the current block at most; b"" at the end)."""
        while self._pos >= len(self._buffer) and not self._done:
            item = self._queue.get()
            if item is None:
                self._done = True
            elif isinstance(item, BaseException):
                self._done = True
                raise item
            else:
                self._buffer, self._pos = item, 0
        if self._pos >= len(self._buffer):
            return b""
        end = len(self._buffer) if size < 0 else self._pos + size
        out = self._buffer[self._pos:end]
        self._pos += len(out)
        return out

    def close(self) -> None:
        self._stop.set()
        while self._thread.is_alive():  # let the reader thread see the stop and finish
            try:
                self._queue.get(timeout=0.1)
            except queue.Empty:
                pass


def open_trace(path: Path) -> IO[bytes]:
    """Open ``path`` (plain or gzip JSON) as a binary stream of its JSON text."""
    if is_gzip(path):
        return _ThreadedGunzip(path)  # type: ignore[return-value]
    return _raw(path)


def read_header(path: Path) -> dict[str, Any]:
    """Return the top-level items of the trace before ``traceEvents`` (``traceEvents`` itself as
    True when present); raise GpuscopeError when the file is not a JSON object."""
    header: dict[str, Any] = {}
    with open_trace(path) as fh:
        try:
            tokens = ijson.parse(fh, use_float=True)  # reads its first block already
            first = next(tokens, None)
            if first is None or first[1] != "start_map":
                what = "empty" if first is None else f"a JSON {first[1].replace('start_', '')}"
                raise GpuscopeError(f"{path}: not a PyTorch profiler trace (the file is {what}, "
                                    "not an object with traceEvents)")
            key = None
            builder: ijson.ObjectBuilder | None = None
            depth = 0
            for prefix, event, value in tokens:
                if builder is None:
                    if event == "map_key":
                        key = value
                        if key == "traceEvents":
                            header["traceEvents"] = True
                            break
                        builder, depth = ijson.ObjectBuilder(), 0
                    continue
                builder.event(event, value)
                depth += event in ("start_map", "start_array")
                depth -= event in ("end_map", "end_array")
                if depth == 0:
                    header[str(key)] = builder.value
                    builder = None
        except ijson.JSONError as exc:
            raise GpuscopeError(f"{path}: not a PyTorch profiler trace (not JSON: {_first_line(exc)})") from None
        except (OSError, EOFError, zlib.error) as exc:
            raise GpuscopeError(f"{path}: {_gzip_problem(exc)} in the trace's header") from None
    return header


def events(path: Path, counter: list[int], stream: IO[bytes] | None = None) -> Iterator[dict[str, Any]]:
    """Yield every item of ``traceEvents`` (of ``stream`` where given: the trace's JSON text from
    some event on, see kineto_chunks); ``counter[0]`` counts those yielded. A truncated or damaged
    file raises GpuscopeError naming the event number where parsing stopped."""
    with (open_trace(path) if stream is None else nullcontext(stream)) as fh:
        try:
            for ev in ijson.items(fh, "traceEvents.item", use_float=True):
                counter[0] += 1
                yield ev
        except ijson.IncompleteJSONError as exc:
            raise GpuscopeError(f"{path}: the JSON ends early or is damaged after event {counter[0]:,} "
                                f"({_first_line(exc)})") from None
        except ijson.JSONError as exc:
            raise GpuscopeError(f"{path}: invalid JSON after event {counter[0]:,} ({_first_line(exc)})") from None
        except (OSError, EOFError, zlib.error) as exc:
            raise GpuscopeError(f"{path}: {_gzip_problem(exc)}; parsing stopped after event {counter[0]:,}") from None


def _gzip_problem(exc: BaseException) -> str:
    if isinstance(exc, EOFError):
        return "truncated gzip (the compressed data ends early)"
    return f"damaged gzip ({_first_line(exc)})"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__
