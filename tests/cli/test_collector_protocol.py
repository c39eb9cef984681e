"""A collector added by one registry line: started, switched by the capture window, flushed into the
report and stopped by the agent, which knows it by no name (capture/collectors.py: ``RECORDERS``).

The toy collectors live in this test only. They run in a ``with gpuscope.profile()`` block of a
script (the same agent ``gpuscope profile`` starts), so nothing of gpuscope is changed for them.
"""

from __future__ import annotations

import json
import subprocess
import sys

import gpuscope

from .conftest import TIMEOUT_S, Gpuscope, base_env

TOY = '''
"""A toy collector: each event() while collecting is a range of the report, source = its name."""
import json, threading, time
from gpuscope.capture import collectors

LOG = []  # (collector, what, detail): the lifecycle calls, in order
TOYS = {}


class Toy:
    def __init__(self, ctx, module, name):
        self.ctx, self.name, self.on, self.rows, self.count = ctx, name, None, [], 0
        LOG.append((name, "start", [getattr(module, "__name__", None), sorted(ctx.trace)]))
        TOYS[name] = self

    def set_collecting(self, on):
        self.on = on
        LOG.append((self.name, "set_collecting", on))

    def event(self, what):
        if self.on:
            t = self.ctx.now_ns()
            self.count += 1
            self.rows.append((t, t + 1, threading.get_native_id(), 10**6 + self.count, "", what, "range",
                              self.name, "toy", None))

    def take_rows(self):
        rows, self.rows = self.rows, []
        if rows:
            LOG.append((self.name, "take_rows", [len(rows), threading.current_thread().name]))
        return {"range": rows} if rows else {}

    def ending(self):
        LOG.append((self.name, "ending", None))

    def shutdown(self, ctx):
        LOG.append((self.name, "shutdown", None))
        ctx.add_row("collector", (self.name, self.count, 0, 0, 0, "{}"))

    def uninstall(self):
        LOG.append((self.name, "uninstall", None))


def toy(name):
    return lambda ctx, module: Toy(ctx, module, name)


collectors.RECORDERS.append(collectors.Recorder("toy", toy("toy")))
collectors.RECORDERS.append(collectors.Recorder("toy-lib", toy("toy-lib"), when="toy_lib"))
collectors.RECORDERS.append(collectors.Recorder("toy-memory", toy("toy-memory"), traces=("memory",)))

import gpuscope

with gpuscope.profile("toy.gpuscope", trace="none", quiet=True):
    TOYS["toy"].event("on-1")
    deadline = time.monotonic() + 30
    while not any(what == "take_rows" for _, what, _ in LOG) and time.monotonic() < deadline:
        time.sleep(0.05)  # the flush thread takes the rows every half second
    gpuscope.stop()
    TOYS["toy"].event("off")
    import toy_lib  # started now, while collection is paused
    TOYS["toy-lib"].event("lib-off")
    gpuscope.start()
    TOYS["toy"].event("on-2")
    TOYS["toy-lib"].event("lib-on")
print(json.dumps(LOG))
'''


def _calls(log: list[list[object]], name: str) -> list[object]:
    return [[what, detail] if what != "take_rows" else what for who, what, detail in log if who == name]


def test_a_collector_of_one_registry_line_goes_through_the_whole_lifecycle(gs: Gpuscope) -> None:
    gs.script("toy_lib.py", "VALUE = 1\n")
    gs.script("toy.py", TOY)
    res = subprocess.run([sys.executable, "toy.py"], cwd=gs.cwd, capture_output=True, text=True,
                         env=base_env(), timeout=TIMEOUT_S * 2)
    assert res.returncode == 0, res.stderr
    log = json.loads(res.stdout.splitlines()[-1])

    # started at process start and at the import of its module; the one for an untraced value never
    assert [w for w, what, _ in log if what == "start"] == ["toy", "toy-lib"]
    assert _calls(log, "toy-memory") == []
    # switched by the capture window (gpuscope.stop/start), flushed, ended, stopped, taken back
    toy = [c for c in _calls(log, "toy") if c != "take_rows"]
    assert toy == [["start", [None, []]], ["set_collecting", True], ["set_collecting", False],
                   ["set_collecting", True], ["ending", None], ["set_collecting", False],
                   ["shutdown", None], ["uninstall", None]]
    lib = [c for c in _calls(log, "toy-lib") if c != "take_rows"]
    assert lib == [["start", ["toy_lib", []]], ["set_collecting", False],  # the paused window's state
                   ["set_collecting", True], ["ending", None], ["set_collecting", False],
                   ["shutdown", None], ["uninstall", None]]
    # the first rows went with a periodic flush, on the agent's flush thread, while collection was on
    first = next(i for i, (who, what, _) in enumerate(log) if what == "take_rows")
    assert log[first] == ["toy", "take_rows", [1, "gpuscope-flush"]]
    assert first < log.index(["toy", "set_collecting", False])
    # stopped in the reverse of the order they started, and only after every collector's ending
    order = [(who, what) for who, what, _ in log if what in ("ending", "shutdown", "uninstall")]
    assert order == [("toy", "ending"), ("toy-lib", "ending"), ("toy-lib", "shutdown"), ("toy", "shutdown"),
                     ("toy-lib", "uninstall"), ("toy", "uninstall")]

    with gpuscope.load(str(gs.cwd / "toy.gpuscope")) as report:
        r = report.ranges().sort_values("start_ns")
        toys = r[r["category"] == "toy"]
        assert list(zip(toys["source"], toys["name"])) == [("toy", "on-1"), ("toy", "on-2"), ("toy-lib", "lib-on")]
        rows = report.sql("SELECT name, records FROM collector WHERE name LIKE 'toy%' ORDER BY name")
        assert rows == [("toy", 2), ("toy-lib", 1)]
        assert report.count("capture_window") == 2
