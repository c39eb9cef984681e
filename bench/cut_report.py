"""Cut a recorded report to a few dozen steady steps, to keep as a small test fixture.

    python3 bench/cut_report.py REPORT OUT.gpuscope.gz [--before 40] [--after 40] [--probe] [--frac 0.6]

The report (a DuckDB file, not gzipped) is copied; its capture windows are narrowed to the kept
span, and the writer's own trim (gpuscope.trace.trim) drops what was launched outside them, with
the step marks, host counters, thread times and CUPTI overhead records outside too. The operators
recorded with shapes (the first steps' operators, ``torch_op_window``) are kept with their own
steps, since the analysis takes kernels' FLOPs and bytes from them. The span:

- with ``--probe`` and an overhead probe: ``--before`` steps before the last probe to ``--after``
  steps after it (the probe's measurement kept);
- else, with step marks: ``--before + --after`` steps from the fraction ``--frac`` of the run;
- without marks: ``--before`` thousandths of the kernels' time span from ``--frac``.

Check that ``gpuscope analyze`` ranks the cut report's findings as the whole one's, with shares
within a point, before keeping it (tests/fixtures/client_* were checked so).
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import tempfile
from pathlib import Path
from typing import Any

import duckdb

from gpuscope.trace import trim as trim_mod

STEP_MARKS = """SELECT r.source, r.start_ns FROM nvtx_range r JOIN string n ON n.id = r.name_id
    WHERE r.kind = 'mark' AND ((r.category = 'step' AND n.value = 'step' AND r.source IN ('gpuscope', 'torch'))
    OR (r.category = 'iteration' AND n.value = 'iteration' AND r.source = 'module')) ORDER BY r.start_ns"""


def _marks(con: Any) -> list[int]:
    by: dict[str, list[int]] = {}
    for source, t in con.execute(STEP_MARKS).fetchall():
        by.setdefault(source, []).append(int(t))
    return next((by[s] for s in ("gpuscope", "torch", "module") if len(by.get(s, [])) > 5), [])


def span(con: Any, before: int, after: int, frac: float, probe: bool) -> tuple[int, int]:
    """The kept span [t0, t1] (ns)."""
    wins = [(int(a), int(b) if b is not None else trim_mod.FOREVER) for a, b in con.execute(
        "SELECT start_ns, end_ns FROM capture_window ORDER BY start_ns").fetchall()]
    marks = _marks(con)
    if probe and len(wins) >= 2 and marks:
        g0, g1 = wins[-2][1], wins[-1][0]  # the last probe's gap
        i0 = max(i for i, t in enumerate(marks) if t <= g0)
        i1 = min(i for i, t in enumerate(marks) if t >= g1)
        return marks[max(0, i0 - before)], marks[min(len(marks) - 1, i1 + after)] + 1
    if marks:
        i = int(len(marks) * frac)
        return marks[i], marks[min(len(marks) - 1, i + before + after)] + 1
    lo, hi = con.execute("SELECT min(start_ns), max(end_ns) FROM kernel").fetchone()
    start = int(lo + (hi - lo) * frac)
    return start, int(start + (hi - lo) * before / 1000)


def cut(src: Path, dst: Path, before: int, after: int, frac: float, probe: bool) -> tuple[int, int]:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work.duckdb"
        shutil.copy(src, work)
        con = duckdb.connect(str(work))
        t0, t1 = span(con, before, after, frac, probe)
        ranges = [(t0, t1)]
        ops = con.execute("SELECT min(start_ns), max(end_ns) FROM torch_op_window").fetchone()
        if ops[0] is not None and ops[1] < t0:
            ranges.insert(0, (int(ops[0]), int(ops[1])))
        windowed = con.execute("SELECT count(*) FROM capture_window").fetchone()[0]
        if windowed:
            con.execute("CREATE TEMP TABLE whole_windows AS SELECT * FROM capture_window")
            con.execute("DELETE FROM capture_window")
            for a, b in ranges:
                con.execute("""INSERT INTO capture_window SELECT * REPLACE (greatest(start_ns, $a) AS start_ns,
                                   least(coalesce(end_ns, $b), $b) AS end_ns) FROM whole_windows
                               WHERE coalesce(end_ns, $b) > $a AND start_ns < $b""", {"a": a, "b": b})
            con.execute("DELETE FROM capture_window WHERE end_ns <= start_ns")
        else:
            con.execute("INSERT INTO capture_window (pid, start_ns, end_ns, reason) SELECT pid, ?, ?, 'cut' "
                        "FROM process", [t0, t1])
        saved = dict(trim_mod._TRIMMED)
        trim_mod._TRIMMED.pop("torch_op", None)  # the operators with shapes stay, whatever their step
        try:
            trim_mod.trim(con)
        finally:
            trim_mod._TRIMMED.clear()
            trim_mod._TRIMMED.update(saved)
        if not windowed:
            con.execute("DELETE FROM capture_window")
        inside = " OR ".join(f"(t BETWEEN {a} AND {b})" for a, b in ranges)
        con.execute(f"DELETE FROM nvtx_range WHERE kind = 'mark' AND NOT ({inside.replace('t BETWEEN', 'start_ns BETWEEN')})")
        for table, col in (("host_counter", "ts_ns"), ("thread_time", "ts_ns"), ("overhead", "start_ns")):
            con.execute(f"DELETE FROM {table} WHERE NOT ({inside.replace('t BETWEEN', col + ' BETWEEN')})")
        con.execute("CHECKPOINT")
        con.close()
        out = Path(tmp) / "out.duckdb"  # a fresh file: DuckDB keeps a deleted row's pages
        fresh = duckdb.connect(str(out))
        fresh.execute(f"ATTACH '{work}' AS src (READ_ONLY)")
        fresh.execute("COPY FROM DATABASE src TO out")
        fresh.execute("DETACH src")
        fresh.execute("CHECKPOINT")
        fresh.close()
        with open(out, "rb") as fi, gzip.open(dst, "wb", 9) as fo:
            shutil.copyfileobj(fi, fo)
    return t0, t1


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("report")
    p.add_argument("out")
    p.add_argument("--before", type=int, default=40)
    p.add_argument("--after", type=int, default=40)
    p.add_argument("--frac", type=float, default=0.6)
    p.add_argument("--probe", action="store_true", help="keep the last overhead probe and the steps around it")
    a = p.parse_args()
    t0, t1 = cut(Path(a.report), Path(a.out), a.before, a.after, a.frac, a.probe)
    print(f"{a.out}: {(t1 - t0) / 1e6:.1f} ms kept, {Path(a.out).stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
