"""The local server of ``gpuscope view``: the page, and its answers from the report.

Routes (GET, JSON but the page): ``/`` the page; ``/api/content[?compute=1]`` the analyses' sections;
``/api/window?t0&t1&px[&bin=1]`` the window on screen with level of detail
(:mod:`...analysis.timeline.window`, from the pyramid of :mod:`...analysis.timeline.lod` once read
or built; ``bin=1``: in the binary form of :mod:`.window_bin`; a request whose connection the page
has closed, cancelling it, is not computed); each answer's ``Server-Timing`` header says how long
its query and its encoding took;
``/api/slice?lane&i`` one slice's details; ``/api/search?q``; ``/api/summary?t0&t1`` a span's summary.
Times are ns from the timeline's start. Connections stay open (HTTP/1.1, no Nagle delay).
Serving two reports side by side (``gpuscope view BASE NEW``), each route takes ``side=0`` (base,
the default) or ``side=1``, and ``/api/diff`` answers the comparison. The server binds 127.0.0.1 only.

What it accepts: a request whose Host (and Origin, where it has one) names 127.0.0.1, localhost or
[::1] with the server's port, else 403 (a page of another site reaching it through a name that
resolves here); parameters that are finite numbers of at most 32 characters within their bounds
(times within 2^61 ns, ``t0 <= t1``, ``px`` 1 to 100,000, an existing side), a search of at most
1,000 characters, else 400 with one line. Every answer says ``X-Content-Type-Options: nosniff``.
Connections are served by a pool of :data:`WORKERS` threads (more wait, up to :data:`PENDING`) and
closed after :data:`IDLE_TIMEOUT_S` of silence.
"""

from __future__ import annotations

import json
import math
import os
import queue
import socket
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, urlparse

from ...analysis.timeline.tracks import TimelineIndex
from ...analysis.timeline.window import counters, window
from . import window_bin
from ...errors import GpuscopeError
from ...trace.report import Report
from ...units import duration, human


class Viewer:
    """What the server answers about one report: from the report (one query at a time) and its index."""

    def __init__(self, report: Report, index: TimelineIndex, content_cap: int,
                 key: dict[str, int] | None = None) -> None:
        self.report, self.index = report, index
        self.lock = threading.Lock()
        self._content: dict[str, Any] | None = None
        self._ready = threading.Event()
        self._started = False
        self.content_cap = content_cap
        self.key = key  # the report's key when it was opened: derived files are kept under it (None: not kept)
        self.lod: dict[int, Any] = {}  # the lanes' levels of detail, once read or built (timeline_lod)

    def start_lod(self) -> None:
        """Read the levels of detail kept beside the report, else build them in the background
        (seconds on ten million slices; windows are computed from the slices until then) and keep them."""
        from ...analysis.timeline import lod as timeline_lod

        found = timeline_lod.cached(self.report.path) if self.key is not None else None
        if found is not None:
            self.lod = found
            return
        threading.Thread(target=self._build_lod, name="gpuscope-lod", daemon=True).start()

    def _build_lod(self) -> None:
        from ...analysis.timeline import lod as timeline_lod

        background_priority()
        try:
            built = timeline_lod.build(self.index)
        except Exception as exc:  # the windows are computed from the slices, as before
            print(f"gpuscope: warning: the timeline's levels of detail failed: {exc}", file=sys.stderr)
            return
        self.lod = built
        if self.key is not None and built:
            timeline_lod.keep(self.report.path, built, self.key)

    def start_content(self) -> None:
        """Compute the analyses' sections in the background (they take seconds on a large report),
        unless that has begun already."""
        with self.lock:
            if self._started:
                return
            self._started = True
        threading.Thread(target=self._compute, name="gpuscope-content", daemon=True).start()

    def _compute(self) -> None:
        from . import content_job, sections

        path, origin = self.report.path, self.index.start_ns
        try:
            found = content_job.cached(path) if self.key is not None else None
            if found is not None:
                self._content = found
            else:
                if self.index.events() > self.content_cap:  # minutes and gigabytes: a process of its own
                    self._content = content_job.in_child(path, origin)
                else:
                    with Report.open(path) as own:  # a connection of this thread's own
                        self._content = sections(own, origin)
                if self.key is not None:
                    content_job.keep(path, self.key, self._content)
        except GpuscopeError as exc:
            self._content = {"too_large": str(exc)}
        except Exception as exc:  # the page says what failed; the timeline keeps working
            self._content = {"too_large": f"the analyses failed: {type(exc).__name__}: {exc}"}
            print(f"gpuscope: warning: the analyses failed: {exc}", file=sys.stderr)
        self._ready.set()

    def content(self, compute: bool = False) -> dict[str, Any]:
        """Return the analyses' sections (waiting for them; started here if they were not). Those
        of a report above the cap that were not kept are computed only when ``compute`` asks: until
        then the answer is ``{"lazy": what it would take}``."""
        if not compute and not self._started and self.index.events() > self.content_cap:
            from . import content_job

            found = content_job.cached(self.report.path) if self.key is not None else None
            if found is not None:
                return found
            return {"lazy": f"{self.index.events():,} timeline slices: on a report this large the tables, findings, "
                            "roofline and step marks take minutes and several GB of memory to compute (as gpuscope "
                            "stats and analyze do). They are computed once, in a process of their own while the "
                            "timeline stays live, and kept beside the report for later views."}
        self.start_content()
        self._ready.wait()
        assert self._content is not None
        return self._content

    def slice(self, lane: int, i: int) -> dict[str, Any] | None:
        """Return one slice's details, their values as text."""
        from ...analysis.timeline.details import details  # pandas and the analyses: on first use, not at start

        with self.lock:
            d = details(self.report, self.index, lane, i)
        if d is not None:
            d["fields"] = [[label, human(v, unit)] for label, v, unit in d["fields"]]
        return d

    def summary(self, t0: int, t1: int) -> dict[str, Any]:
        """Return what ran in a span, its values as text."""
        from ...analysis.timeline.details import span_summary

        s = span_summary(self.index, t0, t1)
        s["busy"] = [[name, f"{100 * b:.1f}%"] for name, b in s["busy"]]
        for key in ("kernels", "ranges"):
            s[key] = [[name, duration(ns), f"{n:,}"] for name, ns, n in s[key]]
        return s


def background_priority() -> None:
    """Lower the calling thread's scheduling priority (Linux, where threads have their own), so
    that work in the background yields the processor to the page's requests."""
    if sys.platform.startswith("linux"):
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        except OSError as exc:  # not allowed here: the work runs at the server's priority
            print(f"gpuscope: note: background work at normal priority ({exc.strerror})", file=sys.stderr)


class Once:
    """A value computed once, in the background, by ``fn``; :meth:`get` waits for it. A failure
    becomes ``{"error": one line}`` (the page shows it; the server goes on)."""

    def __init__(self, fn: Callable[[], dict[str, Any]], name: str) -> None:
        self._fn = fn
        self._value: dict[str, Any] | None = None
        self._ready = threading.Event()
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def _run(self) -> None:
        try:
            self._value = self._fn()
        except GpuscopeError as exc:
            self._value = {"error": str(exc)}
        except Exception as exc:  # the page says what failed; the timelines keep working
            self._value = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"gpuscope: warning: {type(exc).__name__}: {exc}", file=sys.stderr)
        self._ready.set()

    def get(self) -> dict[str, Any]:
        """Return the value, once computed."""
        self._ready.wait()
        assert self._value is not None
        return self._value


# What a query parameter may be: at most MAX_PARAM characters, a finite number within its bounds.
MAX_PARAM = 32
TIME_LIMIT = 1 << 61  # ns from the timeline's start, either way (73 years): sums with a clock stay in int64
MAX_PX = 100_000
MAX_SEARCH = 1000  # characters of /api/search's text


def _int(q: dict[str, list[str]], key: str, default: int | None = None, lo: int = -TIME_LIMIT,
         hi: int = TIME_LIMIT) -> int:
    """Return the query parameter ``key`` as an integer (a decimal number, its fraction cut off),
    or ``default`` where it is absent; ValueError (a 400 answer) where it is absent without a
    default, too long, not a finite number, or outside [``lo``, ``hi``]."""
    values = q.get(key)
    if not values:
        if default is None:
            raise ValueError(f"missing parameter {key}")
        return default
    text = values[0].strip()
    if len(text) > MAX_PARAM:
        raise ValueError(f"parameter {key}: more than {MAX_PARAM} characters")
    try:
        number = float(text)
    except ValueError:
        raise ValueError(f"parameter {key}: not a number") from None
    if not math.isfinite(number) or not lo <= number <= hi:
        raise ValueError(f"parameter {key}: not between {lo} and {hi}")
    return int(number)


def _span(q: dict[str, list[str]]) -> tuple[int, int]:
    """Return the parameters ``t0`` and ``t1`` (ValueError unless ``t0 <= t1``)."""
    t0, t1 = _int(q, "t0"), _int(q, "t1")
    if t1 < t0:
        raise ValueError("parameter t1: before t0")
    return t0, t1


def _text(q: dict[str, list[str]], key: str) -> str:
    """Return the query parameter ``key`` as text ("" where absent; ValueError when too long)."""
    text = q.get(key, [""])[0]
    if len(text) > MAX_SEARCH:
        raise ValueError(f"parameter {key}: more than {MAX_SEARCH} characters")
    return text


Route = Callable[[dict[str, list[str]]], Any]


class WindowAnswer:
    """A window whose lanes hold numpy arrays: sent in the binary form when ``as_bytes`` (the
    page asks so: :mod:`.window_bin`), else as JSON."""

    def __init__(self, value: dict[str, Any], as_bytes: bool) -> None:
        self.value, self.as_bytes = value, as_bytes


def _lists(answer: dict[str, Any]) -> dict[str, Any]:
    lanes = [{k: v.tolist() if hasattr(v, "tolist") else v for k, v in w.items()} for w in answer["lanes"]]
    return {**answer, "lanes": lanes}


def _search(index: TimelineIndex, text: str) -> dict[str, Any]:
    from ...analysis.timeline.details import search

    return search(index, text)


def handler(page: str, viewers: list[Viewer], extra: dict[str, Route] | None = None) -> type[BaseHTTPRequestHandler]:
    """Return the request handler class that serves ``page`` and answers from ``viewers`` (one per
    side) and the ``extra`` routes."""

    def side(q: dict[str, list[str]]) -> Viewer:
        return viewers[_int(q, "side", 0, 0, len(viewers) - 1)]

    def window_answer(q: dict[str, list[str]]) -> WindowAnswer:
        v = side(q)
        (t0, t1), px = _span(q), _int(q, "px", 1000, 1, MAX_PX)
        return WindowAnswer({**window(v.index, t0, t1, px, lod=v.lod, arrays=True),
                             "counters": counters(v.index, t0, t1, px)}, as_bytes=q.get("bin") == ["1"])

    routes: dict[str, Route] = {
        "/api/content": lambda q: side(q).content(q.get("compute") == ["1"]),
        "/api/window": window_answer,
        "/api/slice": lambda q: side(q).slice(_int(q, "lane", lo=0), _int(q, "i", lo=0)),
        "/api/search": lambda q: _search(side(q).index, _text(q, "q")),
        "/api/summary": lambda q: side(q).summary(*_span(q)),
        **(extra or {}),
    }

    page_bytes = page.encode()

    class Handler(BaseHTTPRequestHandler):
        server_version = "gpuscope"
        protocol_version = "HTTP/1.1"  # connections kept open: a zoom does not wait for a new one
        disable_nagle_algorithm = True  # on an open connection an answer's last bytes would wait for an ACK
        timeout = IDLE_TIMEOUT_S  # a connection silent this long is closed, its worker freed

        def do_GET(self) -> None:  # noqa: N802 (the http.server name)
            refused = self._refused()
            if refused is not None:
                self.close_connection = True
                return self._json(HTTPStatus.FORBIDDEN, {"error": refused})
            url = urlparse(self.path)
            if url.path in ("/", "/index.html"):
                return self._send(HTTPStatus.OK, page_bytes, "text/html; charset=utf-8")
            if url.path == "/favicon.ico":
                return self._send(HTTPStatus.NO_CONTENT, b"", "image/x-icon")
            route = routes.get(url.path)
            if route is None:
                return self._json(HTTPStatus.NOT_FOUND, {"error": "no such page"})
            if url.path == "/api/window" and self._gone():
                self.close_connection = True  # a window the page no longer wants: not computed
                return
            started = time.perf_counter()
            try:
                body = route(parse_qs(url.query))
            except ValueError as exc:
                return self._json(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
            except GpuscopeError as exc:
                return self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": str(exc)})
            except Exception as exc:  # one line for the page; the server goes on
                return self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"{type(exc).__name__}: {exc}"[:300]})
            if body is None:
                return self._json(HTTPStatus.NOT_FOUND, {"error": "no such slice"})
            if isinstance(body, WindowAnswer):
                return self._window(body, started)
            self._json(HTTPStatus.OK, body, started)

        def _window(self, body: WindowAnswer, started: float) -> None:
            answered = time.perf_counter()
            if body.as_bytes:
                data, kind = window_bin.encode(body.value), "application/octet-stream"
            else:
                data, kind = json.dumps(_lists(body.value), separators=(",", ":")).encode(), "application/json"
            self._send(HTTPStatus.OK, data, kind, (answered - started, time.perf_counter() - answered))

        def _refused(self) -> str | None:
            """Return why the request is refused (None: answered): its Host, and its Origin where it
            has one, must name this server as 127.0.0.1, localhost or [::1] with its port, so that
            no other site's page reaches it through a name that resolves here (DNS rebinding)."""
            port = self.server.server_address[1]
            allowed = local_hosts(port)
            host = self.headers.get("Host")
            if host is None or host.strip().lower() not in allowed:
                return f"this server answers only http://127.0.0.1:{port}/ (the request's Host is not it)"
            origin = self.headers.get("Origin")
            if origin is not None and origin.strip().lower() not in {f"http://{h}" for h in allowed}:
                return f"this server answers only pages of http://127.0.0.1:{port}/ (the request's Origin is not it)"
            return None

        def end_headers(self) -> None:
            self.send_header("X-Content-Type-Options", "nosniff")  # every answer, errors included
            super().end_headers()

        def _gone(self) -> bool:
            """Return True when the page has closed the connection (it cancelled this request)."""
            sock = self.connection
            timeout = sock.gettimeout()
            try:
                sock.setblocking(False)
                return sock.recv(1, socket.MSG_PEEK) == b""  # end of stream: closed
            except BlockingIOError:
                return False  # open, and nothing more sent
            except OSError:
                return True
            finally:
                try:
                    sock.settimeout(timeout)
                except OSError:
                    pass  # closed meanwhile: the answer's write says so

        def _json(self, status: HTTPStatus, body: Any, started: float | None = None) -> None:
            answered = time.perf_counter()
            data = json.dumps(body, separators=(",", ":"), default=str).encode()
            timing = None if started is None else (answered - started, time.perf_counter() - answered)
            self._send(status, data, "application/json", timing)

        def _send(self, status: HTTPStatus, data: bytes, kind: str, timing: tuple[float, float] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            if timing is not None:  # the page's performance entries show them (serverTiming)
                self.send_header("Server-Timing", f"query;dur={timing[0] * 1e3:.2f}, encode;dur={timing[1] * 1e3:.2f}")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            try:
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the browser moved on (a newer window asked for)

        def log_message(self, format: str, *args: Any) -> None:  # quiet: one line per request is noise
            pass

    return Handler


IDLE_TIMEOUT_S = 20.0  # a connection that sends nothing (or nothing more) for this long is closed
WORKERS = 16  # connections served at once; more wait for a worker
PENDING = 256  # connections accepted and waiting for a worker; more are closed at once
BACKLOG = 256  # connections the system holds before they are accepted


def local_hosts(port: int) -> set[str]:
    """Return the Host values that name this machine's loopback at ``port`` (lower case)."""
    names = ("127.0.0.1", "localhost", "[::1]")
    return {f"{n}:{port}" for n in names} | (set(names) if port == 80 else set())


class PooledHTTPServer(HTTPServer):
    """An HTTP server whose connections are served by a fixed pool of threads: at most
    :data:`WORKERS` at once, :data:`PENDING` more waiting (the rest are closed when accepted), each
    closed after :data:`IDLE_TIMEOUT_S` of silence (the handler's ``timeout``)."""

    request_queue_size = BACKLOG
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler_class: type[BaseHTTPRequestHandler],
                 workers: int = WORKERS, pending: int = PENDING) -> None:
        self._pending: queue.Queue[tuple[Any, Any] | None] = queue.Queue(maxsize=pending)
        self._workers: list[threading.Thread] = []  # started once the port is bound
        super().__init__(address, handler_class)
        self._workers = [threading.Thread(target=self._work, name=f"gpuscope-http-{k}", daemon=True)
                         for k in range(workers)]
        for t in self._workers:
            t.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        """Hand the connection to a worker, or close it when too many wait already."""
        try:
            self._pending.put_nowait((request, client_address))
        except queue.Full:
            self.shutdown_request(request)

    def _work(self) -> None:
        while True:
            item = self._pending.get()
            if item is None:
                return
            request, client_address = item
            try:
                self.finish_request(request, client_address)
            except Exception:
                self.handle_error(request, client_address)
            finally:
                self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Say nothing: a connection that failed (reset, timed out) concerns only its client."""

    def server_close(self) -> None:
        """Close the listening socket and let the workers end once the connections they serve end."""
        super().server_close()
        for _ in self._workers:
            try:
                self._pending.put_nowait(None)
            except queue.Full:
                break


def serve(page: str, viewers: list[Viewer], port: int, extra: dict[str, Route] | None = None) -> PooledHTTPServer:
    """Return a server of ``page`` and ``viewers`` (see :func:`handler`) bound to 127.0.0.1:``port``
    (0: a free port); GpuscopeError when the port is taken or not allowed."""
    try:
        server = PooledHTTPServer(("127.0.0.1", port), handler(page, viewers, extra))
    except OSError as exc:
        what = "is in use" if exc.errno in (98, 48, 10048) else f"cannot be used ({exc.strerror})"
        raise GpuscopeError(f"port {port} on 127.0.0.1 {what}: choose another with --port, or leave "
                            "--port out for a free one") from None
    return server


def url_of(server: HTTPServer) -> str:
    """Return the address people open."""
    host, port = server.server_address[:2]
    return f"http://{host}:{port}/"
