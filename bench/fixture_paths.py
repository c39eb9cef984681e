"""Rewrite the recording machine's checkout path in gzipped report fixtures to a neutral one.

A report keeps the working directory, the environment and the source files of the program it
recorded, as absolute paths. A recording kept as a test fixture should not carry the path of the
machine it was made on, so this replaces a prefix (``--old``, the checkout there) with
:data:`NEUTRAL_ROOT` in every text column of every table, in place:

    python3 bench/fixture_paths.py --old /path/of/the/checkout tests/fixtures/*.gpuscope.gz

Every occurrence of the prefix is replaced, so the analysis sees the same layout under another
root: the program's own files stay under its working directory. ``--check`` only lists the
fixtures that still hold the prefix, in their values or in their file's freed blocks (exit status
1 if any).
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
import tempfile
from pathlib import Path

import duckdb

NEUTRAL_ROOT = "/home/user/project"  # where the fixtures say their programs ran


def _text_columns(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    rows = con.execute("""SELECT c.table_name, c.column_name FROM information_schema.columns c
                          JOIN information_schema.tables t USING (table_schema, table_name)
                          WHERE t.table_type = 'BASE TABLE' AND c.data_type = 'VARCHAR'""").fetchall()
    return [(str(t), str(c)) for t, c in rows]


def rewrite(db: Path, old: str, new: str, check: bool, stale: bool = False) -> int:
    """Replace ``old`` by ``new`` in every text column of ``db``; return the number of values holding it.

    The rewritten database is copied into a fresh file that takes ``db``'s place: an update in place
    leaves the old values in the file's freed blocks (``stale``: the file's bytes hold ``old``, in
    values or in such blocks, so it is copied even where no value holds it any more)."""
    con = duckdb.connect(str(db), read_only=check)
    try:
        found = 0
        like = f"%{old}%"
        for table, column in _text_columns(con):
            q = f'"{table}"."{column}"'
            (n,) = con.execute(f'SELECT count(*) FROM "{table}" WHERE {q} LIKE ?', [like]).fetchone() or (0,)
            found += int(n)
            if n and not check:
                con.execute(f'UPDATE "{table}" SET "{column}" = replace("{column}", ?, ?) WHERE "{column}" LIKE ?',
                            [old, new, like])
    finally:
        con.close()
    if (found or stale) and not check:
        fresh = db.with_name(db.name + ".fresh")
        con = duckdb.connect()
        try:
            con.execute(f"ATTACH '{db}' AS src (READ_ONLY)")
            con.execute(f"ATTACH '{fresh}' AS dst")
            con.execute("COPY FROM DATABASE src TO dst")
        finally:
            con.close()
        fresh.replace(db)
    return found


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--old", required=True, help="the checkout path of the recording machine")
    p.add_argument("--new", default=NEUTRAL_ROOT)
    p.add_argument("--check", action="store_true", help="only list the fixtures that hold --old")
    p.add_argument("fixtures", nargs="+", type=Path)
    args = p.parse_args()
    old = args.old.rstrip("/")
    if not old.startswith("/") or old == "":
        sys.exit("fixture_paths: --old must be an absolute path")
    holding = 0
    for gz in args.fixtures:
        if not gz.name.endswith(".gpuscope.gz"):
            continue
        with tempfile.TemporaryDirectory() as tmp:
            db = Path(tmp) / "report.gpuscope"
            with gzip.open(gz, "rb") as src, open(db, "wb") as dst:
                shutil.copyfileobj(src, dst)
            stale = old.encode() in db.read_bytes()  # in values, or in blocks an update freed
            n = rewrite(db, old, args.new, args.check, stale)
            if n or (stale and args.check):
                holding += 1
                print(f"{gz}: {n} values {'hold' if args.check else 'rewritten from'} the old path"
                      + ("" if n or not stale else " (and freed blocks of the file)"))
            if (n or stale) and not args.check:
                with open(db, "rb") as src, gzip.open(gz, "wb", compresslevel=9) as dst:
                    shutil.copyfileobj(src, dst)
    if args.check and holding:
        sys.exit(1)


if __name__ == "__main__":
    main()
