"""Helpers of the HTML page tests: the page's data, a running ``gpuscope view``, a hand-made report
whose names are markup, and a headless Chromium (Debian's ``chromium`` driven by Playwright)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest

from report_builder import ReportBuilder

import gpuscope

from .conftest import TIMEOUT_S, Gpuscope as _Gpuscope, base_env

# Names that would run script if a page ever used them as markup.
SCRIPT_NAME = "<script>window.__pwned = 'kernel'</script>"
IMG_NAME = "<img src=x onerror=\"window.__pwned = 'range'\">"
ARTIFACTS = Path(os.environ.get("GPUSCOPE_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / "test-artifacts"))


class Gpuscope(_Gpuscope):
    """A gpuscope runner whose commands import the gpuscope these tests import (a source tree on
    PYTHONPATH included), not whichever is installed."""

    @staticmethod
    def env() -> dict[str, str]:
        return base_env({"PYTHONPATH": str(Path(gpuscope.__file__).resolve().parents[1])})

    def run(self, *args: str, **kw: Any) -> Any:
        return super().run(*args, env=self.env(), **kw)

    def start(self, *args: str, new_session: bool = False) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-m", "gpuscope", *args], cwd=self.cwd, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env(),
                                start_new_session=new_session)


def page_data(html: str) -> dict[str, Any]:
    """Return the JSON document a page holds."""
    m = re.search(r'<script type="application/json" id="gpuscope-data">(.*?)</script>', html, re.S)
    assert m, "the page has no data element"
    return json.loads(m.group(1))


def markup_names_report(path: Path) -> Path:
    """Write a small report whose kernel and range names are HTML; return its path."""
    b = ReportBuilder(path)
    for step in range(3):
        t = 1_000_000 * step
        b.range(IMG_NAME, t, t + 900_000, tid=1, source="nvtx")
        b.kernel(SCRIPT_NAME, t + 100_000, t + 600_000, tid=1, launch=t + 50_000)
        b.kernel("ordinary_kernel", t + 600_000, t + 700_000, tid=1, launch=t + 60_000)
        b.mark("step", t + 950_000, tid=1)
    b.open(wall_ns=3_000_000).close()
    return path


def training_run(path: Path, *, steps: int = 12, step_ms: float = 20.0, slow_ms: float = 0.0, seed: int = 0) -> Path:
    """Write a training loop of ``steps`` steps of about ``step_ms`` each (2% noise), each a forward
    ``Net.block`` with a GEMM and a ``Net.head`` with a small kernel; ``slow_ms`` adds a kernel of
    that length per step, named :data:`SCRIPT_NAME` (a planted regression whose name is markup)."""
    import numpy as np

    ms = 1_000_000
    rng = np.random.default_rng(seed)
    b = ReportBuilder(path)
    b.writer.con.execute("INSERT INTO device (pid, id, name) VALUES (100, 0, 'NVIDIA H100 80GB HBM3')")
    t = ms
    extra = int(slow_ms * ms)
    for _ in range(steps):
        start = t
        b.range("Net", start, start + 5 * ms + extra, 1, category="forward")
        b.range("Net.block", start + ms, start + 2 * ms + extra, 1, category="forward")
        b.kernel("gemm_kernel", start + ms + 200_000, start + ms + 1_200_000, tid=1, launch=start + ms + 100_000)
        if extra:
            b.kernel(SCRIPT_NAME, start + ms + 1_300_000, start + ms + 1_300_000 + extra, tid=1, launch=start + ms + 150_000)
        b.range("Net.head", start + 3 * ms + extra, start + 4 * ms + extra, 1, category="forward")
        b.kernel("head_kernel", start + 3 * ms + extra + 100_000, start + 3 * ms + extra + 300_000, tid=1,
                 launch=start + 3 * ms + extra + 50_000)
        t = start + int(step_ms * (1 + 0.02 * rng.standard_normal()) * ms) + extra
        b.mark("step", t, 1, source="gpuscope")
    b.open(command=["python", "train.py"]).close()
    return path


class View:
    """A ``gpuscope view REPORT --no-browser`` running in a subprocess, and its address."""

    def __init__(self, gs: Gpuscope, *reports: Path, flags: tuple[str, ...] = ()) -> None:
        self.proc = gs.start("view", *map(str, reports), "--no-browser", *flags)
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(self.proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(TIMEOUT_S)
        if not line or not line[0].startswith("http://127.0.0.1:"):
            self.stop()
            pytest.fail(f"gpuscope view printed no address: {line} {self.proc.stderr.read()}")  # type: ignore[union-attr]
        self.url = line[0].strip()

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(self.url.rstrip("/") + path, timeout=TIMEOUT_S) as r:
            return json.loads(r.read())

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Page:
    """A browser page that records console errors, page errors and every request it makes."""

    def __init__(self, browser: Any, name: str) -> None:
        # bypass_csp: the page forbids eval, which Playwright's waiting functions use
        self.page = browser.new_page(viewport={"width": 1400, "height": 900}, bypass_csp=True)
        self.name = name
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))

    def shot(self, label: str) -> Path:
        """Save a screenshot of the whole page as a test artifact; return its path."""
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{self.name}-{label}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path

    def close(self) -> None:
        self.page.close()
