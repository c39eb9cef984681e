"""The server of ``gpuscope view`` against requests no page of its own sends: other hosts and
origins (DNS rebinding), bad query parameters, many connections at once or left silent."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gpuscope.reporters.html import server as srv


class FakeViewer:
    """What the routes ask of a viewer, answering without a report."""

    index = None
    lod: dict[int, Any] = {}

    def content(self, compute: bool = False) -> dict[str, Any]:
        return {"sections": ["secret"]}

    def slice(self, lane: int, i: int) -> dict[str, Any]:
        return {"lane": lane, "i": i}

    def summary(self, t0: int, t1: int) -> dict[str, Any]:
        return {"t0": t0, "t1": t1}


def _start(**kw: Any) -> tuple[srv.PooledHTTPServer, threading.Thread]:
    server = srv.serve("<html>page</html>", [FakeViewer()], 0)  # type: ignore[list-item]
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    return server, t


@pytest.fixture()
def server() -> Iterator[srv.PooledHTTPServer]:
    s, t = _start()
    yield s
    s.shutdown()
    s.server_close()
    t.join(5)


def get(server: srv.PooledHTTPServer, path: str, headers: dict[str, str] | None = None,
        host: str | None = None) -> tuple[int, dict[str, str], bytes]:
    """Return the status, headers and body of GET ``path`` (``host``: the Host header sent)."""
    port = server.server_address[1]
    con = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        con.putrequest("GET", path, skip_host=True)
        con.putheader("Host", host if host is not None else f"127.0.0.1:{port}")
        for k, v in (headers or {}).items():
            con.putheader(k, v)
        con.endheaders()
        r = con.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        con.close()


def test_the_page_and_its_answers_say_nosniff(server: srv.PooledHTTPServer) -> None:
    for path, status in (("/", 200), ("/api/content", 200), ("/nothing", 404), ("/api/window?t0=x", 400)):
        code, headers, _ = get(server, path)
        assert code == status
        assert headers["x-content-type-options"] == "nosniff"


def test_only_this_machines_names_for_the_server_are_answered(server: srv.PooledHTTPServer) -> None:
    port = server.server_address[1]
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", f"LOCALHOST:{port}"):
        code, _, body = get(server, "/api/content", host=host)
        assert code == 200 and b"secret" in body, host
    for host in ("evil.example", f"evil.example:{port}", "127.0.0.1", f"127.0.0.1:{port + 1}", "",
                 f"127.0.0.1.evil.example:{port}"):
        code, headers, body = get(server, "/api/content", host=host)
        assert code == 403 and b"secret" not in body, host
        assert headers["x-content-type-options"] == "nosniff"
    code, _, body = get(server, "/api/content", {"Origin": "http://evil.example"})
    assert code == 403 and b"secret" not in body
    code, _, body = get(server, "/", {"Origin": "null"})
    assert code == 403 and b"<html>" not in body
    code, _, body = get(server, "/api/content", {"Origin": f"http://localhost:{port}"})
    assert code == 200 and b"secret" in body


@pytest.mark.parametrize("query", [
    "/api/window?t0=inf&t1=10", "/api/window?t0=0&t1=nan", "/api/window?t0=0&t1=10&px=inf",
    "/api/window?t0=0&t1=10&px=-5", "/api/window?t0=0&t1=10&px=0", "/api/window?t0=" + "9" * 5000 + "&t1=1",
    "/api/window?t0=1e300&t1=1e301", "/api/window?t0=10&t1=5", "/api/window?t1=5",
    "/api/slice?lane=inf&i=0", "/api/slice?lane=0&i=-1", "/api/slice?lane=0&i=1e30", "/api/slice?lane=x&i=1",
    "/api/summary?t0=-inf&t1=0", "/api/content?side=1", "/api/content?side=-1", "/api/content?side=nan",
    "/api/search?q=" + "a" * 5000,
])
def test_bad_parameters_get_400_and_one_line(server: srv.PooledHTTPServer, query: str,
                                             capfd: pytest.CaptureFixture[str]) -> None:
    code, headers, body = get(server, query)
    assert code == 400, body
    assert headers["content-type"] == "application/json" and len(body) < 200 and b"\\n" not in body
    assert "Traceback" not in capfd.readouterr().err


def test_good_parameters_still_answer(server: srv.PooledHTTPServer) -> None:
    assert get(server, "/api/slice?lane=3&i=7")[2] == b'{"lane":3,"i":7}'
    assert get(server, "/api/summary?t0=-5&t1=12.7")[2] == b'{"t0":-5,"t1":12}'


def test_silent_connections_hold_a_bounded_number_of_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    before = threading.active_count()
    server, t = _start()
    handler = server.RequestHandlerClass
    monkeypatch.setattr(handler, "timeout", 0.2)
    port = server.server_address[1]
    socks = []
    try:
        assert server.request_queue_size >= 128
        for _ in range(3 * srv.WORKERS):  # connections that never send a request
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        time.sleep(0.3)
        assert threading.active_count() <= before + srv.WORKERS + 1
        # silent connections are closed after the timeout, and the server answers again
        deadline = time.monotonic() + 20
        while True:
            try:
                code, _, _ = get(server, "/favicon.ico")
                break
            except OSError:
                assert time.monotonic() < deadline
        assert code == 204
        socks[0].settimeout(10)
        assert socks[0].recv(1) == b""  # closed by the server
    finally:
        for s in socks:
            s.close()
        server.shutdown()
        server.server_close()
        t.join(5)


def test_many_clients_at_once_are_all_answered(server: srv.PooledHTTPServer) -> None:
    failures: list[str] = []

    def client() -> None:
        for _ in range(3):
            try:
                code, _, _ = get(server, "/favicon.ico")
                if code != 204:
                    failures.append(str(code))
            except OSError as exc:
                failures.append(repr(exc))

    threads = [threading.Thread(target=client) for _ in range(60)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    assert failures == []
