"""``gpuscope report`` and ``gpuscope view`` as a user runs them: the file, its data, the server's
answers, a run past the slices a file holds, and the one-line errors (a port in use, a damaged report)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
from pathlib import Path
from typing import Callable

import duckdb
import pytest

from .html_pages import Gpuscope, IMG_NAME, SCRIPT_NAME, View, markup_names_report, page_data


@pytest.fixture(scope="module")
def adam(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict]:
    """The recorded MLP + Adam training report, its page and the page's data."""
    from conftest import unpack_fixture

    d = tmp_path_factory.mktemp("adam")
    report = unpack_fixture("program_mlp_adam", d)
    res = Gpuscope(d).run("report", report.name)
    assert res.returncode == 0, res.describe()
    assert res.own_lines == [l for l in res.own_lines if "wrote program_mlp_adam.html" in l], res.describe()
    html = (d / "program_mlp_adam.html").read_text()
    return report, html, page_data(html)


def test_the_file_fetches_nothing(adam: tuple[Path, str, dict]) -> None:
    """Every script and style is inline: no src=, no link, no url() and no address to load."""
    _, html, _ = adam
    assert not re.search(r"<(script|img|iframe)[^>]*\ssrc=", html, re.I)
    assert not re.search(r"<link\b", html, re.I)
    assert "url(" not in html.split('id="gpuscope-data"')[0]
    assert "sourceMappingURL" not in html


def test_the_tables_are_those_of_stats(adam: tuple[Path, str, dict]) -> None:
    """Every stats report is in the page, with the raw values ``gpuscope stats -f json`` gives."""
    report, _, data = adam
    res = Gpuscope(report.parent).run("stats", report.name, "-f", "json")
    assert res.returncode == 0, res.describe()
    stats = json.loads(res.stdout)
    tables = {t["name"]: t for t in data["content"]["tables"]}
    assert list(tables) == list(stats)
    for name, expected in stats.items():
        rows = [[cell[0] for cell in row] for row in tables[name]["rows"]]
        want = [list(r.values()) for r in expected["rows"]]
        assert sorted(map(repr, rows)) == sorted(map(repr, want)), name  # rows that tie may come in either order
    top = tables["cuda_gpu_kern_sum"]["rows"][0]
    assert "gemm" in top[-1][1]


def test_the_findings_are_those_of_analyze(adam: tuple[Path, str, dict]) -> None:
    report, _, data = adam
    res = Gpuscope(report.parent).run("analyze", report.name, "-f", "json")
    expected = json.loads(res.stdout)["findings"]
    found = data["content"]["diagnosis"]["findings"]
    assert [(f["rule"], f["title"], f["saving_ns"]) for f in found] == \
        [(f["rule"], f["title"], f["saving_ns"]) for f in expected]
    assert all(f["target"] and f["target"]["end"] > f["target"]["start"] for f in found)


def test_the_file_timeline_holds_every_slice_of_a_small_report(adam: tuple[Path, str, dict]) -> None:
    report, _, data = adam
    tl = data["timeline"]
    con = duckdb.connect(str(report), read_only=True)
    kernels = con.execute("SELECT count(*) FROM kernel").fetchone()[0]
    con.close()
    gpu = [t for t in tl["tracks"] if t["group"].startswith("GPU 0")]
    lanes = {w["lane"]: w for w in tl["static"]["lanes"]}
    drawn = sum(len(lanes[i]["start"]) for t in gpu for i in t["lanes"])
    assert all(lanes[i]["kind"] == "slices" for t in gpu for i in t["lanes"])
    assert drawn == kernels + 16  # the kernels and the 16 memcpys
    assert len(tl["steps"]) == 600


def test_a_run_past_the_slices_a_file_holds_keeps_every_table_and_says_so(adam: tuple[Path, str, dict],
                                                                           tmp_path: Path) -> None:
    """Past --max-events slices, the file keeps every section; its timeline holds the lanes that fit
    whole, draws the others as summaries, and the run section says so and points to the viewer."""
    report, _, full = adam
    res = Gpuscope(tmp_path).run("report", str(report), "--max-events", "1000", "-o", "small.html")
    assert res.returncode == 0, res.describe()
    data = page_data((tmp_path / "small.html").read_text())
    lanes = data["timeline"]["static"]["lanes"]
    whole = sum(len(w["start"]) for w in lanes if w["kind"] == "slices")
    assert 0 < whole <= 1000 and any(w["kind"] == "buckets" for w in lanes)
    (note,) = data["content"]["run"]["detail"]
    assert "84,722 slices" in note and f"{whole:,} of them" in note and "gpuscope view" in note  # the flame strip: 31,849 slices for 4,711 samples
    assert [t["name"] for t in data["content"]["tables"]] == [t["name"] for t in full["content"]["tables"]]
    assert data["content"]["diagnosis"]["findings"] == full["content"]["diagnosis"]["findings"]
    assert "detail" not in full["content"]["run"]  # the default budget holds this run whole


def test_an_existing_file_is_kept_unless_told(tmp_path: Path) -> None:
    gs = Gpuscope(tmp_path)
    report = markup_names_report(tmp_path / "names.gpuscope")
    (tmp_path / "out.html").write_text("mine")
    res = gs.run("report", report.name, "-o", "out.html")
    assert res.returncode == 2 and "exists" in res.stderr and (tmp_path / "out.html").read_text() == "mine"
    res = gs.run("report", report.name, "-o", "out.html", "--force-overwrite")
    assert res.returncode == 0, res.describe()


def test_names_are_never_markup_in_the_file(tmp_path: Path) -> None:
    """A name that is HTML is escaped inside the data element and nowhere else in the page."""
    report = markup_names_report(tmp_path / "names.gpuscope")
    res = Gpuscope(tmp_path).run("report", report.name)
    assert res.returncode == 0, res.describe()
    html = (tmp_path / "names.html").read_text()
    assert "__pwned" in html  # the names are there...
    assert SCRIPT_NAME not in html and IMG_NAME not in html and "<img" not in html  # ...but never as markup
    data = page_data(html)
    assert SCRIPT_NAME in data["timeline"]["names"] and IMG_NAME in data["timeline"]["names"]


def _truncated(d: Path, real: Path) -> str:
    data = real.read_bytes()
    (d / "truncated.gpuscope").write_bytes(data[: len(data) // 2])
    return "truncated.gpuscope"


def _random(d: Path, real: Path) -> str:
    (d / "random.gpuscope").write_bytes(os.urandom(64 * 1024))
    return "random.gpuscope"


@pytest.mark.parametrize("make", [_truncated, _random], ids=["truncated", "random-bytes"])
def test_a_damaged_report_gives_the_line_stats_gives(adam: tuple[Path, str, dict], tmp_path: Path,
                                                     make: Callable[[Path, Path], str]) -> None:
    name = make(tmp_path, adam[0])
    gs = Gpuscope(tmp_path)
    procs = {cmd: gs.start(cmd, name, *extra) for cmd, extra in
             (("stats", ()), ("report", ()), ("view", ("--no-browser",)))}
    from .conftest import finish

    results = {cmd: finish(p, (cmd, name)) for cmd, p in procs.items()}
    expected = results["stats"].stderr_lines
    assert len(expected) == 1 and expected[0].startswith("gpuscope: error:"), results["stats"].describe()
    for cmd in ("report", "view"):
        assert results[cmd].returncode == 2 and results[cmd].stderr_lines == expected, results[cmd].describe()
    assert not list(tmp_path.glob("*.html"))


def test_view_on_a_port_in_use_is_one_line_and_exit_2(adam: tuple[Path, str, dict], tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        res = Gpuscope(tmp_path).run("view", str(adam[0]), "--no-browser", "--port", str(port))
    assert res.returncode == 2, res.describe()
    assert res.errors == res.stderr_lines and len(res.errors) == 1 and f"port {port}" in res.errors[0]


def test_view_answers_a_window_with_the_reports_slices(adam: tuple[Path, str, dict], tmp_path: Path) -> None:
    report = tmp_path / "r.gpuscope"
    shutil.copyfile(adam[0], report)
    view = View(Gpuscope(tmp_path), report)
    try:
        page = page_data(urllib_text(view.url))
        tl = page["timeline"]
        assert page["mode"] == "server" and "content" not in page and "static" not in tl
        [gpu] = [t for t in tl["tracks"] if t["group"].startswith("GPU 0")]
        con = duckdb.connect(str(report), read_only=True)
        lo = tl["start_ns"]
        rows = con.execute("SELECT start_ns, end_ns FROM kernel ORDER BY start_ns LIMIT 20 OFFSET 20000").fetchall()
        con.close()
        t0, t1 = rows[0][0] - lo, rows[-1][0] - lo  # a window of 19 kernels and the start of the 20th
        w = view.get(f"/api/window?t0={t0}&t1={t1 + 1}&px=800")
        [lane] = [x for x in w["lanes"] if x["lane"] == gpu["lanes"][0]]
        assert lane["kind"] == "slices"
        assert [(s + lo, e + lo) for s, e in zip(lane["start"], lane["end"])] == [tuple(r) for r in rows]
        whole = view.get(f"/api/window?t0=0&t1={tl['end_ns'] - lo}&px=400")
        [zoomed_out] = [x for x in whole["lanes"] if x["lane"] == gpu["lanes"][0]]
        assert zoomed_out["kind"] == "buckets" and sum(zoomed_out["count"]) > 40_000
        d = view.get(f"/api/slice?lane={gpu['lanes'][0]}&i={lane['first']}")
        assert d["start"] + lo == rows[0][0] and dict(d["fields"])["Grid"]
        content = view.get("/api/content")
        assert [t["name"] for t in content["tables"]][0] == "cuda_gpu_kern_sum"
    finally:
        view.stop()


def test_view_keeps_the_connection_open_and_says_where_a_windows_time_went(adam: tuple[Path, str, dict],
                                                                            tmp_path: Path) -> None:
    import http.client
    import urllib.request
    from urllib.parse import urlparse

    from gpuscope.reporters.html import window_bin

    report = tmp_path / "r.gpuscope"
    shutil.copyfile(adam[0], report)
    view = View(Gpuscope(tmp_path), report)
    try:
        tl = page_data(urllib_text(view.url))["timeline"]
        span = tl["end_ns"] - tl["start_ns"]
        u = urlparse(view.url)
        con = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
        answers, socks = [], []
        for t0, t1 in ((0, span), (span // 2, span // 2 + 200_000)):
            con.request("GET", f"/api/window?t0={t0}&t1={t1}&px=500")
            r = con.getresponse()
            body = json.loads(r.read())
            assert r.status == 200 and r.version == 11
            timing = dict(part.strip().split(";dur=") for part in r.getheader("Server-Timing").split(","))
            assert set(timing) == {"query", "encode"} and all(float(v) >= 0 for v in timing.values())
            answers.append(body)
            socks.append(con.sock)
        con.close()
        assert socks[0] is not None and socks[0] is socks[1]  # one connection for both windows
        assert answers[0] == view.get(f"/api/window?t0=0&t1={span}&px=500")
        # a window asked for on a connection the asker then closed (a cancelled fetch) gets no answer;
        # the same request on an open connection does, and the server goes on serving
        request = f"GET /api/window?t0=0&t1={span}&px=500 HTTP/1.1\r\nHost: 127.0.0.1:{u.port}\r\n\r\n".encode()
        for cancel in (True, False):
            with socket.create_connection((u.hostname, u.port), timeout=60) as s:
                if cancel:  # the request and the close in one segment: the server sees both at once
                    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
                s.sendall(request)
                if cancel:
                    s.shutdown(socket.SHUT_WR)
                got = s.recv(100)
            assert (got == b"") == cancel and (cancel or got.startswith(b"HTTP/1.1 200"))
        # the binary form the page asks for holds the same answer, in fewer bytes
        for t0, t1 in ((0, span), (span // 2, span // 2 + 200_000)):
            with urllib.request.urlopen(f"{view.url}api/window?t0={t0}&t1={t1}&px=500&bin=1", timeout=60) as r:
                data = r.read()
                assert r.headers["Content-Type"] == "application/octet-stream"
            assert window_bin.decode(data) == view.get(f"/api/window?t0={t0}&t1={t1}&px=500")
            assert len(data) < len(json.dumps(view.get(f"/api/window?t0={t0}&t1={t1}&px=500")))
    finally:
        view.stop()


def test_a_second_view_starts_from_what_the_first_kept(adam: tuple[Path, str, dict], tmp_path: Path) -> None:
    import time

    report = tmp_path / "r.gpuscope"
    shutil.copyfile(adam[0], report)
    kept = tmp_path / "r.gpuscope.cache"
    answers, said = [], []
    for flags in ((), (), ("--no-cache",)):
        view = View(Gpuscope(tmp_path), report, flags=flags)
        try:
            tl = page_data(urllib_text(view.url))["timeline"]
            span = tl["end_ns"] - tl["start_ns"]
            answers.append((view.get(f"/api/window?t0=0&t1={span}&px=300"),
                            view.get(f"/api/window?t0={span // 2}&t1={span // 2 + 200_000}&px=300"),
                            view.get("/api/content")["tables"]))
            deadline = time.monotonic() + 60
            while not (kept / "timeline.bin").exists() and not flags and time.monotonic() < deadline:
                time.sleep(0.2)
        finally:
            view.stop()
        said.append(view.proc.stderr.read())  # type: ignore[union-attr]
    assert "gpuscope: indexed " in said[0] and "read the kept timeline index of" in said[1]
    assert "gpuscope: indexed " in said[2]
    assert sorted(p.name for p in kept.iterdir()) == ["content.json", "timeline.bin"]
    assert answers[0] == answers[1] == answers[2]
    assert any(w["kind"] == "slices" for w in answers[0][1]["lanes"])


def urllib_text(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=60) as r:
        return r.read().decode()


def test_view_of_two_reports_answers_each_side_and_their_comparison(tmp_path: Path) -> None:
    from .html_pages import training_run

    base = training_run(tmp_path / "base.gpuscope", seed=1)
    new = training_run(tmp_path / "new.gpuscope", seed=2, slow_ms=6)
    res = Gpuscope(tmp_path).run("view", str(base), str(new), str(base), "--no-browser")
    assert res.returncode == 2 and len(res.errors) == 1 and "give one report, two to compare" in res.errors[0], res.describe()
    view = View(Gpuscope(tmp_path), base, new)
    try:
        page = page_data(urllib_text(view.url))
        assert page["mode"] == "diff" and page["labels"] == ["base.gpuscope", "new.gpuscope"]
        ends = []
        for side in (0, 1):
            tl = page["timelines"][side]
            w = view.get(f"/api/window?side={side}&t0=0&t1={tl['end_ns'] - tl['start_ns']}&px=2000")
            names = set(w["names"].values())
            assert (SCRIPT_NAME in names) == (side == 1)
            ends.append(tl["end_ns"] - tl["start_ns"])
        assert ends[1] > ends[0]  # the new run is slower by 6 ms a step
        with pytest.raises(Exception, match="400"):
            view.get("/api/window?side=2&t0=0&t1=10&px=10")
        c = view.get("/api/diff")
        json_out = json.loads(Gpuscope(tmp_path).run("diff", str(base), str(new), "-f", "json").stdout)
        assert c["step"] == json_out["step_time"] and c["sides"] == [json_out["base"][0], json_out["new"][0]]
        assert c["attribution"] == json_out["attribution"]
        [kernels] = [t for t in c["tables"] if t["name"] == "diff_kernel"]
        assert [r[0][0] for r in kernels["rows"]] == [k["name"] for k in json_out["kernel"]]
    finally:
        view.stop()
