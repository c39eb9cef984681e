"""The timeline index kept beside its report: read back it answers windows as the index built from
the report does; it is used only while the report is unchanged and whole; links planted where it
goes are never followed. The analyses' sections computed in a process of their own are those
computed in this one, with the steps."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from gpuscope.analysis.timeline import store as timeline_store
from gpuscope.analysis.timeline.tracks import build_index
from gpuscope.analysis.timeline.window import counters, window
from gpuscope.trace import sidecar
from report_builder import torch_training


@pytest.fixture
def training(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "user-cache"))
    path = tmp_path / "t.gpuscope"
    with torch_training(path) as report:
        index = build_index(report)
    return path, index


def test_a_kept_index_answers_as_the_built_one(training) -> None:  # type: ignore[no-untyped-def]
    path, index = training
    where = timeline_store.keep(path, index, sidecar.report_key(path))
    assert where == path.with_name("t.gpuscope.cache") / "timeline.bin"
    kept = timeline_store.cached(path)
    assert kept is not None and kept.events() == index.events() > 0
    assert (kept.names, kept.steps, kept.start_ns, kept.end_ns) == (index.names, index.steps, index.start_ns, index.end_ns)
    assert [(t.label, t.lanes, t.pid, t.tid, t.stream) for t in kept.tracks] == \
           [(t.label, t.lanes, t.pid, t.tid, t.stream) for t in index.tracks]
    span = index.end_ns - index.start_ns
    for t0, t1, px in ((0, span, 7), (span // 3, span // 2, 300)):
        assert window(kept, t0, t1, px, max_slices=3) == window(index, t0, t1, px, max_slices=3)
        assert window(kept, t0, t1, px) == window(index, t0, t1, px)
        assert counters(kept, t0, t1, px) == counters(index, t0, t1, px)
    assert all(np.array_equal(a.cum, b.cum) for a, b in zip(kept.lanes, index.lanes))


def test_a_changed_or_cut_file_is_not_used(training) -> None:  # type: ignore[no-untyped-def]
    path, index = training
    timeline_store.keep(path, index, sidecar.report_key(path))
    kept = path.with_name("t.gpuscope.cache") / "timeline.bin"
    whole = kept.read_bytes()
    kept.write_bytes(whole[: len(whole) - 100])  # an array runs past the end
    assert timeline_store.cached(path) is None
    kept.write_bytes(b"GSTLINDX" + whole[8:20] + b"{" * 50)  # a header that is not JSON
    assert timeline_store.cached(path) is None
    kept.write_bytes(whole)
    assert timeline_store.cached(path) is not None
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # the report was written again
    assert timeline_store.cached(path) is None


def test_links_planted_where_the_index_goes_are_not_followed(training, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path, index = training
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    path.with_name("t.gpuscope.cache").symlink_to(elsewhere)  # the directory is a link: not used
    where = timeline_store.keep(path, index, sidecar.report_key(path))
    assert where is not None and where.parent == sidecar.candidates(path)[1]
    assert list(elsewhere.iterdir()) == []
    assert timeline_store.cached(path) is not None  # found in the user's cache directory
    # a link planted as the file itself is replaced, never written through
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    where.unlink()
    where.symlink_to(victim)
    assert timeline_store.cached(path) is None  # a link is no file of ours
    assert timeline_store.keep(path, index, sidecar.report_key(path)) == where
    assert victim.read_text() == "keep me" and not where.is_symlink()
    assert timeline_store.cached(path) is not None


def test_the_analyses_in_a_process_of_their_own_are_those_in_this_one(training) -> None:  # type: ignore[no-untyped-def]
    from gpuscope.reporters.html import content_job

    path, index = training
    here = content_job.compute(path, index.start_ns, with_steps=True)
    there = content_job.in_child(path, index.start_ns)
    assert there["tables"] == here["tables"] and there["diagnosis"]["findings"] == here["diagnosis"]["findings"]
    assert [(s["step"], s["start"], s["end"]) for s in there["steps"]] == \
           [(s, a - index.start_ns, b - index.start_ns) for _, s, a, b in index.steps] and there["steps"]
    assert content_job.keep(path, sidecar.report_key(path), there) is not None
    assert content_job.cached(path) == there


def test_the_analyses_process_ends_when_its_parent_has_gone(training) -> None:  # type: ignore[no-untyped-def]
    import subprocess
    import sys

    from gpuscope.reporters.html import content_job

    path, index = training
    proc = subprocess.run([sys.executable, "-m", content_job.__name__, str(path), str(index.start_ns), "1"],
                          capture_output=True, timeout=120)  # its parent is not process 1
    assert proc.returncode == content_job.ORPHANED and proc.stdout == b""


def test_a_large_reports_analyses_wait_for_a_request_and_are_kept(training) -> None:  # type: ignore[no-untyped-def]
    from gpuscope.reporters.html.server import Viewer
    from gpuscope.trace.report import Report

    path, index = training
    with Report.open(path) as report:
        viewer = Viewer(report, index, content_cap=10, key=sidecar.report_key(path))  # "large": above 10 slices
        assert "minutes" in viewer.content()["lazy"]
        computed = viewer.content(compute=True)  # in a process of its own, with the steps
        assert computed["tables"] and computed["steps"]
        assert viewer.content() == computed
    with Report.open(path) as report:
        again = Viewer(report, index, content_cap=10, key=sidecar.report_key(path))
        assert again.content() == computed  # kept beside the report: no request needed
        assert "lazy" in Viewer(report, index, content_cap=10, key=None).content()  # --no-cache


def test_thread_lanes_carry_the_threads_recorded_names(recorded) -> None:
    from gpuscope.analysis.timeline.tracks import build_index
    from gpuscope.trace.report import Report

    with Report.open(recorded("cpu_train_small")) as report:
        labels = [t.label for t in build_index(report).tracks]
        [(main,)] = report.sql("SELECT tid FROM thread_time WHERE name = 'MainThread' GROUP BY tid")
    assert f"Thread {main} (MainThread): Python stacks" in labels, labels
