"""What a report's database may hold: gpuscope's tables as plain data, nothing that runs.

A report is data from anywhere. DuckDB stores views, macros, sequences, types, indexes and column
expressions in the file, and would run them when gpuscope reads a table of that name; so before
any query touches the report, its catalog is read (through DuckDB's own table functions, named with
their ``system`` catalog so that nothing in the report can stand in for them) and the report is
refused unless it holds only the tables of its schema version, each a base table with the columns
and types of docs/report-format.md.
"""

from __future__ import annotations

from typing import Any

import duckdb

from . import schema


class CatalogProblem(Exception):
    """Why a database is not a gpuscope report; ``damaged`` when it is one with parts missing or
    retyped (rather than something else, or one holding objects a report never holds)."""

    def __init__(self, reason: str, damaged: bool = False) -> None:
        super().__init__(reason)
        self.damaged = damaged


def _rows(con: duckdb.DuckDBPyConnection, function: str, columns: str, db: str) -> list[tuple[Any, ...]]:
    # the WHERE is on a constant parameter: no function of the report's can take part
    return con.execute(f"SELECT {columns} FROM system.main.{function}() WHERE database_name = ?", [db]).fetchall()


def _foreign_objects(con: duckdb.DuckDBPyConnection, db: str) -> str | None:
    """Return the first object of ``db`` that a report never holds, as words (None if there is none)."""
    for (name, internal) in _rows(con, "duckdb_views", "view_name, internal", db):
        if not internal:
            return f"a view named {name}"
    for (name, kind) in _rows(con, "duckdb_functions", "function_name, function_type", db):
        return f"a {str(kind).replace('_', ' ')} named {name}"
    for (name,) in _rows(con, "duckdb_sequences", "sequence_name", db):
        return f"a sequence named {name}"
    for (name,) in _rows(con, "duckdb_indexes", "index_name", db):
        return f"an index named {name}"
    for (name, internal) in _rows(con, "duckdb_types", "type_name, internal", db):
        if not internal:
            return f"a type named {name}"
    for (name, internal) in _rows(con, "duckdb_schemas", "schema_name, internal", db):
        if not internal and name != "main":
            return f"a schema named {name}"
    for (name, schema_name, temporary) in _rows(con, "duckdb_tables", "table_name, schema_name, temporary", db):
        if schema_name != "main" or temporary:
            return f"a table named {schema_name}.{name}"
        if name not in schema.TABLES:
            return f"a table named {name}, which is no table of a report"
    return None


def _column_problem(table: str, found: list[tuple[Any, ...]], expected: dict[str, str]) -> str | None:
    """Return what is wrong with ``table``'s columns (name, type, default), or None."""
    have = {str(name): (str(kind), default) for name, kind, default in found}
    for name, (kind, default) in have.items():
        if default is not None:
            return f"column {table}.{name} has a stored default or computed value"
        if name not in expected:
            return f"table {table} has a column {name} that a report does not have"
    for name, kind in expected.items():
        if name not in have:
            return f"table {table} lacks its column {name}"
        if have[name][0] != kind:
            return f"column {table}.{name} is {have[name][0]}, not {kind}"
    return None


def check(con: duckdb.DuckDBPyConnection, db: str) -> None:
    """Raise :class:`CatalogProblem` unless the attached database ``db`` holds only base tables of
    gpuscope's schema (any version) with their columns and types, ``meta`` among them. Run it
    before the report is the connection's default database."""
    foreign = _foreign_objects(con, db)
    if foreign:
        raise CatalogProblem(f"it holds {foreign}")
    tables = {name for (name,) in _rows(con, "duckdb_tables", "table_name", db)}
    if "meta" not in tables:
        raise CatalogProblem("it has no meta table")
    columns = _rows(con, "duckdb_columns", "table_name, column_name, data_type, column_default", db)
    meta = [(c, t, d) for table, c, t, d in columns if table == "meta"]
    problem = _column_problem("meta", meta, schema.column_types("meta"))
    if problem:
        raise CatalogProblem(problem, damaged=True)


def check_tables(con: duckdb.DuckDBPyConnection, db: str, version: int) -> list[str]:
    """Raise :class:`CatalogProblem` (damaged) unless ``db`` holds every table a report of schema
    ``version`` holds, each with that version's columns and types; return the tables it may lack
    and lacks (the reader gives it empty ones)."""
    tables = {name for (name,) in _rows(con, "duckdb_tables", "table_name", db)}
    required, optional = schema.tables_of(version)
    for table in required:
        if table not in tables:
            raise CatalogProblem(f"table {table} is missing", damaged=True)
    columns: dict[str, list[tuple[Any, ...]]] = {}
    for table, name, kind, default in _rows(con, "duckdb_columns",
                                             "table_name, column_name, data_type, column_default", db):
        columns.setdefault(str(table), []).append((name, kind, default))
    for table in sorted(tables):
        problem = _column_problem(table, columns.get(table, []), schema.stored_columns(table, version))
        if problem:
            raise CatalogProblem(problem, damaged=True)
    return [t for t in optional if t not in tables]
