"""Units, argument parsing, output naming, the spool format and demangling."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from gpuscope.capture.process import launch as launcher
from gpuscope.capture import collectors as traces
from gpuscope.spool import Chunk, SpoolWriter, ready_chunks
from gpuscope.errors import GpuscopeError
from gpuscope.units import duration, human, machine, size
from gpuscope.trace.demangle import demangle
from gpuscope.trace.files import output_path


@pytest.mark.parametrize(
    "ns, text",
    [(0, "0 ns"), (999, "999 ns"), (1000, "1 µs"), (1234, "1.23 µs"), (123_456, "123.5 µs"),
     (1_500_000, "1.5 ms"), (123_456_789, "123.5 ms"), (2_500_000_000, "2.500 s")],
)
def test_durations(ns: int, text: str) -> None:
    assert duration(ns) == text


@pytest.mark.parametrize("b, text", [(4, "4 B"), (4096, "4.1 kB"), (35_700_000, "35.7 MB"), (2e9, "2 GB")])
def test_sizes_are_decimal(b: float, text: str) -> None:
    assert size(b) == text


def test_machine_values() -> None:
    assert machine(33681.25, "ns") == 33681 and isinstance(machine(1.0, "bytes"), int)
    assert machine(41.04, "percent") == 41.0
    assert human(None, "ns") == "-" and human(1234, "count") == "1,234"


def test_trace_values() -> None:
    assert traces.parse_trace(None) == ["cuda", "nvtx", "torch", "torch-shapes", "host", "nvml"]
    assert traces.parse_trace("cuda-api") == ["cuda", "cuda-api"]
    assert traces.parse_trace("none") == []
    with pytest.raises(GpuscopeError, match="unknown --trace value 'gpu'"):
        traces.parse_trace("cuda,gpu")


def test_commands(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("")
    cmd = launcher.resolve_command([str(script), "--epochs", "1"])
    assert cmd.argv == [sys.executable, str(script), "--epochs", "1"] and cmd.is_python
    assert launcher.resolve_command(["a", "b"], module="pkg.mod").argv == [sys.executable, "-m", "pkg.mod", "a", "b"]
    py = launcher.resolve_command(["python3", "-X", "dev", str(script)])
    assert py.is_python and py.argv[1:] == ["-X", "dev", str(script)]
    with pytest.raises(GpuscopeError, match="nothere.py: no such file"):
        launcher.resolve_command(["nothere.py"])
    with pytest.raises(GpuscopeError, match="nothere.py: no such file"):
        launcher.resolve_command(["python3", "-u", "nothere.py"])
    with pytest.raises(GpuscopeError, match="command not found"):
        launcher.resolve_command(["no-such-command-gpuscope"])
    assert launcher.resolve_command(["python3", "-c", "pass"]).argv[1:] == ["-c", "pass"]


def test_output_names(tmp_path: Path) -> None:
    assert output_path(None, False, tmp_path) == tmp_path / "report1.gpuscope"
    (tmp_path / "report1.gpuscope").write_text("x")
    assert output_path(None, False, tmp_path) == tmp_path / "report2.gpuscope"
    assert output_path("run", False, tmp_path) == tmp_path / "run.gpuscope"
    with pytest.raises(GpuscopeError, match="exists; use --force-overwrite"):
        output_path("report1", False, tmp_path)
    assert output_path("report1.gpuscope", True, tmp_path) == tmp_path / "report1.gpuscope"
    with pytest.raises(GpuscopeError, match="does not exist"):
        output_path("missing/dir/out", False, tmp_path)


def test_exit_status() -> None:
    assert launcher.ExitStatus(3).shell_code == 3
    assert launcher.ExitStatus(-9).shell_code == 137 and launcher.ExitStatus(-9).describe() == "was killed by SIGKILL"
    assert launcher.ExitStatus(3).describe() == "exited with code 3"


def test_spool_chunks_round_trip_in_order(tmp_path: Path) -> None:
    w = SpoolWriter(str(tmp_path), pid=11)
    sid = w.intern("kernel_a")
    assert w.intern("kernel_a") == sid
    w.write(records={"ActivityKernel11": memoryview(b"\x01" * 224)}, rows={"diagnostic": [(1, "warning", "x")]})
    w.write(rows={"dropped": [("cupti", 0)]})
    found = sorted(ready_chunks(str(tmp_path)))
    assert [(p, s) for p, s, _ in found] == [(11, 0), (11, 1)]
    first = Chunk.from_bytes(Path(found[0][2]).read_bytes())
    assert first.strings == [(sid, "kernel_a")]
    assert bytes(first.records["ActivityKernel11"]) == b"\x01" * 224
    assert first.rows == {"diagnostic": [(1, "warning", "x")]}
    assert Chunk.from_bytes(Path(found[1][2]).read_bytes()).strings == []  # defined once
    data = Path(found[0][2]).read_bytes()
    with pytest.raises(ValueError, match="truncated"):
        Chunk.from_bytes(data[:-10])
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def test_a_closed_spool_drops_records_quietly(tmp_path: Path) -> None:
    d = tmp_path / "gone"
    d.mkdir()
    w = SpoolWriter(str(d))
    d.rmdir()
    w.write(rows={"dropped": [("cupti", 1)]})
    assert w.closed


def test_demangle() -> None:
    assert demangle("_Z3addPfi") == "add(float*, int)"
    assert demangle("nvjet_sm90_tst") == "nvjet_sm90_tst"
    assert demangle("_Znot-a-name") == "_Znot-a-name"
