"""``gpuscope view``: a local server whose page asks the report for the window on screen."""

from __future__ import annotations

import argparse
import sys
import threading
import time

NAME = "view"
INDEX_MEMORY = "256MB"
HELP = ("Serve the report's page on 127.0.0.1, with a timeline that loads the window on screen "
        "at the level of detail it needs (any report size).")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("report", nargs="+", help="a .gpuscope report file (or the per-node reports of one multi-node "
                   "run, shown as one with their clocks aligned)")
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    p.add_argument("--no-browser", action="store_true", help="print the address without opening a browser")


def _say(message: str) -> None:
    print(f"gpuscope: {message}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    if len(args.report) == 1:
        args.report = args.report[0]
        return _view(args)
    from ..errors import GpuscopeError
    from .nodes import merged, nodes_of_one_run

    nodes = nodes_of_one_run(args.report)
    if nodes is None:
        raise GpuscopeError("view shows one report, or the per-node reports of one run (each holding ranks of one "
                            "world size, none twice); these are not: view them one at a time")
    with merged(nodes) as path:
        args.report = str(path)
        return _view(args)


def _view(args: argparse.Namespace) -> int:
    from ..analysis.timeline_tracks import build_index
    from ..reporters.html import FILE_EVENT_CAP, server_page
    from ..reporters.html.server import Viewer, serve, url_of
    from ..trace.report import Report

    if not 0 <= args.port <= 65535:
        from ..errors import GpuscopeError

        raise GpuscopeError(f"port {args.port} is not a port number (0 to 65535)")
    report = Report.open(args.report)
    try:
        t0 = time.perf_counter()
        # DuckDB's cache would hold gigabytes while ten million slices are read; the index is what stays
        report.con.execute(f"SET memory_limit = '{INDEX_MEMORY}'")
        index = build_index(report)
        if index.events() <= FILE_EVENT_CAP:  # the analyses of the page's other sections run at full width
            report.con.execute("RESET memory_limit")
        viewer = Viewer(report, index, server_page(report.path, index), FILE_EVENT_CAP)
        server = serve(viewer, args.port)
        _say(f"indexed {index.events():,} timeline slices in {time.perf_counter() - t0:.1f} s")
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

