"""Recorded fixtures say their programs ran under one neutral root (``bench/fixture_paths.py``), not
under the path of the machine that recorded them: the working directory, the environment and the
program's own files of every report kept here."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from bench_module import load_bench

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = sorted((ROOT / "tests" / "fixtures").glob("*.gpuscope.gz"))
paths = load_bench("fixture_paths")


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.name.removesuffix(".gpuscope.gz"))
def test_fixture_ran_under_the_neutral_root(fixture: Path, tmp_path: Path) -> None:
    db = tmp_path / "r.gpuscope"
    with gzip.open(fixture, "rb") as src, open(db, "wb") as dst:
        shutil.copyfileobj(src, dst)
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute("SELECT value FROM meta WHERE key = 'cwd'").fetchall()
    finally:
        con.close()
    if not rows:
        pytest.skip("no working directory recorded (an imported trace)")
    cwd = json.loads(rows[0][0])
    assert cwd is None or cwd == paths.NEUTRAL_ROOT or cwd.startswith(paths.NEUTRAL_ROOT + "/"), cwd


def test_rewrite_replaces_every_value_and_leaves_no_old_bytes(tmp_path: Path) -> None:
    """The tool on a small database of its own: values in two tables rewritten, the freed blocks
    of the update gone from the file, the other values untouched."""
    old = "/srv/build/checkout"
    db = tmp_path / "r.gpuscope"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE meta (key VARCHAR, value VARCHAR)")
    con.execute("CREATE TABLE string (id INTEGER, value VARCHAR)")
    con.execute("INSERT INTO meta VALUES ('cwd', ?), ('argv', '[\"python\"]')", [json.dumps(old)])
    con.execute("INSERT INTO string SELECT i, ? || '/src/f' || i || '.py' FROM range(2000) t(i)", [old])
    con.close()
    gz = tmp_path / "r.gpuscope.gz"
    with open(db, "rb") as src, gzip.open(gz, "wb") as dst:
        shutil.copyfileobj(src, dst)
    run = [sys.executable, str(ROOT / "bench" / "fixture_paths.py"), "--old", old, str(gz)]
    assert subprocess.run([*run[:2], "--check", *run[2:]], capture_output=True).returncode == 1
    subprocess.run(run, check=True, capture_output=True)
    assert subprocess.run([*run[:2], "--check", *run[2:]], capture_output=True).returncode == 0
    raw = gzip.decompress(gz.read_bytes())
    assert old.encode() not in raw
    out = tmp_path / "back.gpuscope"
    out.write_bytes(raw)
    con = duckdb.connect(str(out), read_only=True)
    try:
        (cwd,) = con.execute("SELECT value FROM meta WHERE key = 'cwd'").fetchall()[0]
        assert json.loads(cwd) == paths.NEUTRAL_ROOT
        assert con.execute("SELECT value FROM meta WHERE key = 'argv'").fetchall()[0][0] == '["python"]'
        (seventh,) = con.execute("SELECT value FROM string WHERE id = 7").fetchall()[0]
        assert seventh == paths.NEUTRAL_ROOT + "/src/f7.py"
        assert con.execute("SELECT count(*) FROM string").fetchall()[0][0] == 2000
    finally:
        con.close()


def test_a_program_file_is_read_from_this_checkout_when_the_recorded_path_is_elsewhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hot-line rule reads the program's lines: a report recorded in another checkout finds them
    under the reader's working directory by their path relative to where the program ran."""
    from gpuscope.analysis.diagnosis.rules.cpu_side import local_file, source_text

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "train.py").write_text("x = 1\nlogits = model(tokens)\n")
    monkeypatch.chdir(tmp_path)
    recorded = "/elsewhere/checkout/pkg/train.py"
    assert local_file(recorded, "/elsewhere/checkout") == str(tmp_path / "pkg" / "train.py")
    assert source_text(("f", recorded, 2), recorded_cwd="/elsewhere/checkout") == "logits = model(tokens)"
    assert source_text(("f", recorded, 2)) is None  # without where the program ran: not found
    assert local_file(recorded, "/other/root") == recorded  # not under the directory it ran in
    missing = "/elsewhere/checkout/pkg/missing.py"
    assert local_file(missing, "/elsewhere/checkout") == missing
    assert local_file(recorded, "relative/dir") == recorded
