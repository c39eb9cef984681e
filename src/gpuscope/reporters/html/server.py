"""The local server of ``gpuscope view``: the page, and its answers from the report.

Routes (GET, JSON but the page): ``/`` the page; ``/api/content[?compute=1]`` the analyses' sections;
``/api/window?t0&t1&px`` the window on screen with level of detail (:mod:`...analysis.timeline_window`);
``/api/slice?lane&i`` one slice's details; ``/api/search?q``; ``/api/summary?t0&t1`` a span's summary.
Times are ns from the timeline's start. Serving two reports side by side (``gpuscope view BASE
NEW``), each route takes ``side=0`` (base, the default) or ``side=1``, and ``/api/diff`` answers
the comparison. The server binds 127.0.0.1 only.
"""

from __future__ import annotations

import json
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, urlparse

from ...analysis.timeline_tracks import TimelineIndex
from ...analysis.timeline_window import counters, window
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
        from ...analysis.timeline_details import details  # pandas and the analyses: on first use, not at start

        with self.lock:
            d = details(self.report, self.index, lane, i)
        if d is not None:
            d["fields"] = [[label, human(v, unit)] for label, v, unit in d["fields"]]
        return d

    def summary(self, t0: int, t1: int) -> dict[str, Any]:
        """Return what ran in a span, its values as text."""
        from ...analysis.timeline_details import span_summary

        s = span_summary(self.index, t0, t1)
        s["busy"] = [[name, f"{100 * b:.1f}%"] for name, b in s["busy"]]
        for key in ("kernels", "ranges"):
            s[key] = [[name, duration(ns), f"{n:,}"] for name, ns, n in s[key]]
        return s


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


def _int(q: dict[str, list[str]], key: str, default: int | None = None) -> int:
    try:
        return int(float(q[key][0]))
    except (KeyError, IndexError, ValueError):
        if default is None:
            raise ValueError(f"missing or bad parameter {key}") from None
        return default


Route = Callable[[dict[str, list[str]]], Any]


def _search(index: TimelineIndex, text: str) -> dict[str, Any]:
    from ...analysis.timeline_details import search

    return search(index, text)


def handler(page: str, viewers: list[Viewer], extra: dict[str, Route] | None = None) -> type[BaseHTTPRequestHandler]:
    """Return the request handler class that serves ``page`` and answers from ``viewers`` (one per
    side) and the ``extra`` routes."""

    def side(q: dict[str, list[str]]) -> Viewer:
        k = _int(q, "side", 0)
        if not 0 <= k < len(viewers):
            raise ValueError(f"no side {k}")
        return viewers[k]

    routes: dict[str, Route] = {
        "/api/content": lambda q: side(q).content(q.get("compute") == ["1"]),
        "/api/window": lambda q: {
            **window(side(q).index, _int(q, "t0"), _int(q, "t1"), _int(q, "px", 1000)),
            "counters": counters(side(q).index, _int(q, "t0"), _int(q, "t1"), _int(q, "px", 1000))},
        "/api/slice": lambda q: side(q).slice(_int(q, "lane"), _int(q, "i")),
        "/api/search": lambda q: _search(side(q).index, q.get("q", [""])[0]),
        "/api/summary": lambda q: side(q).summary(_int(q, "t0"), _int(q, "t1")),
        **(extra or {}),
    }

    page_bytes = page.encode()

    class Handler(BaseHTTPRequestHandler):
        server_version = "gpuscope"

        def do_GET(self) -> None:  # noqa: N802 (the http.server name)
            url = urlparse(self.path)
            if url.path in ("/", "/index.html"):
                return self._send(HTTPStatus.OK, page_bytes, "text/html; charset=utf-8")
            if url.path == "/favicon.ico":
                return self._send(HTTPStatus.NO_CONTENT, b"", "image/x-icon")
            route = routes.get(url.path)
            if route is None:
                return self._json(HTTPStatus.NOT_FOUND, {"error": "no such page"})
            try:
                body = route(parse_qs(url.query))
            except ValueError as exc:
                return self._json(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
            except GpuscopeError as exc:
                return self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": str(exc)})
            if body is None:
                return self._json(HTTPStatus.NOT_FOUND, {"error": "no such slice"})
            self._json(HTTPStatus.OK, body)

        def _json(self, status: HTTPStatus, body: Any) -> None:
            self._send(status, json.dumps(body, separators=(",", ":"), default=str).encode(), "application/json")

        def _send(self, status: HTTPStatus, data: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
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


def serve(page: str, viewers: list[Viewer], port: int, extra: dict[str, Route] | None = None) -> ThreadingHTTPServer:
    """Return a server of ``page`` and ``viewers`` (see :func:`handler`) bound to 127.0.0.1:``port``
    (0: a free port); GpuscopeError when the port is taken or not allowed."""
    try:
        server = ThreadingHTTPServer(("127.0.0.1", port), handler(page, viewers, extra))
    except OSError as exc:
        what = "is in use" if exc.errno in (98, 48, 10048) else f"cannot be used ({exc.strerror})"
        raise GpuscopeError(f"port {port} on 127.0.0.1 {what}: choose another with --port, or leave "
                            "--port out for a free one") from None
    server.daemon_threads = True
    return server


def url_of(server: ThreadingHTTPServer) -> str:
    """Return the address people open."""
    host, port = server.server_address[:2]
    return f"http://{host}:{port}/"
