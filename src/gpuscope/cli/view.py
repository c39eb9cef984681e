"""``gpuscope view``: a local server whose page asks the report for the window on screen; with two
reports, their timelines side by side, aligned by step, and their comparison."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import GpuscopeError

if TYPE_CHECKING:
    from ..analysis.timeline.tracks import TimelineIndex
    from ..reporters.html.server import Viewer

NAME = "view"
INDEX_MEMORY = "256MB"
HELP = ("Serve the report's page on 127.0.0.1, with a timeline that loads the window on screen "
        "at the level of detail it needs (any report size). With two reports (BASE NEW): both "
        "timelines aligned by step, and what gpuscope diff finds between them.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("report", nargs="+", metavar="REPORT",
                   help="a .gpuscope report file; two to compare (BASE NEW); or the per-node reports of one "
                        "multi-node run, shown as one with their clocks aligned")
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    p.add_argument("--no-browser", action="store_true", help="print the address without opening a browser")
    p.add_argument("--no-cache", action="store_true",
                   help="neither read nor keep the timeline index and analyses beside the report "
                        "(REPORT.cache/; by default the first view keeps them so later ones start at once)")


def _say(message: str) -> None:
    print(f"gpuscope: {message}", file=sys.stderr, flush=True)


def _keep(path: Path, index: TimelineIndex, key: dict[str, int], viewer: Viewer) -> None:
    from ..analysis.timeline import store as timeline_store

    if timeline_store.keep(path, index, key) is None:
        _say(f"warning: could not keep the timeline index beside {path} or in the cache directory; "
             "the next view indexes the report again")
    viewer.start_lod()  # after the index is written: the two never hold their memory at once


def _open(path: str, no_cache: bool) -> tuple[Viewer, str]:
    """Return the viewer of the report at ``path`` (its index read from beside it, else built and
    kept in the background) and a line that says which and how long it took."""
    from ..analysis.timeline import store as timeline_store
    from ..analysis.timeline.tracks import build_index
    from ..reporters.html import FILE_EVENT_CAP
    from ..reporters.html.server import Viewer
    from ..trace import sidecar
    from ..trace.report import Report

    report = Report.open(path)
    try:
        t0 = time.perf_counter()
        key = None if no_cache else sidecar.report_key(report.path)
        index = None if key is None else timeline_store.cached(report.path)
        how = "read the kept timeline index of"
        if index is None:
            how = "indexed"
            # DuckDB's cache would hold gigabytes while ten million slices are read; the index is what
            # stays: read through a connection of its own, within less memory, given back when it closes
            with Report.open(path, memory=INDEX_MEMORY) as lean:
                index = build_index(lean)
        said = f"{how} {index.events():,} timeline slices in {time.perf_counter() - t0:.1f} s"
        viewer = Viewer(report, index, FILE_EVENT_CAP, key)
        if how == "indexed" and key is not None:  # kept in the background, then its levels of detail
            threading.Thread(target=_keep, args=(report.path, index, key, viewer), daemon=True).start()
        else:  # read beside the report, else built in the background
            viewer.start_lod()
        return viewer, said
    except BaseException:
        report.close()
        raise


def _comparison(paths: list[Path]) -> dict[str, Any]:
    """Return the page's comparison of the two reports (as ``gpuscope diff BASE NEW`` finds it)."""
    from ..analysis.diff.compare import diff
    from ..analysis.diff.data import run_data
    from ..reporters.html.diff_page import diff_data
    from ..trace.report import Report

    runs = []
    for path in paths:
        with Report.open(path) as report:  # connections of this thread's own
            runs.append(run_data(report, str(path)))
    result = diff([runs[0]], [runs[1]])
    for line in result.warnings:
        _say(f"warning: {line}")
    return diff_data(result)


def run(args: argparse.Namespace) -> int:
    if len(args.report) > 1:
        from .nodes import merged, nodes_of_one_run

        nodes = nodes_of_one_run(args.report)
        if nodes is not None:  # the nodes of one run: one page, one timeline
            with merged(nodes) as path:
                args.report = [str(path)]
                return _serve(args)
    return _serve(args)


def _serve(args: argparse.Namespace) -> int:
    from ..reporters.html import server_page
    from ..reporters.html.server import Once, serve, url_of

    if not 0 <= args.port <= 65535:
        raise GpuscopeError(f"port {args.port} is not a port number (0 to 65535)")
    if len(args.report) > 2:
        raise GpuscopeError(f"give one report, two to compare (BASE NEW), or the per-node reports of one run "
                            f"(each holding ranks of one world size, none twice); {len(args.report)} given that are not")
    viewers: list[Viewer] = []
    said: list[str] = []
    try:
        for path in args.report:
            viewer, line = _open(path, args.no_cache)
            viewers.append(viewer)
            said.append(line)
        paths = [v.report.path for v in viewers]
        if len(viewers) == 1:
            server = serve(server_page(paths[0], viewers[0].index), viewers, args.port)
            if viewers[0].index.events() <= viewers[0].content_cap:  # larger: when the page asks
                viewers[0].start_content()
        else:
            from ..reporters.html.diff_page import diff_page

            comparison = Once(lambda: _comparison(paths), "gpuscope-diff")
            server = serve(diff_page(paths, [v.index for v in viewers]), viewers, args.port,
                           {"/api/diff": lambda q: comparison.get()})
        for line in said:  # once the port is ours: a port in use is the only line
            _say(line)
        url = url_of(server)
        what = " and ".join(args.report)
        print(f"gpuscope: viewing {what} at {url} (Ctrl+C stops)", file=sys.stderr, flush=True)
        print(url, flush=True)
        if not args.no_browser:
            import webbrowser

            threading.Thread(target=webbrowser.open, args=(url,), daemon=True).start()
        try:
            server.serve_forever(poll_interval=0.2)
        except KeyboardInterrupt:
            _say("stopped")
        finally:
            server.server_close()
    finally:
        for v in viewers:
            v.report.close()
    return 0
