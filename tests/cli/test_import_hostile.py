"""``gpuscope import`` of files shaped to hurt it: JSON nested without end, one huge string, an
export whose name holds URI characters, an export whose GPU times are NULL or renamed."""

from __future__ import annotations

import io
import shutil
import sqlite3
from pathlib import Path
from typing import IO, Any

import pytest
from import_helpers import gpuscope_cli, shared

from gpuscope.trace.importers import kineto_stream

EVENT = b'{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2, "pid": 0, "tid": 7, "args": {}}'
NSYS = "nsys/nsys-ai--healthy_1pct.sqlite"


def _one_error(d: Path, *args: str) -> str:
    res = gpuscope_cli("import", *args, cwd=d)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, res.stderr
    assert len(lines) == 1 and lines[0].startswith("gpuscope: error: "), res.stderr
    return lines[0]


def test_nesting_without_end_is_one_line(tmp_path: Path) -> None:
    n = 100_000  # 200 kB; the parser's path strings alone would take n**2 bytes
    (tmp_path / "deep.json").write_bytes(b'{"traceEvents": ' + b"[" * n + b"]" * n + b"}")
    line = _one_error(tmp_path, "deep.json", "-o", "deep.gpuscope")
    assert line.startswith("gpuscope: error: deep.json: arrays and objects nested more than 1,000 deep")
    deep = b'{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2, "pid": 0, "tid": 7, "args": {"a": ' \
        + b"[" * n + b"]" * n + b"}}"
    (tmp_path / "late.json").write_bytes(b'{"traceEvents": [' + b",\n".join([EVENT] * 3000 + [deep]) + b"]}")
    assert "nested more than 1,000 deep" in _one_error(tmp_path, "late.json", "-o", "late.gpuscope")
    assert not list(tmp_path.glob("*.gpuscope"))


def test_nesting_within_the_bound_imports(tmp_path: Path) -> None:
    n = 900
    deep = EVENT[:-3] + b'{"a": ' + b"[" * n + b"]" * n + b"}}"
    (tmp_path / "ok.json").write_bytes(b'{"traceEvents": [' + b",\n".join([EVENT, deep]) + b"]}")
    res = gpuscope_cli("import", "ok.json", "-o", "ok.gpuscope", cwd=tmp_path)
    assert res.returncode == 0 and "(2 kernels" in res.stderr, res.stderr


class Counting(io.RawIOBase):
    """A stream that counts the reads made of it."""

    def __init__(self, fh: IO[bytes]) -> None:
        self.fh, self.reads = fh, 0

    def read(self, size: int = -1) -> bytes:  # type: ignore[override]
        self.reads += 1
        return self.fh.read(size)

    def close(self) -> None:
        self.fh.close()


def test_a_huge_string_is_read_in_growing_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # yajl reads a token cut between two reads again from its start: blocks of a fixed size make a
    # string of n bytes cost n**2 / block; blocks that double while it runs on make it linear
    big = b"x" * (16 << 20)
    path = tmp_path / "big.json"
    path.write_bytes(b'{"note": "' + big + b'", "traceEvents": [' + EVENT[:-1] + b', "s": "' + big + b'"}]}')
    streams: list[Counting] = []
    opened = kineto_stream.open_trace

    def counting(p: Path) -> Any:
        streams.append(Counting(opened(p)))
        return streams[-1]

    monkeypatch.setattr(kineto_stream, "open_trace", counting)
    header = kineto_stream.read_header(path)
    assert len(header["note"]) == len(big)
    events = list(kineto_stream.events(path, [0]))
    assert len(events) == 1 and len(events[0]["s"]) == len(big)
    assert streams[0].reads < 20 and streams[1].reads < 40  # not 256 and 512 blocks of 64 kB


def test_escaped_quotes_and_brackets_in_strings_are_text() -> None:
    text = (b'{"a": "\\\\", "b": "[[[[\\"{{{{", "c": ["\\\\\\"]]]]", ' + b'"' + b"[" * 5000 + b'"], '
            b'"traceEvents": [' + EVENT + b"]}")
    for block in (1, 7, 64, len(text)):
        g = kineto_stream.Guarded(io.BytesIO(text), Path("t.json"))  # type: ignore[arg-type]
        while g.read(block):
            pass
        assert g.depth == 0 and not g.in_string, block


def test_an_export_whose_name_holds_uri_characters(tmp_path: Path) -> None:
    name = "run#1?x=%41.sqlite"
    shutil.copyfile(shared(NSYS), tmp_path / name)
    res = gpuscope_cli("import", name, "-o", "out.gpuscope", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, "out.gpuscope"])


def test_an_export_is_never_created_or_written(tmp_path: Path) -> None:
    from gpuscope.trace.importers.nsys import NsysExport

    shutil.copyfile(shared(NSYS), tmp_path / "run#x.sqlite")
    export = NsysExport(tmp_path / "run#x.sqlite")
    with pytest.raises(sqlite3.OperationalError):
        export.con.execute("CREATE TABLE t (x)")
    export.con.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run#x.sqlite"]  # no "run" beside it


@pytest.mark.parametrize("change, named", [
    ('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = NULL WHERE rowid IN (SELECT rowid FROM '
     'CUPTI_ACTIVITY_KIND_KERNEL LIMIT 3)', "CUPTI_ACTIVITY_KIND_KERNEL.start is NULL or not an integer in 3 rows"),
    ('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = NULL', "CUPTI_ACTIVITY_KIND_KERNEL.end is NULL"),
    ('ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME COLUMN "end" TO endNs',
     "CUPTI_ACTIVITY_KIND_KERNEL has no column end"),
])
def test_an_export_without_readable_kernel_times_is_refused(tmp_path: Path, change: str, named: str) -> None:
    path = tmp_path / "bad.sqlite"
    shutil.copyfile(shared(NSYS), path)
    with sqlite3.connect(path) as con:
        con.execute(change)
    line = _one_error(tmp_path, "bad.sqlite", "-o", "bad.gpuscope")
    assert f"bad.sqlite: {named}" in line
    assert not (tmp_path / "bad.gpuscope").exists()


def test_an_unexpected_failure_names_the_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from gpuscope import cli
    from gpuscope.trace import importers

    def broken(source: Path, output: Path) -> Any:
        raise ValueError("a value no trace has")

    (tmp_path / "t.json").write_bytes(b'{"traceEvents": [' + EVENT + b"]}")
    monkeypatch.setattr(importers, "import_trace", broken)
    monkeypatch.delenv("GPUSCOPE_DEBUG", raising=False)
    assert cli.main(["import", str(tmp_path / "t.json"), "-o", str(tmp_path / "t.gpuscope")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"gpuscope: error: {tmp_path / 't.json'}: cannot import this trace")
    assert "ValueError: a value no trace has" in err[0] and "None" not in err[0]
