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
import numpy as np

from ...errors import GpuscopeError

CHUNK = 1 << 20
MAX_DEPTH = 1000  # arrays and objects inside each other; deeper is refused (no trace nests so)

# Byte classes of JSON's structure, for Guarded's scan
_QUOTE, _BACKSLASH, _OPEN, _CLOSE = 1, 2, 3, 4
_CLASS = np.zeros(256, dtype=np.uint8)
_CLASS[ord('"')], _CLASS[ord("\\")] = _QUOTE, _BACKSLASH
_CLASS[[ord("["), ord("{")]] = _OPEN
_CLASS[[ord("]"), ord("}")]] = _CLOSE
_BARE = b"0123456789+-.eEtruefalsnul"  # what a token outside strings (a number, true, false, null) is made of


class Guarded:
    """The JSON text of ``stream``, read through while its nesting and its tokens are followed,
    so that the streaming parser (yajl) stays within bounded memory and linear time:

    - arrays and objects nested deeper than :data:`MAX_DEPTH` raise GpuscopeError (the parser keeps
      one path string per level, so depth ``d`` costs memory ``d**2``);
    - while one token (a string, a number) runs on past what was read, each read asks for twice as
      much as the one before (the parser reads a token cut between reads again from its start, so
      a token read in blocks of a fixed size costs time of its length squared).

    The scan is numpy over each block; a JSON text that is not valid is left for the parser to
    name (the depth counted then may be wrong, but is never unbounded)."""

    def __init__(self, stream: IO[bytes], path: Path) -> None:
        self.stream, self.path = stream, path
        self.depth = 0
        self.in_string = False
        self.backslashes = 0  # backslashes ending the text read so far, inside a string
        self.token = 0  # bytes of the token that runs on at the end of what was read
        self.offset = 0
        self.grow = 0  # the size of the next read while a token runs on

    def read(self, size: int = -1) -> bytes:
        """Return up to ``size`` bytes (more while a long token runs on; b"" at the end)."""
        if size == 0:
            return b""
        if size is None or size < 0:
            data = self.stream.read()
        elif self.grow <= size:
            data = self.stream.read(size)
        else:  # a long token: read on until the larger size is there (a gzip stream gives a block at a time)
            parts, got = [], 0
            while got < self.grow:
                part = self.stream.read(self.grow - got)
                if not part:
                    break
                parts.append(part)
                got += len(part)
            data = b"".join(parts)
        if data:
            self._scan(data)
            self.grow = 2 * max(len(data), CHUNK) if self.token >= len(data) else 0
            self.offset += len(data)
        return data

    def _scan(self, data: bytes) -> None:
        cls = _CLASS[np.frombuffer(data, dtype=np.uint8)]
        special = np.flatnonzero(cls)
        kinds = cls[special]
        quotes = special[kinds == _QUOTE]
        if len(quotes) and (self.backslashes or data.find(b"\\") >= 0):
            quotes = quotes[~self._escaped(quotes, special[kinds == _BACKSLASH])]
        start_in = self.in_string
        # a quote toggles: the quotes before a byte (and the state the block began in) say whether it is in a string
        brackets = special[(kinds == _OPEN) | (kinds == _CLOSE)]
        if len(brackets):
            inside = (np.searchsorted(quotes, brackets) + start_in) % 2 == 1
            outside = brackets[~inside]
            if len(outside):
                steps = np.where(cls[outside] == _OPEN, 1, -1)
                levels = self.depth + np.cumsum(steps)
                deepest = int(levels.max())
                if deepest > MAX_DEPTH:
                    at = self.offset + int(outside[int(np.argmax(levels > MAX_DEPTH))])
                    raise GpuscopeError(f"{self.path}: arrays and objects nested more than {MAX_DEPTH:,} deep "
                                        f"(at byte {at:,}); not a trace gpuscope can import")
                self.depth = int(levels[-1])
        self.in_string = bool((len(quotes) + start_in) % 2)
        end = len(data)
        if self.in_string:  # the string runs on from its opening quote
            self.token = end - int(quotes[-1]) if len(quotes) else self.token + end
            tail = len(data) - len(data.rstrip(b"\\"))
            self.backslashes = (self.backslashes + tail) if tail == end else tail
        else:  # a number or a word runs on from the last byte of something else
            self.backslashes = 0
            bare = end - len(data.rstrip(_BARE))
            self.token = self.token + end if bare == end else bare

    def _escaped(self, quotes: np.ndarray, backslashes: np.ndarray) -> np.ndarray:
        """Return which of ``quotes`` follow an odd run of backslashes (the run may begin in the
        block before)."""
        out = np.zeros(len(quotes), dtype=bool)
        if not len(backslashes) and not self.backslashes:
            return out
        # the start of the run of backslashes each backslash belongs to
        new_run = np.ones(len(backslashes), dtype=bool)
        new_run[1:] = backslashes[1:] != backslashes[:-1] + 1
        run_start = backslashes[np.maximum.accumulate(np.where(new_run, np.arange(len(backslashes)), 0))]
        k = np.searchsorted(backslashes, quotes) - 1
        ok = k >= 0
        ok[ok] = backslashes[k[ok]] == quotes[ok] - 1
        lengths = np.zeros(len(quotes), dtype=np.int64)
        lengths[ok] = quotes[ok] - run_start[k[ok]]
        carried = ok & (run_start[np.maximum(k, 0)] == 0) | (quotes == 0)
        lengths[carried] += self.backslashes
        out = lengths % 2 == 1
        return out

    def close(self) -> None:
        """Close the stream read."""
        self.stream.close()

    def __enter__(self) -> Guarded:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
    with Guarded(open_trace(path), path) as fh:
        try:
            tokens = ijson.basic_parse(fh, use_float=True)  # reads its first block already
            first = next(tokens, None)
            if first is None or first[0] != "start_map":
                what = "empty" if first is None else f"a JSON {first[0].replace('start_', '')}"
                raise GpuscopeError(f"{path}: not a PyTorch profiler trace (the file is {what}, "
                                    "not an object with traceEvents)")
            key = None
            builder: ijson.ObjectBuilder | None = None
            depth = 0
            for event, value in tokens:
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
    with (open_trace(path) if stream is None else nullcontext(stream)) as raw:
        fh = Guarded(raw, path)
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
