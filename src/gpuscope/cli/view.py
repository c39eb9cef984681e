"""``gpuscope view``: a local server whose page asks the report for the window on screen."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..analysis.timeline_tracks import TimelineIndex

NAME = "view"
INDEX_MEMORY = "256MB"
HELP = ("Serve the report's page on 127.0.0.1, with a timeline that loads the window on screen "
        "at the level of detail it needs (any report size).")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("report", help="a .gpuscope report file")
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    p.add_argument("--no-browser", action="store_true", help="print the address without opening a browser")
    p.add_argument("--no-cache", action="store_true",
                   help="neither read nor keep the timeline index and analyses beside the report "
                        "(REPORT.cache/; by default the first view keeps them so later ones start at once)")


def _say(message: str) -> None:
    print(f"gpuscope: {message}", file=sys.stderr, flush=True)


def _keep(path: Path, index: TimelineIndex, key: dict[str, int]) -> None:
    from ..analysis import timeline_store

    if timeline_store.keep(path, index, key) is None:
        _say(f"warning: could not keep the timeline index beside {path} or in the cache directory; "
             "the next view indexes the report again")


def run(args: argparse.Namespace) -> int:
    from ..analysis import timeline_store
    from ..analysis.timeline_tracks import build_index
    from ..trace import sidecar
    from ..reporters.html import FILE_EVENT_CAP, server_page
    from ..reporters.html.server import Viewer, serve, url_of
    from ..trace.report import Report

    if not 0 <= args.port <= 65535:
        from ..errors import GpuscopeError

        raise GpuscopeError(f"port {args.port} is not a port number (0 to 65535)")
    report = Report.open(args.report)
    try:
        t0 = time.perf_counter()
        key = None if args.no_cache else sidecar.report_key(report.path)
        index = None if key is None else timeline_store.cached(report.path)
        how = "read the kept timeline index of"
        if index is None:
            how = "indexed"
            # DuckDB's cache would hold gigabytes while ten million slices are read; the index is what stays
            report.con.execute(f"SET memory_limit = '{INDEX_MEMORY}'")
            index = build_index(report)
            if key is not None:
                threading.Thread(target=_keep, args=(report.path, index, key), daemon=True).start()
        if index.events() <= FILE_EVENT_CAP:  # the analyses of the page's other sections run at full width
            report.con.execute("RESET memory_limit")
        viewer = Viewer(report, index, server_page(report.path, index), FILE_EVENT_CAP, key)
        server = serve(viewer, args.port)
        _say(f"{how} {index.events():,} timeline slices in {time.perf_counter() - t0:.1f} s")
        viewer.start_content()
        url = url_of(server)
        print(f"gpuscope: viewing {args.report} at {url} (Ctrl+C stops)", file=sys.stderr, flush=True)
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
        report.close()
    return 0

