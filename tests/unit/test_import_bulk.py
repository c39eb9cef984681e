"""The bulk Kineto import (runs of events decoded with msgspec, columns built at once, optionally in
worker processes) writes the same report as the event-by-event import, row for row, on the shared
traces and on traces made to trip it: small runs, false boundaries inside strings, values of other
types, damaged and truncated files (the same one-line error, naming the same event)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import duckdb
import msgspec
import pytest
from conftest import FIXTURES
from import_helpers import shared

from gpuscope.errors import GpuscopeError
from gpuscope.trace.importers import (import_trace, kineto_chunks, kineto_columns, kineto_events, kineto_read,
                                      kineto_worker)

GPT_TRACE = FIXTURES / "gpt_eager.torch_trace.json.gz"
VOLATILE_META = {"gpuscope_version", "created", "recorded_at", "finished_at"}


def _dump(path: Path) -> dict[str, Any]:
    """Every table of the report, string ids replaced by their text, in stored row order."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        strings = dict(con.execute("SELECT id, value FROM string").fetchall())
        out: dict[str, Any] = {}
        for (table,) in con.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
                                    "ORDER BY 1").fetchall():
            if table == "string":
                continue
            cols = [c for c, *_ in con.execute(f"DESCRIBE {table}").fetchall()]
            rows = con.execute(f"SELECT * FROM {table}").fetchall()
            if table == "meta":
                out[table] = {k: v for k, v in rows if k not in VOLATILE_META}
                continue
            named = {i for i, c in enumerate(cols) if c.endswith("name_id") or c in ("mangled_id", "domain_id")}
            out[table] = [tuple(strings.get(v) if i in named else v for i, v in enumerate(r)) for r in rows]
        return out
    finally:
        con.close()


def _import(source: Path, out: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> dict[str, Any] | str:
    """Import ``source`` the way ``mode`` says (``event``, ``bulk``, ``workers``); return the report's
    tables, or the error's message."""
    with monkeypatch.context() as m:
        m.setenv("GPUSCOPE_IMPORT_BULK", "0" if mode == "event" else "1")
        m.setenv("GPUSCOPE_IMPORT_WORKERS", "2" if mode == "workers" else "0")
        try:
            import_trace(source, out)
        except GpuscopeError as exc:
            assert not out.exists()
            return str(exc)
    return _dump(out)


def _same(source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, modes: tuple[str, ...] = ("bulk",)) -> Any:
    reference = _import(source, tmp_path / "event.gpuscope", monkeypatch, "event")
    for mode in modes:
        got = _import(source, tmp_path / f"{mode}.gpuscope", monkeypatch, mode)
        assert got == reference, mode
    return reference


def _count_runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the runs mapped in bulk in this process (a run that fails to map does not count)."""
    calls = [0]
    real = kineto_columns.map_chunk

    def counting(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        calls[0] += 1
        return result

    monkeypatch.setattr(kineto_columns, "map_chunk", counting)
    return calls


@pytest.mark.parametrize("name", [
    "hta-trace_diff--control--control.json.gz",
    "hta-nccl_parser_config--nccl_data.json.gz",
    "tracelens-h100--gaunernst_bert-small-uncased__1016001.json.gz",
    "hta-critical_path--alexnet--benchmark_result_2869224_1695835535_trace.json.gz",
])  # fmt: skip
def test_shared_traces_import_the_same_in_bulk(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = _count_runs(monkeypatch)
    tables = _same(shared(f"kineto/{name}"), tmp_path, monkeypatch)
    assert runs[0] >= 1  # the bulk path mapped the trace, not the fallback
    assert tables["kernel"] and tables["api_call"]


def test_recorded_trace_in_small_runs_plain_and_gzip_with_workers(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The recorded GPT trace (shapes, modules, flows, ProfilerStep-less optimizer steps) cut into ~40
    runs, as plain JSON and gzip, in this process and in two workers: the same report each time."""
    plain = tmp_path / "gpt.json"
    plain.write_bytes(gzip.decompress(GPT_TRACE.read_bytes()))
    monkeypatch.setattr(kineto_chunks, "CHUNK", 1 << 17)
    started = []
    real = kineto_worker.Worker.__init__

    def tracked(self: kineto_worker.Worker) -> None:
        real(self)
        started.append(self)

    monkeypatch.setattr(kineto_worker.Worker, "__init__", tracked)
    runs = _count_runs(monkeypatch)
    tables = _same(plain, tmp_path, monkeypatch, ("bulk", "workers"))
    assert runs[0] > 20 and len(started) == 2
    from_gzip = _same(GPT_TRACE, tmp_path, monkeypatch, ("bulk", "workers"))
    assert {k: v for k, v in from_gzip.items() if k != "meta"} == {k: v for k, v in tables.items() if k != "meta"}
    assert len(tables["kernel"]) == 985 and len(tables["torch_op"]) > 9000


def _trace(events: list[dict[str, Any]], indent: bool = False) -> str:
    header = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "GPU", "numSms": 132}]}
    body = (",\n  " if indent else ",").join(json.dumps(e, separators=None if indent else (",", ":"))
                                            for e in events)
    return json.dumps(header)[:-1] + ', "traceEvents": [' + body + '], "traceName": "t"}'


def _events(n: int, name: str = "k") -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(n):
        out.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 7, "tid": 7,
                    "ts": 1000.5 + 10 * i, "dur": 2.25, "args": {"correlation": i, "cbid": 211}})
        out.append({"ph": "X", "cat": "kernel", "name": f"{name}{i % 3}", "pid": 0, "tid": 7, "ts": 1003.125 + 10 * i,
                    "dur": 4.5, "args": {"correlation": i, "device": 0, "stream": 7, "grid": [i % 2 + 1, 1, 1],
                                         "block": [128, 1, 1], "registers per thread": 32, "shared memory": 0}})
        out.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7, "ts": 999.0 + 10 * i,
                    "dur": 5, "args": {"Input Dims": [[4, 8], [8, 2]], "Input type": ["float", "float"],
                                       "Sequence number": i}})
    return out


def test_false_boundaries_inside_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Compact JSON whose kernel names hold ``}, {`` and ``},{``: a run cut there does not decode, and
    the import goes on event by event with the same result."""
    monkeypatch.setattr(kineto_chunks, "CHUNK", 4096)
    src = tmp_path / "names.json"
    src.write_text(_trace(_events(600, name='fn<{}, {},{"x"}>')))
    tables = _same(src, tmp_path, monkeypatch)
    assert len(tables["kernel"]) == 600 and {r[1] for r in tables["kernel_config"]} == {
        f'fn<{{}}, {{}},{{"x"}}>{i}' for i in range(3)}


def test_values_of_other_types_are_mapped_event_by_event(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run with a kernel's stream as a string and a grid of two numbers is mapped one event at a
    time; the runs around it in bulk; the report is the same as the event-by-event import's."""
    monkeypatch.setattr(kineto_chunks, "CHUNK", 4096)
    events = _events(600)
    events[900]["args"]["grid"] = [4, 1]
    events[1201]["tid"] = "7"
    events[1500]["ts"] = 16000  # an integer time among fractional ones
    src = tmp_path / "types.json"
    src.write_text(_trace(events, indent=True))
    runs = _count_runs(monkeypatch)
    tables = _same(src, tmp_path, monkeypatch)
    assert runs[0] > 5 and len(tables["torch_op"]) == 600


def test_a_category_outside_the_known_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Events of a known category are decoded as that category's struct; a run with another
    category (and the runs after it) is decoded with any string, still in bulk, and counted: the
    same report."""
    monkeypatch.setattr(kineto_chunks, "CHUNK", 4096)
    events = _events(600)
    for i in (30, 1500, 1700):
        events.insert(i, {"ph": "X", "cat": "a_new_category", "name": "x", "pid": 7, "tid": 7, "ts": 1.0, "dur": 1})
    src = tmp_path / "cats.json"
    src.write_text(_trace(events, indent=True))
    runs = _count_runs(monkeypatch)
    tables = _same(src, tmp_path, monkeypatch)
    assert runs[0] > 5 and json.loads(tables["meta"]["imported_from"])["categories"]["a_new_category"] == 3
    assert len(tables["kernel"]) == 600


def test_decoders_in_turn() -> None:
    """A struct per known category first (a flow keeps no field); events without a category (the
    metadata at a trace's end) are decoded with the known categories as constants, and so is every
    later run once two runs in a row had such events; a category outside the list: any string from
    then on."""
    ev = kineto_events
    ev.reset_decoders()
    tagged = kineto_columns.decode(b'{"ph": "X", "cat": "kernel", "name": "k", "ts": 1}, {"cat": "ac2g", "ts": 2}')
    assert [e.cat for e in tagged] == ["kernel", "ac2g"] and tagged[0].name == "k" and not hasattr(tagged[1], "ts")
    assert isinstance(kineto_columns.decode(b'{"ph": "M", "name": "process_name"}')[0], ev.KnownEvent)
    assert not isinstance(kineto_columns.decode(b'{"cat": "kernel"}')[0], ev.Event)  # one such run: back
    for _ in range(2):
        assert kineto_columns.decode(b'{"ph": "M"}, {"cat": "cpu_op"}')[1].cat == "cpu_op"
    assert isinstance(kineto_columns.decode(b'{"cat": "kernel"}')[0], ev.KnownEvent)  # two in a row: stays
    mixed = kineto_columns.decode(b'{"cat": "kernel"}, {"cat": "a_new_category"}')
    assert [e.cat for e in mixed] == ["kernel", "a_new_category"]
    assert type(kineto_columns.decode(b'{"cat": "kernel"}')[0]) is ev.Event
    with pytest.raises(msgspec.ValidationError):
        kineto_columns.decode(b'{"cat": "kernel", "ts": "1"}')
    ev.reset_decoders()


@pytest.mark.parametrize("compress", [False, True])
def test_damaged_and_truncated_traces_name_the_same_event(compress: bool, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kineto_chunks, "CHUNK", 4096)
    text = _trace(_events(600), indent=True).encode()
    cases = {"truncated": text[: len(text) * 2 // 3], "damaged": text.replace(b'"cbid": 211}', b'"cbid": 211]', 1),
             "no end": text[:-1]}
    for what, data in cases.items():
        src = tmp_path / f"{what}.json"
        if compress:
            data = gzip.compress(data)
            src = src.with_suffix(".json.gz")
        src.write_bytes(data)
        message = _same(src, tmp_path, monkeypatch)
        assert isinstance(message, str) and "after event" in message, (what, message)
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(gzip.compress(text)[:6000])
    message = _same(cut, tmp_path, monkeypatch)
    assert isinstance(message, str) and "truncated gzip" in message


def test_scaled_times_are_exactly_pythons() -> None:
    """``base + round(ts * 1000)`` in numpy equals Python's for floats, integers and a mix, large and small."""
    cases = [[1.5, 2.5, 1000.0005, 4461842029154.28], [1695835535123456, 1695835535123457],
             [1695835535123456.789, 1695835535123456, 0.5], [0, 2**40]]
    for values in cases:
        got = kineto_columns._scaled(values, 1790857026000000000)
        assert got is not None
        assert got.tolist() == [1790857026000000000 + round(v * 1000) for v in values]
    assert kineto_columns._scaled([1.0, None], 0) is None
    with pytest.raises(kineto_columns.Unusual):
        kineto_columns._scaled([2**62], 0)


def test_workers_for_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    small = tmp_path / "small.json"
    small.write_text("{}")
    monkeypatch.delenv("GPUSCOPE_IMPORT_WORKERS", raising=False)
    assert kineto_read.workers_for(small) == 0
    monkeypatch.setenv("GPUSCOPE_IMPORT_WORKERS", "3")
    assert kineto_read.workers_for(small) == 3


@pytest.mark.parametrize(("cores", "workers"), [(1, 0), (2, 2), (3, 3), (64, kineto_read.MAX_WORKERS)])
def test_workers_for_cores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cores: int, workers: int) -> None:
    """A large trace gets one worker per core the import may run on (none on one core: a worker
    would only add its start and the transfer of its columns), at most MAX_WORKERS."""
    big = tmp_path / "big.json"
    big.write_text("{}")
    monkeypatch.delenv("GPUSCOPE_IMPORT_WORKERS", raising=False)
    monkeypatch.setattr(kineto_read, "PARALLEL_BYTES", 1)
    monkeypatch.setattr(kineto_read.os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    assert kineto_read.workers_for(big) == workers


def test_run_array_reads_the_part_of_the_file(tmp_path: Path) -> None:
    """A run of a plain file is read straight into a JSON array: its bytes between ``[`` and ``]``;
    a file that shrank since it was cut gives what is left, closed the same way."""
    path = tmp_path / "t.json"
    path.write_bytes(b'{"traceEvents": [{"a": 1}, {"b": 2}]}')
    run = kineto_chunks.Run(None, False, offset=17, length=18)
    assert bytes(run.array(path)) == b'[{"a": 1}, {"b": 2}]'
    assert kineto_columns.decode(run.array(path), array=True) == kineto_columns.decode(run.load(path))
    assert bytes(kineto_chunks.Run(None, False, offset=27, length=30).array(path)) == b'[{"b": 2}]}]'
    assert bytes(kineto_chunks.Run(b'{"c": 3}', False).array(path)) == b'[{"c": 3}]'
