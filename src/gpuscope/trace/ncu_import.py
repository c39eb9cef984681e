"""Nsight Compute results in a report: reading ncu's CSV, and storing its metrics as ``kernel_metric``.

ncu writes two CSV layouts, both read here: ``--page raw`` (one row per profiled launch, a column
per metric, and a second header row of units) and ``--page details`` (one row per launch and
metric, with ``Metric Name``, ``Metric Unit``, ``Metric Value``). Lines ncu prints around the table
(``==PROF==``, ``==WARNING==``) are skipped. Values lose their thousands separators and are scaled
to base units (``usecond`` to ``nsecond``, ``Mbyte`` to ``byte``: ncu's prefixes are decimal);
``n/a`` and text values are left out.

A profiled launch is matched to the report's kernels by name: the mangled name (what
``gpuscope kernels --ncu`` asks ncu to print), else the demangled name, else the bare function name
when it names one kernel of the report. The ``k``-th profiled launch of a kernel is stored as
launch ``k`` of that kernel (counting from 0), so that it lines up with the ``k``-th launch in the
report when ncu ran the same program from its start.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from ..errors import GpuscopeError
from . import schema
from .report import Report

KERNEL_METRICS_SINCE = 4  # the schema version that added the kernel_metric table
_TIME = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}
_PREFIXED = re.compile(r"^([KMGT]?)(byte|inst|cycle|warp|sector|request|thread|block|ops?)(/second|/nsecond)?$")
_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


@dataclass
class NcuLaunch:
    """One launch ncu profiled: its ``ID`` in the run, process, kernel name as printed, and metrics
    as ``name -> (value in base units, base unit)``."""

    id: int
    pid: int | None
    kernel: str
    metrics: dict[str, tuple[float, str]] = field(default_factory=dict)


def to_base(value: float, unit: str) -> tuple[float, str]:
    """Return ``value`` in ``unit`` scaled to its base unit: ``(1.5, 'usecond')`` -> ``(1500.0, 'nsecond')``."""
    if unit in _TIME:
        return value * _TIME[unit], "nsecond"
    m = _PREFIXED.match(unit)
    if m:
        prefix, base, per = m.groups()
        return value * _PREFIX[prefix], base + (per or "")
    return value, unit


def _number(text: str) -> float | None:
    text = text.strip().replace(",", "")
    if not text or text.lower() in ("n/a", "nan"):
        return None
    try:
        return float(text)
    except ValueError:
        return None  # a text metric (a cache configuration, a name): not a number to keep


def parse_csv(text: str) -> list[NcuLaunch]:
    """Return the launches of an ncu CSV (raw or details page), in ncu's ID order."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("==")]
    start = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith('"ID"') or ln.startswith("ID,")), None)
    if start is None:
        raise GpuscopeError("not an Nsight Compute CSV: no header row starting with \"ID\" "
                            "(write one with ncu --csv --page raw)")
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header = rows[0]
    col = {name: i for i, name in enumerate(header)}
    if "Kernel Name" not in col:
        raise GpuscopeError("not an Nsight Compute CSV: no \"Kernel Name\" column")
    launches: dict[int, NcuLaunch] = {}

    def launch(row: list[str]) -> NcuLaunch | None:
        ident = _number(row[col["ID"]])
        if ident is None:
            return None
        pid = _number(row[col["Process ID"]]) if "Process ID" in col else None
        key = int(ident)
        if key not in launches:
            launches[key] = NcuLaunch(key, int(pid) if pid is not None else None, row[col["Kernel Name"]])
        return launches[key]

    if "Metric Name" in col:  # the details page: a row per metric
        for row in rows[1:]:
            found = launch(row) if len(row) == len(header) else None
            value = _number(row[col["Metric Value"]]) if found else None
            if found is not None and value is not None:
                unit = row[col["Metric Unit"]] if "Metric Unit" in col else ""
                found.metrics[row[col["Metric Name"]]] = to_base(value, unit)
        return [launches[k] for k in sorted(launches)]
    units = [""] * len(header)
    body = rows[1:]
    if body and body[0] and not body[0][col["ID"]].strip():  # the raw page's row of units
        units, body = body[0], body[1:]
    metric_cols = [(i, name) for i, name in enumerate(header) if "__" in name]
    for row in body:
        if len(row) != len(header):
            continue
        found = launch(row)
        if found is None:
            continue
        for i, name in metric_cols:
            value = _number(row[i])
            if value is not None:
                found.metrics[name] = to_base(value, units[i] if i < len(units) else "")
    return [launches[k] for k in sorted(launches)]


def function_name(name: str) -> str:
    """Return a kernel's bare function name: no return type, parameters, template arguments or
    namespaces (``void at::native::f<4>(int)`` -> ``f``), as ncu prints with its default name base."""
    text = name.strip()
    depth, cut = 0, len(text)
    for i in range(len(text) - 1, -1, -1):  # drop the parameter list: the last balanced (...)
        if text[i] == ")":
            depth += 1
        elif text[i] == "(":
            depth -= 1
            if depth == 0:
                cut = i
                break
    text = text[:cut] if text.endswith(")") else text
    out, depth = [], 0
    for ch in text:  # drop template arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(ch)
    bare = "".join(out).split()[-1] if "".join(out).split() else text
    return bare.split("::")[-1]


@dataclass
class Matched:
    """ncu launches matched to the report's kernels: rows for ``kernel_metric`` and what did not match."""

    rows: list[tuple[int, int, int, str, float, str]]  # name_id, launch, ncu_id, metric, value, unit
    kernels: int
    launches: int
    unmatched: list[str]


def match(report: Report, launches: list[NcuLaunch]) -> Matched:
    """Match ``launches`` to the kernels of ``report`` by name (see the module docstring)."""
    configs = report.sql(
        "SELECT DISTINCT c.name_id, n.value, m.value FROM kernel_config c "
        "JOIN string n ON n.id = c.name_id JOIN string m ON m.id = c.mangled_id"
    )
    by_mangled = {m: nid for nid, _, m in configs}
    by_name = {n: nid for nid, n, _ in configs}
    by_function: dict[str, set[int]] = {}
    for nid, n, _ in configs:
        by_function.setdefault(function_name(n), set()).add(nid)
    rows: list[tuple[int, int, int, str, float, str]] = []
    seen: dict[int, int] = {}
    unmatched: list[str] = []
    for launch in launches:
        nid = by_mangled.get(launch.kernel, by_name.get(launch.kernel))
        if nid is None:
            candidates = by_function.get(function_name(launch.kernel), set())
            nid = next(iter(candidates)) if len(candidates) == 1 else None
        if nid is None:
            if launch.kernel not in unmatched:
                unmatched.append(launch.kernel)
            continue
        k = seen.get(nid, 0)
        seen[nid] = k + 1
        rows += [(nid, k, launch.id, metric, value, unit) for metric, (value, unit) in launch.metrics.items()]
    return Matched(rows, len(seen), sum(seen.values()), unmatched)


def store(path: Path, matched: Matched) -> None:
    """Write matched metrics into the report file at ``path`` (no other program may have it open),
    replacing earlier metrics of the same kernels."""
    try:
        con = duckdb.connect(str(path))
    except duckdb.Error as exc:
        raise GpuscopeError(f"cannot write kernel metrics into {path}: {str(exc).splitlines()[0]}") from None
    try:
        (version,) = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() or (None,)
        if version is None or not KERNEL_METRICS_SINCE <= int(version) <= schema.SCHEMA_VERSION:
            raise GpuscopeError(f"{path} is a report of schema version {version}: only reports of version "
                                f"{KERNEL_METRICS_SINCE} to {schema.SCHEMA_VERSION} hold kernel metrics; record it again")
        con.execute(f"CREATE TABLE IF NOT EXISTS kernel_metric ({schema.TABLES['kernel_metric']}\n)")
        con.execute("BEGIN")
        names = sorted({r[0] for r in matched.rows})
        if names:
            con.execute(f"DELETE FROM kernel_metric WHERE name_id IN ({', '.join(map(str, names))})")
            con.executemany("INSERT INTO kernel_metric VALUES (?, ?, ?, ?, ?, ?)", matched.rows)
        con.execute("COMMIT")
        con.execute("CHECKPOINT")
    finally:
        con.close()
