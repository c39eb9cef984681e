"""A Kineto trace's ``traceEvents`` cut into large runs of whole events, for bulk decoding.

The trace is read in blocks of :data:`CHUNK` bytes (gzip decompressed on a background thread, as
:mod:`.kineto_stream` does). Each run ends at the last event boundary of its block: a ``}``, a comma
and a ``{``, preferring those with a line break between them (a line break cannot be inside a JSON
string, and Kineto writes one event per paragraph). A boundary found that way is only a guess; it is
proven when the run decodes as whole events, which fails for a cut inside an event or a string. The
last run is the rest of the file, decoded with the end of the array and the keys after it, so the
whole document's syntax is checked as a streaming parser checks it.

:class:`Resumed` turns the rest of the trace, from the start of a run on, back into a stream of the
JSON text that :mod:`.kineto_stream` parses event by event: the importer's way on for a run that
does not decode (damaged, or cut at a false boundary).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import msgspec

from . import kineto_stream

CHUNK = 8 << 20
_LOOK_BACK = 1 << 16
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BREAK_BOUNDARY = re.compile(rb"\}[ \t\r]*(?:,[ \t\r]*\n|\n\s*,)\s*\{")  # a line break between two events
_STUCK = 8 * CHUNK  # no boundary in this many bytes: parse the rest event by event
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")


@dataclass
class Run:
    """Whole events (``tail``: from an event to the end of the file), as ``text`` or as the bytes
    ``offset`` to ``offset + length`` of a plain file; ``gap``: the bytes between it and the next run."""

    text: bytes | None
    tail: bool
    gap: bytes = b""
    offset: int = 0
    length: int = 0

    def load(self, path: Path) -> bytes:
        """Return the run's text (read from ``path`` where it is a part of the file)."""
        if self.text is not None:
            return self.text
        with open(path, "rb") as fh:
            fh.seek(self.offset)
            return fh.read(self.length)

    def array(self, path: Path) -> bytes | bytearray:
        """Return the run's events as a JSON array, ``[`` + text + ``]`` (not for the tail run):
        a part of a plain file is read straight into the array, without a copy of the text."""
        if self.text is not None:
            return b"[" + self.text + b"]"
        buf = bytearray(self.length + 2)
        with open(path, "rb") as fh:
            fh.seek(self.offset)
            got = fh.readinto(memoryview(buf)[1:-1])
        if got < self.length:  # the file shrank since it was cut: what is there (it will not decode)
            del buf[got + 1:-1]
        buf[0], buf[-1] = 0x5B, 0x5D  # [ and ]
        return buf


class EventRuns:
    """The runs of a trace's ``traceEvents``, read from ``stream`` (already past the ``[``, with
    ``first`` the bytes read after it). A plain file is not read whole here: each cut is looked for
    near a multiple of :data:`CHUNK` and the runs are parts of the file (``at`` is the file offset of
    ``first``); a gzip is read through and the runs carry their text."""

    def __init__(self, stream: IO[bytes], first: bytes, path: Path, at: int | None) -> None:
        self.stream = stream
        self.buffer = first
        self.path = path
        self.at = at
        self.error: BaseException | None = None
        self.stuck = False

    def __iter__(self) -> Iterator[Run]:
        return self._in_file() if self.at is not None else self._in_stream()

    def _in_file(self) -> Iterator[Run]:
        assert self.at is not None
        fh = self.stream
        size = fh.seek(0, 2)
        start = self.at
        while True:
            cut = None
            nominal = start + CHUNK
            window = _LOOK_BACK
            while nominal < size and cut is None:
                fh.seek(nominal)
                data = fh.read(window)
                cut = _first_cut(data)
                if cut is None:
                    if nominal + len(data) >= size:  # the rest of the file is the last run
                        break
                    if window >= _STUCK:
                        self.stuck, self.at = True, start
                        return
                    window *= 4
            if cut is None:
                yield Run(None, True, offset=start, length=size - start)
                return
            end, nxt = nominal + cut[0], nominal + cut[1]
            fh.seek(end)
            gap = fh.read(nxt - end)
            yield Run(None, False, gap, start, end - start)
            start = nxt

    def _in_stream(self) -> Iterator[Run]:
        while True:
            try:
                data = _read(self.stream, CHUNK)
            except (OSError, EOFError) as exc:  # a damaged or truncated gzip: the caller parses what is here
                self.error = exc
                return
            if not data:
                text, self.buffer = self.buffer, b""
                yield Run(text, True)
                return
            buf = self.buffer + data
            cut = _cut(buf)
            if cut is None:
                self.buffer = buf
                if len(buf) > _STUCK:
                    self.stuck = True
                    return
                continue
            end, start = cut
            self.buffer = buf[start:]
            yield Run(buf[:end], False, buf[end:start])

    def rest(self, runs: list[Run]) -> Resumed:
        """The JSON text from ``runs`` (read, not mapped) on to the end of the file, as a trace of
        its own; with no runs, from what was read after the last run on."""
        head = b'{"traceEvents": ['
        if self.at is not None:  # a part of the file: read it again from there
            fh = open(self.path, "rb")
            fh.seek(runs[0].offset if runs else self.at)
            return Resumed(head, fh, None)
        parts = [head]
        for run in runs:
            parts += [run.text or b"", run.gap]
        if not runs or not runs[-1].tail:
            parts.append(self.buffer)
        return Resumed(b"".join(parts), self.stream, self.error)


def _read(stream: IO[bytes], size: int) -> bytes:
    parts = []
    got = 0
    while got < size:
        data = stream.read(size - got)
        if not data:
            break
        parts.append(data)
        got += len(data)
    return b"".join(parts)


def _first_cut(data: bytes) -> tuple[int, int] | None:
    """Return (end of a run, start of the next) at the first likely event boundary of ``data``."""
    for pattern in (_BREAK_BOUNDARY, _BOUNDARY):
        m = pattern.search(data)
        if m is not None:
            return m.start() + 1, m.end() - 1
    return None


def _cut(buf: bytes) -> tuple[int, int] | None:
    """Return (end of the run, start of the next) at the last likely event boundary of ``buf``."""
    for window in (_LOOK_BACK, 1 << 20, len(buf)):
        lo = max(0, len(buf) - window)
        for pattern in (_BREAK_BOUNDARY, _BOUNDARY):
            last = None
            for last in pattern.finditer(buf, lo):
                pass
            if last is not None:
                return last.start() + 1, last.end() - 1
        if lo == 0:
            break
    return None


class Resumed:
    """A byte stream: ``head``, then what ``stream`` still holds, then ``error`` raised (if any)."""

    def __init__(self, head: bytes, stream: IO[bytes], error: BaseException | None) -> None:
        self.head = head
        self.stream = stream
        self.error = error

    def read(self, size: int = -1) -> bytes:
        """Return up to ``size`` bytes (b"" at the end)."""
        if self.head:
            out, self.head = (self.head, b"") if size < 0 or size >= len(self.head) else \
                (self.head[:size], self.head[size:])
            return out
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        return self.stream.read(size)


def event_runs(path: Path, header: dict[str, Any]) -> EventRuns | None:
    """The runs of the trace at ``path``; None where the ``traceEvents`` key is not found at the top
    of the document in its first blocks (a very large header: the caller parses it event by event)."""
    plain = not kineto_stream.is_gzip(path)
    stream = kineto_stream.open_trace(path)
    head = b""
    try:
        while len(head) < 4 * CHUNK:
            data = _read(stream, 1 << 20)
            head += data
            for m in _EVENTS_KEY.finditer(head):
                if _is_top_level(head[:m.start()], header):
                    return EventRuns(stream, head[m.end():], path, m.end() if plain else None)
            if not data:
                break
    except (OSError, EOFError):
        pass
    stream.close()
    return None


def _is_top_level(before: bytes, header: dict[str, Any]) -> bool:
    """Whether the text before a ``"traceEvents"`` key is the start of the document and its header:
    it decodes, closed, as an object with the header's keys."""
    text = before.rstrip()
    if text.endswith(b","):
        text = text[:-1]
    try:
        keys = msgspec.json.decode(text + b"}")
    except msgspec.DecodeError:
        return False
    return isinstance(keys, dict) and set(keys) == set(header) - {"traceEvents"}
