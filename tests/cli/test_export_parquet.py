"""``gpuscope export --format parquet``: one Parquet file per table, the same rows and columns as the
report, read back here with DuckDB; a bad report leaves no folder behind."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
from import_helpers import gpuscope_cli

from gpuscope.trace import schema
from gpuscope.trace.report import Report


def test_every_table_round_trips(recorded, tmp_path: Path) -> None:
    report = recorded("mlp_api")
    res = gpuscope_cli("export", str(report), "-f", "parquet", "-o", "out", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert f"wrote out/ ({len(schema.TABLES)} tables" in res.stderr
    folder = tmp_path / "out"
    doc = json.loads((folder / "schema.json").read_text())
    assert doc["schema_version"] == schema.SCHEMA_VERSION and set(doc["tables"]) == set(schema.TABLES)
    con = duckdb.connect()
    with Report.open(report) as r:
        for table in schema.TABLES:
            path = str(folder / f"{table}.parquet")
            cols = [row[0] for row in con.execute(f"DESCRIBE SELECT * FROM '{path}'").fetchall()]
            assert cols == schema.columns(table)
            assert con.execute(f"SELECT count(*) FROM '{path}'").fetchone()[0] == r.count(table) == doc["rows"][table]
        ours = r.sql("SELECT sum(end_ns - start_ns), sum(correlation_id) FROM kernel")[0]
        assert con.execute(f"SELECT sum(end_ns - start_ns), sum(correlation_id) FROM '{folder}/kernel.parquet'"
                           ).fetchone() == ours
    again = gpuscope_cli("export", str(report), "-f", "parquet", "-o", "out", cwd=tmp_path)
    assert again.returncode == 2 and "exists" in again.stderr


def test_bad_report_leaves_nothing(tmp_path: Path) -> None:
    (tmp_path / "junk.gpuscope").write_bytes(b"junk" * 100)
    res = gpuscope_cli("export", "junk.gpuscope", "-f", "parquet", cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.startswith("gpuscope: error: junk.gpuscope")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junk.gpuscope"]


def test_the_closing_line_says_what_pandas_needs(recorded, tmp_path: Path) -> None:
    import importlib.util
    import tomllib

    extras = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())[
        "project"]["optional-dependencies"]
    assert any(dep.startswith("pyarrow") for dep in extras["parquet"])
    res = gpuscope_cli("export", str(recorded("cpu_one_thread")), "-f", "parquet", "-o", "out", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    note = "pandas.read_parquet needs pyarrow, which is not installed: pip install 'gpuscope[parquet]'"
    engine = any(importlib.util.find_spec(m) is not None for m in ("pyarrow", "fastparquet"))
    assert (note in res.stderr) == (not engine), res.stderr
