"""The pages in a real browser (headless Chromium): the file of a recorded GPU report and the viewer
load without errors or requests out, show the report's top kernel and findings, a click shows a
kernel's details from the report, zooming changes the window and the slices drawn, and names that
are HTML stay text. Screenshots go to test-artifacts/ (or $GPUSCOPE_TEST_ARTIFACTS)."""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path
from typing import Any

import duckdb
import pytest

from .html_pages import IMG_NAME, SCRIPT_NAME, Gpuscope, Page, View, markup_names_report, page_data  # noqa: F401
from .test_html_report import urllib_text

pytestmark = pytest.mark.slow


def _reported(tmp_path_factory: pytest.TempPathFactory, fixture: str) -> Path:
    """A recorded fixture unpacked into a folder of its own, with the page ``gpuscope report`` made of it."""
    from conftest import unpack_fixture

    d = tmp_path_factory.mktemp(f"{fixture}-browser")
    report = unpack_fixture(fixture, d)
    res = Gpuscope(d).run("report", report.name)
    assert res.returncode == 0, res.describe()
    return report


@pytest.fixture(scope="module")
def adam(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _reported(tmp_path_factory, "program_mlp_adam")


def _wait_drawn(page: Any, updates: int = 1) -> None:
    page.wait_for_function(f"window.GS && GS.timeline && GS.timeline.stats.updates >= {updates}", timeout=30_000)


def _click_slice(page: Any, lane: int, i: int) -> None:
    """Click the middle of slice ``i`` of ``lane`` where the timeline draws it (scrolling the rows, as
    the wheel does, to bring its row on screen)."""
    page.locator("#tl-view").scroll_into_view_if_needed()
    xy = page.evaluate("""([lane, i]) => { const tl = GS.timeline, w = tl.data.byLane.get(lane), k = i - w.first;
        const row = tl.rows.find(r => r.track && r.track.lanes.includes(lane));
        tl.scrollY = Math.max(0, Math.min(row.y - 40, tl.contentH + 22 - tl.h)); tl.draw();
        const x = tl.x((w.start[k] + w.end[k]) / 2), y = 22 - tl.scrollY + row.y + 1 + tl.meta.lanes[lane].depth * 15 + 6;
        const box = tl.canvas.getBoundingClientRect(); return [box.left + x, box.top + y]; }""", [lane, i])
    page.mouse.click(xy[0], xy[1])


def test_the_file_shows_the_run_top_kernel_and_findings(browser: Any, adam: Path) -> None:
    p = Page(browser, "file-mlp-adam")
    try:
        p.page.goto(adam.with_suffix(".html").as_uri())
        _wait_drawn(p.page)
        kernels = p.page.locator("#table-cuda_gpu_kern_sum tbody tr").first.locator("td").last.text_content()
        assert "gemm" in kernels
        titles = p.page.locator(".finding-title").all_text_contents()
        assert titles and titles[0].startswith("Launch-bound")
        assert "NVIDIA H100" in p.page.locator("#run-facts").text_content()
        assert p.page.evaluate("GS.timeline.stats.drawnSlices") > 100
        # a table sorts by its raw values and filters by text
        p.page.locator("#table-cuda_gpu_kern_sum th", has_text="Instances").click()
        first = p.page.locator("#table-cuda_gpu_kern_sum tbody tr").first.locator("td").nth(2).text_content()
        p.page.locator("#table-cuda_gpu_kern_sum .table-filter").fill("cutlass")
        shown = p.page.locator("#table-cuda_gpu_kern_sum tbody tr").all_text_contents()
        assert shown and all("cutlass" in row for row in shown) and first
        # the roofline has no FLOPs in this report: it says so instead of drawing
        assert "no kernels with FLOPs" in p.page.locator("#roofline-note").text_content()
        p.shot("loaded")
        assert not p.errors, p.errors
        assert all(u.startswith(("file:", "data:", "about:")) for u in p.requests), p.requests
    finally:
        p.close()


SCREENSHOT_ENV = "GPUSCOPE_SCREENSHOT_DIR"  # where the README's picture of the page is written (docs/images)


def test_the_readme_picture_shows_the_breakdown_and_the_first_finding(browser: Any, adam: Path,
                                                                     tmp_path: Path) -> None:
    """The picture of `gpuscope report`'s page that the README shows: the step-time breakdown chart and
    the top findings, one window high. Written to $GPUSCOPE_SCREENSHOT_DIR/report.png where that is
    set (GPUSCOPE_SCREENSHOT_DIR=docs/images pytest -k readme_picture), else beside the test."""
    out = Path(os.environ.get(SCREENSHOT_ENV) or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    p = Page(browser, "readme")
    try:
        p.page.goto(adam.with_suffix(".html").as_uri())
        _wait_drawn(p.page)
        header = p.page.evaluate("document.querySelector('header, nav').getBoundingClientRect().height")
        p.page.evaluate(f"window.scrollTo(0, document.getElementById('breakdown').offsetTop - {header} - 8)")
        view = p.page.viewport_size
        for selector in ("#breakdown-chart", ".finding-title"):  # both on screen, whole
            box = p.page.locator(selector).first.bounding_box()
            assert box is not None and header <= box["y"] and box["y"] + box["height"] <= view["height"], selector
        picture = out / "report.png"
        p.page.screenshot(path=str(picture))
        data = picture.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        assert struct.unpack(">II", data[16:24]) == (view["width"], view["height"])
        assert len(data) > 20_000  # a drawn page, not a blank one
        assert not p.errors, p.errors
    finally:
        p.close()


def test_a_click_in_the_file_shows_what_the_viewer_shows_for_that_kernel(browser: Any, adam: Path) -> None:
    from gpuscope.analysis.timeline.details import details
    from gpuscope.analysis.timeline.tracks import build_index
    from gpuscope.trace.report import Report
    from gpuscope.units import human

    p = Page(browser, "file-details")
    try:
        p.page.goto(adam.with_suffix(".html").as_uri())
        _wait_drawn(p.page)
        meta = p.page.evaluate("GS.timeline.meta")
        [gpu] = [t for t in meta["tracks"] if t["group"].startswith("GPU 0")]
        lane = gpu["lanes"][0]
        step = meta["steps"][300]
        p.page.evaluate(f"GS.timeline.setView({step['start']}, {step['end']})")
        p.page.wait_for_function("!GS.timeline.inFlight")
        w = p.page.evaluate(f"GS.timeline.data.byLane.get({lane})")
        names = p.page.evaluate(f"GS.timeline.data.byLane.get({lane}).name.map(n => GS.timeline.name(n))")
        inside = [j for j in range(len(w["start"])) if step["start"] <= w["start"][j] and w["end"][j] <= step["end"]
                  and not names[j].startswith("Mem")]
        k = max(inside, key=lambda j: w["end"][j] - w["start"][j])
        _click_slice(p.page, lane, k)
        p.page.wait_for_selector("#tl-details table.details", timeout=30_000)
        shown = dict(zip(p.page.locator("#tl-details th").all_text_contents(),
                         p.page.locator("#tl-details td").all_text_contents()))
        with Report.open(adam) as report:
            want = details(report, build_index(report), lane, k)
        assert want is not None and p.page.locator("#tl-details .slice-name").text_content() == want["name"]
        expected = {label: human(v, unit) for label, v, unit in want["fields"] if label not in ("Start", "Duration")}
        assert {label: shown[label] for label in expected} == expected
        assert expected["Grid"] and expected["Range path"] and expected["Python line"]
        launch = want["launch"]  # this recording correlates no launch call with its kernels
        assert shown.get("Launched by") == (None if launch is None else f"{launch['name']} on thread {launch['tid']}")
        p.shot("details")
        assert not p.errors, p.errors
    finally:
        p.close()


def test_the_viewer_zooms_and_shows_a_kernels_details(browser: Any, adam: Path, tmp_path: Path) -> None:
    report = tmp_path / "adam.gpuscope"
    shutil.copyfile(adam, report)
    view = View(Gpuscope(tmp_path), report)
    p = Page(browser, "view-mlp-adam")
    try:
        p.page.goto(view.url)
        _wait_drawn(p.page)
        p.page.wait_for_selector(".finding-title", timeout=60_000)
        meta = p.page.evaluate("GS.timeline.meta")
        [gpu] = [t for t in meta["tracks"] if t["group"].startswith("GPU 0")]
        lane = gpu["lanes"][0]
        assert p.page.evaluate(f"GS.timeline.data.byLane.get({lane}).kind") == "buckets"
        # zoom onto one step with the keys, as a user does: W zooms in around the pointer
        step = meta["steps"][300]
        p.page.evaluate(f"GS.timeline.setView({step['start']}, {step['end']} + 2 * ({step['end']} - {step['start']}))")
        before = p.page.evaluate("[GS.timeline.t0, GS.timeline.t1, GS.timeline.stats.updates]")
        p.page.locator("#tl-view").focus()
        for _ in range(3):
            p.page.keyboard.press("w")
        p.page.keyboard.press("a")
        _wait_drawn(p.page, before[2] + 1)
        p.page.wait_for_function("!GS.timeline.inFlight")
        after = p.page.evaluate("[GS.timeline.t0, GS.timeline.t1, GS.timeline.data.t0, GS.timeline.data.t1]")
        assert after[1] - after[0] == pytest.approx((before[1] - before[0]) * 0.8 ** 3, rel=1e-6)
        assert (after[2], after[3]) == (int(after[0]), pytest.approx(after[1], abs=1))  # the window asked for
        w = p.page.evaluate(f"GS.timeline.data.byLane.get({lane})")
        assert w["kind"] == "slices" and p.page.evaluate("GS.timeline.stats.drawnSlices") > 0
        # click the longest kernel on screen (the lane holds copies too): the panel shows what the report holds for it
        names = p.page.evaluate(f"GS.timeline.data.byLane.get({lane}).name.map(n => GS.timeline.name(n))")
        k = max((j for j in range(len(w["start"])) if not names[j].startswith("Mem")),
                key=lambda j: w["end"][j] - w["start"][j])
        _click_slice(p.page, lane, w["first"] + k)
        p.page.wait_for_selector("#tl-details table.details", timeout=30_000)
        fields = dict(zip(p.page.locator("#tl-details th").all_text_contents(),
                          p.page.locator("#tl-details td").all_text_contents()))
        origin = page_data(urllib_text(view.url))["timeline"]["start_ns"]  # exact: JavaScript's numbers are not
        con = duckdb.connect(str(report), read_only=True)
        grid, block, regs, name = con.execute(
            "SELECT c.grid_x || ' x ' || c.grid_y || ' x ' || c.grid_z, c.block_x || ' x ' || c.block_y || ' x ' || "
            "c.block_z, c.registers_per_thread, s.value FROM kernel k JOIN kernel_config c ON c.id = k.config_id "
            "JOIN string s ON s.id = c.name_id WHERE k.start_ns = ?", [origin + w["start"][k]]).fetchone()
        con.close()
        assert p.page.locator("#tl-details .slice-name").text_content() == name
        assert (fields["Grid"], fields["Block"], fields["Registers per thread"]) == (grid, block, str(regs))
        assert fields["Range path"] and fields["Python line"]
        p.shot("zoomed-details")
        assert not p.errors, p.errors
        assert all(u.startswith(view.url) for u in p.requests), p.requests
    finally:
        p.close()
        view.stop()


def test_names_that_are_html_stay_text_in_the_file_and_the_viewer(browser: Any, tmp_path: Path) -> None:
    report = markup_names_report(tmp_path / "names.gpuscope")
    res = Gpuscope(tmp_path).run("report", report.name)
    assert res.returncode == 0, res.describe()
    view = View(Gpuscope(tmp_path), report)
    try:
        for url, label in ((report.with_suffix(".html").as_uri(), "file"), (view.url, "view")):
            p = Page(browser, f"names-{label}")
            try:
                p.page.goto(url)
                _wait_drawn(p.page)
                p.page.wait_for_selector("#table-cuda_gpu_kern_sum tbody tr", timeout=30_000)
                cells = p.page.locator("#table-cuda_gpu_kern_sum tbody td").all_text_contents()
                assert SCRIPT_NAME in cells
                assert IMG_NAME in p.page.locator("#table-nvtx_sum").text_content()
                p.page.locator("#tl-search").fill("__pwned = 'kernel'")
                p.page.locator("#tl-search").press("Enter")
                p.page.wait_for_function("GS.timeline.selected", timeout=30_000)
                assert "match 1 of 3" in p.page.locator("#tl-search-result").text_content()
                p.page.wait_for_function("!GS.timeline.inFlight")
                sel = p.page.evaluate("GS.timeline.selected")
                _click_slice(p.page, sel["lane"], sel["i"])
                p.page.wait_for_selector("#tl-details .slice-name", timeout=30_000)
                assert p.page.locator("#tl-details .slice-name").text_content() == SCRIPT_NAME
                assert p.page.evaluate("window.__pwned") is None
                assert p.page.locator("img").count() == 0
                assert p.page.locator("script").count() == p.page.evaluate(
                    "document.querySelectorAll('script').length")
                p.shot("search-details")
                assert not p.errors, p.errors
            finally:
                p.close()
    finally:
        view.stop()


def test_two_runs_side_by_side_are_aligned_by_step_with_their_comparison(browser: Any, tmp_path: Path) -> None:
    from .html_pages import training_run

    base = training_run(tmp_path / "base.gpuscope", seed=1)
    new = training_run(tmp_path / "new.gpuscope", seed=2, slow_ms=6)
    view = View(Gpuscope(tmp_path), base, new)
    p = Page(browser, "view-diff")
    try:
        p.page.goto(view.url)
        p.page.wait_for_function("window.GS && GS.compared && GS.timelines.every(t => t.stats.updates >= 1)",
                                 timeout=60_000)
        head = p.page.locator("#diff-head").text_content()
        assert "slower" in head and "Step time" in head
        kernels = p.page.locator("#table-diff_kernel tbody tr").all_text_contents()
        assert any(row.startswith(SCRIPT_NAME) and "new" in row for row in kernels), kernels
        assert p.page.evaluate("window.__pwned") is None and p.page.locator("img").count() == 0
        # both timelines show the first step after warm-up from its start, over the same span
        sides = view.get("/api/diff")["sides"]
        metas = p.page.evaluate("GS.timelines.map(t => t.meta.steps)")
        first = [metas[k][sides[k]["warmup_steps"]]["start"] for k in (0, 1)]
        views = p.page.evaluate("GS.timelines.map(t => [t.t0, t.t1])")
        assert views[0][0] - first[0] == pytest.approx(views[1][0] - first[1], abs=1)
        assert views[0][1] - views[0][0] == pytest.approx(views[1][1] - views[1][0], abs=1)
        assert views[0][0] < first[0] < views[0][1]
        # zooming and panning the new run moves the base run alike, each drawing its own window
        updates = p.page.evaluate("GS.timelines.map(t => t.stats.updates)")
        p.page.locator("#tl-view-1").focus()
        for key in ("w", "w", "d"):
            p.page.keyboard.press(key)
        p.page.wait_for_function(f"GS.timelines[0].stats.updates > {updates[0]} && "
                                 f"GS.timelines[1].stats.updates > {updates[1]} && GS.timelines.every(t => !t.inFlight)")
        after = p.page.evaluate("GS.timelines.map(t => [t.t0, t.t1, t.data.t0, t.data.t1])")
        assert after[1][1] - after[1][0] == pytest.approx((views[1][1] - views[1][0]) * 0.64, rel=1e-6)
        assert after[0][0] - first[0] == pytest.approx(after[1][0] - first[1], abs=1)
        assert after[0][1] - after[0][0] == pytest.approx(after[1][1] - after[1][0], abs=1)
        assert [a[2] for a in after] == [int(a[0]) for a in after]  # each asked its server side for its own window
        # step 3 after warm-up: each run's third steady step
        p.page.locator("#diff-step").fill("3")
        p.page.locator("#diff-step").dispatch_event("change")
        third = [metas[k][sides[k]["warmup_steps"] + 2]["start"] for k in (0, 1)]
        p.page.wait_for_function(f"GS.timelines[0].t0 < {third[0]} && {third[0]} < GS.timelines[0].t1")
        views = p.page.evaluate("GS.timelines.map(t => [t.t0, t.t1])")
        assert views[0][0] - third[0] == pytest.approx(views[1][0] - third[1], abs=1)
        p.shot("aligned")
        assert "timeline:" not in p.page.locator("#tl-note").text_content()  # no window failed
        assert not p.errors, p.errors
        assert all(u.startswith(view.url) for u in p.requests), p.requests
    finally:
        p.close()
        view.stop()


def test_a_newer_view_cancels_the_window_in_flight_and_buckets_keep_their_grid(browser: Any, adam: Path,
                                                                                tmp_path: Path) -> None:
    report = tmp_path / "adam.gpuscope"
    shutil.copyfile(adam, report)
    view = View(Gpuscope(tmp_path), report)
    p = Page(browser, "view-cancel")
    try:
        p.page.goto(view.url)
        _wait_drawn(p.page)
        p.page.wait_for_function("!GS.timeline.inFlight")
        # a bucket of the whole run: where the server's grid puts it, a power of two ns wide
        meta = p.page.evaluate("GS.timeline.meta")
        [gpu] = [t for t in meta["tracks"] if t["group"].startswith("GPU 0")]
        lane = gpu["lanes"][0]
        w = p.page.evaluate(f"(({{t0, step, kind}}) => ({{t0, step, kind}}))(GS.timeline.data.byLane.get({lane}))")
        assert w["kind"] == "buckets" and w["step"] & (w["step"] - 1) == 0 and w["t0"] % w["step"] == 0
        hit = p.page.evaluate(f"""(() => {{ const tl = GS.timeline, row = tl.rows.find(r => r.track && r.track.lanes.includes({lane}));
            const w = tl.data.byLane.get({lane}), i = w.busy.indexOf(Math.max(...w.busy)), x = tl.x(w.t0 + (i + 0.5) * w.step);
            const h = tl.hit(x, 22 - tl.scrollY + row.y + 5); return [h.bucket, h.t0, h.t1, w.t0 + i * w.step]; }})()""")
        assert hit[0] is True and hit[2] - hit[1] == w["step"] and hit[1] == hit[3]
        # two views asked for at once: the first one's window is cancelled, only the second's is drawn
        before = p.page.evaluate("[GS.timeline.stats.updates, GS.timeline.stats.cancelled, GS.timeline.stats.requests]")
        want = p.page.evaluate("""(() => { const tl = GS.timeline, s = tl.span;
            tl.setView(s * 0.1, s * 0.6); tl.setView(s * 0.3, s * 0.4); return [tl.t0, tl.t1]; })()""")
        p.page.wait_for_function(f"GS.timeline.stats.updates > {before[0]} && !GS.timeline.inFlight")
        p.page.wait_for_timeout(300)  # an answer to the first view, were it not cancelled, would land here
        after = p.page.evaluate("[GS.timeline.stats.updates, GS.timeline.stats.cancelled, GS.timeline.stats.requests, "
                                "GS.timeline.data.t0, GS.timeline.data.t1]")
        assert after[:3] == [before[0] + 1, before[1] + 1, before[2] + 2]
        assert (after[3], after[4]) == (int(want[0]), pytest.approx(want[1], abs=1))
        assert "timeline:" not in p.page.locator("#tl-note").text_content()  # a cancel is no failure
        # the page reads the binary form of a window as the JSON form says it
        same = p.page.evaluate("""(async () => { const q = `t0=0&t1=${Math.round(GS.timeline.span)}&px=700`;
            const json = await (await fetch("/api/window?" + q)).json();
            const bin = GS.decodeWindow(await (await fetch("/api/window?bin=1&" + q)).arrayBuffer());
            return [JSON.stringify(json) === JSON.stringify(bin), json.lanes.map(l => l.kind)]; })()""")
        assert same[0] is True and "buckets" in same[1] and "slices" in same[1]
        assert not p.errors, p.errors
    finally:
        p.close()
        view.stop()


@pytest.fixture(scope="module")
def gemms(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A recorded report whose kernels have FLOPs (its page draws a roofline)."""
    return _reported(tmp_path_factory, "gemm_conv")


def test_the_roofline_axes_are_labelled_with_si_prefixes_at_powers_of_ten(browser: Any, gemms: Path) -> None:
    p = Page(browser, "file-roofline-ticks")
    try:
        p.page.goto(gemms.with_suffix(".html").as_uri())
        p.page.wait_for_function("Chart.getChart(document.getElementById('roofline-chart'))", timeout=30_000)
        labels = p.page.evaluate("""(() => { const c = Chart.getChart(document.getElementById('roofline-chart'));
            return { x: c.scales.x.ticks.map(t => t.label), y: c.scales.y.ticks.map(t => t.label) }; })()""")
        shown = [label for label in labels["y"] if label]
        assert shown and all(label.split()[-1] in ("k", "M", "G", "T", "P") for label in shown), labels
        assert "100 T" in shown and not any("," in label for label in labels["x"] + labels["y"]), labels
        assert len(shown) < len(labels["y"])  # the ticks between powers of ten are left unlabelled
        assert p.page.evaluate("[5e14, 2.5e9, 0.01].map(GS.si)") == ["500 T", "2.5 G", "0.01"]
        assert not p.errors, p.errors
    finally:
        p.close()


def test_the_overhead_probes_steps_are_grey_bands_not_gaps(browser: Any, tmp_path: Path) -> None:
    """The steps an overhead probe ran with collection off are drawn as bands on the timeline's step
    track (nothing recorded in them), and the note under the timeline says what they are."""
    from report_builder import probe_run

    probe_run(tmp_path / "probe.gpuscope", off_ms=5).close()
    res = Gpuscope(tmp_path).run("report", "probe.gpuscope")
    assert res.returncode == 0, res.describe()
    p = Page(browser, "probe-steps")
    try:
        p.page.goto((tmp_path / "probe.html").as_uri())
        _wait_drawn(p.page)
        probe = p.page.evaluate("GS.timeline.meta.probe_steps.map(s => [s.step, s.what])")
        assert [s for s, _ in probe] == [11, 12, 13, 14, 36, 37, 38, 39] and probe[1][1] == "collection off"
        assert "Grey bands: the 8 steps of the overhead probe" in p.page.locator("#tl-note").text_content()
        # the band is drawn: under the axis, step 12 is darker than the recorded step 16 beside it
        pixels = p.page.evaluate("""() => { const tl = GS.timeline, s = tl.meta.probe_steps[1];
            const after = tl.meta.steps.find(r => r.step === 16), span = after.end - s.start;
            tl.setView(s.start - span / 4, after.end + span / 4); tl.draw();
            const at = t => Array.from(tl.ctx.getImageData(Math.round(tl.x(t) * devicePixelRatio),
                                                           Math.round(40 * devicePixelRatio), 1, 1).data).slice(0, 3);
            return [at((s.start + s.end) / 2), at((after.start + after.end) / 2)]; }""")
        band, recorded = pixels
        assert all(b < r - 8 for b, r in zip(band, recorded)), pixels
        p.shot("probe-steps")
        assert not p.errors, p.errors
    finally:
        p.close()


def test_a_file_past_its_slices_names_the_summarized_rows_and_zooms(browser: Any, adam: Path, tmp_path: Path) -> None:
    """--max-events below the run's slices: the page loads without errors, the timeline note names
    the rows drawn as summaries (those of the lanes the file holds as buckets), and zooming into
    the summaries and scrolling the rows throws nothing."""
    res = Gpuscope(tmp_path).run("report", str(adam), "--max-events", "1000", "-o", "small.html")
    assert res.returncode == 0, res.describe()
    tl = page_data((tmp_path / "small.html").read_text())["timeline"]
    bucketed = {w["lane"] for w in tl["static"]["lanes"] if w["kind"] == "buckets"}
    rows = [f"{t['group']}: {t['label']}" for t in tl["tracks"] if bucketed & set(t["lanes"])]
    assert bucketed and rows
    p = Page(browser, "file-summarized")
    try:
        p.page.goto((tmp_path / "small.html").as_uri())
        _wait_drawn(p.page)
        note = p.page.locator("#tl-note").text_content()
        assert f"{len(bucketed)} of {len(tl['lanes'])} lanes" in note
        assert all(r in note for r in rows[:12]), (rows, note)
        assert p.page.evaluate("GS.timeline.stats.drawnBuckets") > 0
        p.page.locator("#tl-view").scroll_into_view_if_needed()
        box = p.page.locator("#tl-canvas").bounding_box()
        p.page.mouse.move(box["x"] + box["width"] / 2, box["y"] + 60)
        before = p.page.evaluate("GS.timeline.t1 - GS.timeline.t0")
        for _ in range(8):
            p.page.keyboard.down("Control")
            p.page.mouse.wheel(0, -400)
            p.page.keyboard.up("Control")
        p.page.mouse.wheel(0, 600)  # the rows scroll
        p.page.wait_for_function(f"GS.timeline.t1 - GS.timeline.t0 < {before} / 2 && !GS.timeline.inFlight")
        p.page.wait_for_timeout(200)  # an error of a late draw lands here
        assert not p.errors, p.errors
    finally:
        p.close()
