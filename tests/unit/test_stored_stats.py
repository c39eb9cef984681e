"""The stats tables stored in a report when it is closed: ``gpuscope stats`` prints from them the very
bytes it prints when it computes them, uses them only while they summarize the report as it is (a
report trimmed, edited, of an older schema, or read by other code computes them), and a report
without them is computed as before."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from gpuscope.analysis import STORED_STATS, stats_reports, stored_stats
from gpuscope.cli import main
from gpuscope.run.stored_stats import store
from gpuscope.trace import schema
from gpuscope.trace import stored_stats as stored_module
from gpuscope.trace.outputs import PartialReport, create_report
from gpuscope.trace.report import Report
from gpuscope.trace.writer import ReportWriter

BENCH = Path(__file__).resolve().parents[2] / "bench"
# between them every stored report has rows: ranks and collectives, layers, launch sites, API calls
FIXTURES = ["nccl_ddp_slow_rank", "gpt_eager", "program_bmm_loop", "client_hf_gpt2_train"]


def _as_written_now(path: Path) -> Path:
    """Give a recorded report the tables of this schema version, as the writer makes them now."""
    con = duckdb.connect(str(path))
    for stmt in schema.create_statements():
        con.execute(stmt)
    con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [json.dumps(schema.SCHEMA_VERSION)])
    con.execute("CHECKPOINT")
    con.close()
    return path


def _stats(capsys: pytest.CaptureFixture[str], path: Path, *argv: str) -> str:
    assert main(["stats", str(path), *argv]) == 0
    return capsys.readouterr().out


def _outputs(capsys: pytest.CaptureFixture[str], path: Path) -> list[str]:
    """What stats prints of ``path`` in each format, all reports and the stored ones by name."""
    by_name = [a for n in STORED_STATS for a in ("-r", n)]
    return [_stats(capsys, path, "-f", "json"), _stats(capsys, path), _stats(capsys, path, *by_name, "-f", "csv")]


def _stored_rows(path: Path) -> int:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return int(con.execute("SELECT count(*) FROM stats_summary").fetchone()[0])  # type: ignore[index]
    finally:
        con.close()


@pytest.mark.parametrize("name", FIXTURES)
def test_stored_tables_print_the_bytes_computing_prints(name: str, recorded, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "160")
    path = _as_written_now(recorded(name))
    computed = _outputs(capsys, path)
    with Report.open(path) as r:
        tables = [stats_reports()[n](r) for n in STORED_STATS]
    assert store(path, minimum=0) is None
    assert _stored_rows(path) == len(STORED_STATS)
    with Report.open(path) as r:
        kept = stored_stats(r)
    assert list(kept) == list(STORED_STATS)
    # the same values of the same types (1 and 1.0, or True and 1, would be equal but print apart)
    assert repr([kept[n] for n in STORED_STATS]) == repr(tables)
    assert _outputs(capsys, path) == computed


def test_stats_prints_the_stored_table_while_it_is_valid(recorded, capsys) -> None:
    """The stored table is what stats prints (edited here to tell it apart), until the rows it
    summarizes change: then stats computes it again."""
    path = _as_written_now(recorded("program_bmm_loop"))
    computed = _stats(capsys, path, "-r", "launch_sum", "-f", "json")
    assert store(path, minimum=0) is None
    con = duckdb.connect(str(path))
    (content,) = con.execute("SELECT content FROM stats_summary WHERE name = 'launch_sum'").fetchone()  # type: ignore[misc]
    doc = json.loads(content)
    doc["title"] = "Stored Launch Sites"
    con.execute("UPDATE stats_summary SET content = ? WHERE name = 'launch_sum'", [json.dumps(doc)])
    con.close()
    shown = _stats(capsys, path, "-r", "launch_sum", "-f", "json")
    assert json.loads(shown)["launch_sum"]["title"] == "Stored Launch Sites"
    assert json.loads(computed)["launch_sum"]["title"] != "Stored Launch Sites"
    con = duckdb.connect(str(path))
    con.execute("DELETE FROM kernel WHERE start_ns = (SELECT max(start_ns) FROM kernel)")  # one kernel trimmed
    con.close()
    again = _stats(capsys, path, "-r", "launch_sum", "-f", "json")
    assert json.loads(again)["launch_sum"]["title"] == json.loads(computed)["launch_sum"]["title"]
    with Report.open(path) as r:
        assert stored_stats(r) == {}
        assert again == _stats(capsys, path, "-r", "launch_sum", "-f", "json")


@pytest.mark.parametrize("change", [
    "UPDATE kernel SET end_ns = end_ns + 1 WHERE start_ns = (SELECT min(start_ns) FROM kernel)",  # same count
    "UPDATE meta SET value = '1' WHERE key = 'wall_ns'",
    "INSERT INTO diagnostic VALUES (NULL, 1, 'info', 'one more line')",
    "UPDATE stats_summary SET basis = replace(basis, '\"format\": 1', '\"format\": 0')",
    "INSERT INTO stats_summary SELECT * FROM stats_summary WHERE name = 'step_sum'",
    "UPDATE stats_summary SET content = '{\"title\": 1}' WHERE name = 'step_sum'",
    "UPDATE stats_summary SET content = repeat('[', 100000) WHERE name = 'step_sum'",
])
def test_stored_tables_that_no_longer_summarize_the_report_are_not_used(change: str, recorded) -> None:
    path = _as_written_now(recorded("program_bmm_loop"))
    assert store(path, minimum=0) is None
    con = duckdb.connect(str(path))
    con.execute(change)
    con.close()
    with Report.open(path) as r:
        kept = stored_stats(r)
    if change.startswith(("UPDATE kernel", "UPDATE meta", "INSERT INTO diagnostic", "UPDATE stats_summary SET basis")):
        assert kept == {}
    else:  # only the table whose row is not the one stored
        assert "step_sum" not in kept and set(kept) == set(STORED_STATS) - {"step_sum"}


def test_other_code_computes_them(recorded, monkeypatch) -> None:
    path = _as_written_now(recorded("program_bmm_loop"))
    assert store(path, minimum=0) is None
    monkeypatch.setattr(stored_module, "code_digest", lambda: "another gpuscope")
    with Report.open(path) as r:
        assert stored_stats(r) == {}


def test_a_report_of_an_older_schema_or_without_them_is_computed(recorded, capsys) -> None:
    old = recorded("program_bmm_loop")
    computed = _stats(capsys, old, "-f", "json")
    assert store(old, minimum=0) is None  # written into a report of schema 5: its reader does not see it
    assert _stored_rows(old) == len(STORED_STATS)
    with Report.open(old) as r:
        assert r.meta["schema_version"] < schema.SCHEMA_VERSION and stored_stats(r) == {}
    assert _stats(capsys, old, "-f", "json") == computed
    small = _as_written_now(recorded("gpt_eager"))
    assert store(small) is None and _stored_rows(small) == 0  # fewer operations than stored ones need
    with Report.open(small) as r:
        assert stored_stats(r) == {}


def test_the_writer_stores_them_when_it_closes_the_report(tmp_path: Path, capsys) -> None:
    calls: list[Path] = []

    def summarize(database: Path) -> str | None:
        calls.append(database)
        return store(database, minimum=0)

    path = tmp_path / "w.gpuscope"
    writer = ReportWriter(path, summarize=summarize)
    writer.close(exit_code=0, exit_signal=None, wall_ns=1, processes=[])
    assert calls == [path] and writer.unsummarized is None
    assert _stored_rows(path) == len(STORED_STATS)
    with Report.open(path) as r:
        assert r.complete and set(stored_stats(r)) == set(STORED_STATS)
    placed = tmp_path / "p.gpuscope"  # written under a name of its own, moved to its name when closed
    create_report(placed, False)
    partial = PartialReport(placed)
    writer = ReportWriter(placed, partial=partial, summarize=summarize)
    writer.close(exit_code=0, exit_signal=None, wall_ns=1, processes=[])
    assert calls[-1] == Path(partial.database) != placed and writer.unplaced is None
    assert _stored_rows(placed) == len(STORED_STATS)
    failing = ReportWriter(tmp_path / "f.gpuscope", summarize=lambda p: "RuntimeError: no")
    failing.close(exit_code=0, exit_signal=None, wall_ns=1, processes=[])
    assert failing.unsummarized == "RuntimeError: no"
    with Report.open(tmp_path / "f.gpuscope") as r:
        assert r.complete and stored_stats(r) == {}


def test_a_synthetic_report_prints_the_same_bytes(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    from synthetic_report import make_report

    path = tmp_path / "s.gpuscope"
    make_report(path, 120_000, names=40)  # stored: more operations than MIN_OPERATIONS
    assert _stored_rows(path) == len(STORED_STATS)
    stored = _outputs(capsys, path)
    con = duckdb.connect(str(path))
    con.execute("DELETE FROM stats_summary")
    con.close()
    assert _outputs(capsys, path) == stored


def test_the_code_digest_covers_every_module_the_stored_reports_import() -> None:
    """A stored table is computed again after any change to the code that computes it: every module
    the stored reports' functions import, directly or not, is one of the digest's."""
    from test_import_graph import import_graph

    graph = import_graph()
    found = stats_reports()
    todo = [found[n].__module__ for n in STORED_STATS] + ["gpuscope.trace.report"]
    seen: set[str] = set()
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += graph.get(module, ())
    covered = [c.removesuffix(".py").replace("/", ".") for c in stored_module.CODE]
    outside = sorted(m for m in seen if not any(m == f"gpuscope.{c}" or m.startswith(f"gpuscope.{c}.")
                                                 for c in covered))
    assert len(seen) > 20 and outside == []


def test_text_of_a_stored_table_is_shown_as_text(recorded, capsys) -> None:
    """A stored table is data from the report, as its rows are: its texts reach the terminal escaped."""
    path = _as_written_now(recorded("program_bmm_loop"))
    assert store(path, minimum=0) is None
    con = duckdb.connect(str(path))
    (content,) = con.execute("SELECT content FROM stats_summary WHERE name = 'launch_sum'").fetchone()  # type: ignore[misc]
    doc = json.loads(content)
    code = "\x1b[2J\u202e"
    doc["title"] += code
    doc["columns"][0][0] += code
    doc["notes"].append(f"a note {code}")
    doc["rows"][0][-1] = f"a name {code}"
    con.execute("UPDATE stats_summary SET content = ? WHERE name = 'launch_sum'", [json.dumps(doc)])
    con.close()
    for fmt in ("table", "csv"):
        shown = _stats(capsys, path, "-r", "launch_sum", "-f", fmt)
        assert "a name" in shown and "\x1b" not in shown and "\u202e" not in shown
