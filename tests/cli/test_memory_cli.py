"""``--trace memory`` on a CPU program, as a user runs it: the layer's 256 MiB peak, RSS, counters, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import Gpuscope

pytest.importorskip("torch")
WORKLOAD = Path(__file__).resolve().parents[1] / "workloads" / "cpu" / "memory_temp_layer.py"
MIB = 1 << 20


@pytest.fixture(scope="module")
def memory_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("memory")
    res = Gpuscope(directory).profile("--trace", "torch,memory,host", "-o", "mem", "python", str(WORKLOAD),
                                      timeout=120)
    assert res.returncode == 0, res.describe()
    return directory / "mem.gpuscope"


def test_memory_sum_shows_the_256_mib_temporary_on_its_layer(gs: Gpuscope, memory_report: Path) -> None:
    res = gs.run("stats", str(memory_report), "-r", "memory_sum", "-f", "json")
    assert res.returncode == 0, res.describe()
    rows = json.loads(res.stdout)["memory_sum"]["rows"]
    layer = {r["Name"]: r for r in rows if r["Section"] == "layer"}
    # the temporary, and the small tensors of the same forward: its 8 KiB output and a 4-byte sum
    assert 256 * MIB <= layer["Net.temp"]["Bytes (B)"] == 256 * MIB + 8192 + 4, layer
    assert layer["Net.temp"]["Count"] == 3
    assert layer["Net.fc"]["Bytes (B)"] < MIB
    (peak,) = [r for r in rows if r["Section"] == "peak allocated"]
    assert 256 * MIB < peak["Bytes (B)"] < 256 * MIB + 4 * MIB + 64 * 1024
    live = [r for r in rows if r["Section"] == "live at peak"]
    assert live[0]["Bytes (B)"] == 256 * MIB and live[0]["Name"] == "Net.temp"
    assert live[0]["Location"].endswith("memory_temp_layer.py:17")  # t = torch.ones(...)
    (rss,) = [r for r in rows if r["Section"] == "peak resident memory (RSS)"]
    assert rss["Bytes (B)"] > 256 * MIB


def test_memory_counters_in_the_chrome_export(gs: Gpuscope, memory_report: Path) -> None:
    res = gs.run("export", "-f", "chrome", str(memory_report), "-o", "mem.json")
    assert res.returncode == 0, res.describe()
    events = json.loads((gs.cwd / "mem.json").read_text())["traceEvents"]
    values = [e["args"]["value"] for e in events if e["ph"] == "C" and e["name"] == "cpu.memory_allocated_bytes"]
    assert values and min(values) >= 0 and max(values) > 256 * MIB
    assert [e["name"] for e in events if e.get("cat") == "memory"] == ["cpu peak allocated"]


def test_without_trace_memory_memory_sum_says_how_to_record_it(gs: Gpuscope) -> None:
    gs.script("p.py", "print('hi')\n")
    assert gs.profile("--trace", "host", "-o", "plain", "python", "p.py").returncode == 0
    res = gs.run("stats", "plain.gpuscope", "-r", "memory_sum")
    assert res.returncode == 0, res.describe()
    assert "add --trace memory" in " ".join(res.stdout.split())  # the note may wrap at the terminal width


def test_an_unknown_report_name_is_one_line_and_exit_2(gs: Gpuscope, memory_report: Path) -> None:
    res = gs.run("stats", str(memory_report), "-r", "memory_summ")
    assert res.returncode == 2 and len(res.errors) == 1 and "Traceback" not in res.stderr


WINDOWED = """
import torch, gpuscope
MIB = 1 << 18  # float32 elements in 1 MiB
before = torch.ones(64 * MIB)  # 64 MiB made before the window, live through it
gpuscope.start()
t = torch.ones(256 * MIB)
del t
inside = torch.ones(8 * MIB)  # made inside, freed after
gpuscope.stop()
del inside
after = torch.ones(512 * MIB)  # after the window: larger than anything inside it
del after
print("done")
"""


def test_a_capture_window_reports_its_baseline_peak_and_allocations(gs: Gpuscope) -> None:
    gs.script("windowed.py", WINDOWED)
    res = gs.profile("-t", "memory", "--capture-range=api", "-o", "w", "windowed.py", timeout=120)
    assert res.returncode == 0 and "done" in res.stdout, res.describe()
    res = gs.run("stats", "w.gpuscope", "-r", "memory_sum", "-f", "json")
    assert res.returncode == 0, res.describe()
    rows = json.loads(res.stdout)["memory_sum"]["rows"]
    by = {r["Section"]: r for r in rows if r["Section"].startswith("window")}
    start = by["window: live at start"]
    assert 64 * MIB <= start["Bytes (B)"] < 65 * MIB and start["Count"] >= 1
    assert 320 * MIB <= by["window: peak"]["Bytes (B)"] < 321 * MIB
    assert 264 * MIB <= by["window: allocations"]["Bytes (B)"] < 265 * MIB
    (peak,) = [r for r in rows if r["Section"] == "peak allocated"]
    assert peak["Bytes (B)"] == by["window: peak"]["Bytes (B)"]  # the 512 MiB after the window is not in it
    live = sorted(r["Bytes (B)"] for r in rows if r["Section"] == "live at peak" and r["Bytes (B)"] >= MIB)
    assert live == [64 * MIB, 256 * MIB]
