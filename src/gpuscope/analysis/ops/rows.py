"""The GPU operations of :func:`.attribution.ops_table` read straight into numpy, in an order of
their columns, without the table.

The table is the operations sorted into launch order (``op_id`` is the position), and DuckDB's sort
of ten million of them took 2-4 s and held them in its buffer (0.9 GB at a time). A reader that
wants every operation in some order of its own (the diagnosis's timeline, the step-pattern tokens)
needs neither: :func:`op_frame` reads the unsorted rows of the same query at once, puts the sort
keys that vary in order (a stable numpy sort of the first, the runs it leaves tied sorted by the
rest), and numbers the operations by the rank of :data:`.attribution.OP_ORDER` among them: the same
``op_id`` as the table's. Where the first keys are read as columns anyway and no ids are asked for,
the keys that only break ties are read again for the tied operations alone. Where the table is
already made, or a key has NULLs, or two operations tie on every key of the launch order (their
ids would then be DuckDB's choice), or there are none, it reads the table
(:func:`.attribution.ordered_frame`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING

from ...trace.report import Report
from ..column_fetch import fetch_arrays
from ..heap import give_back
from .sql import op_queries

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

# the kinds in the order of their names: the launch order sorts the text
_KIND_TEXT_ORDER = "ENUM('graph', 'kernel', 'memcpy', 'memset')"


def op_frame(report: Report, columns: Mapping[str, str], order: Sequence[str],
             codes: Mapping[str, Sequence[str]] | None = None, compact: Collection[str] | None = None) -> pd.DataFrame:
    """``ordered_frame(report, "SELECT <columns> FROM ops_table(report)", order, codes)``, without
    the table where it is not made yet (see the module docstring).

    ``columns`` maps each column of the result to its SQL over the table's columns (``op_id``: the
    operation's id, which only the name ``op_id`` may select); ``order`` names columns of the table,
    ``op_id`` last. Every column's values, its type and the row order are those of the table's;
    with ``compact`` (column names, possibly none), read from the rows, a column of one value may
    come as that value viewed read-only for every row, and the named integer columns as 32-bit
    integers where every value fits (:func:`..column_fetch.fetch_arrays`): the frame is then read,
    never written."""
    from .attribution import OP_ORDER, OPS, _exists, ops_table, ordered_frame

    def from_table() -> pd.DataFrame:
        extra = [k for k in order if k not in columns]  # keys read, not kept
        select = ", ".join(f"{sql} AS {name}" for name, sql in {**columns, **{k: k for k in extra}}.items())
        frame = ordered_frame(report, f"SELECT {select} FROM {ops_table(report)}", order, dict(codes or {}))
        return frame.drop(columns=extra) if extra else frame

    if _exists(report, f"{OPS}_sorted"):
        return from_table()
    launch = [k.strip() for k in OP_ORDER.split(",")]
    own = [k for k in order if k != "op_id"]
    frame = _read(report, columns, own, launch if "op_id" in order or "op_id" in columns else [], codes or {},
                  compact)
    return from_table() if frame is None else frame


def _read(report: Report, columns: Mapping[str, str], own: list[str], launch: list[str],
          codes: Mapping[str, Sequence[str]], compact: Collection[str] | None = None) -> pd.DataFrame | None:
    """:func:`op_frame` from the unsorted rows, or None where it must read the table: ordered by the
    keys ``own``, then by ``launch`` (the launch order, which numbers them); ``compact`` as there."""
    import numpy as np
    import pandas as pd

    from .attribution import OPS, _array_kind, _categorical, _nullable

    with report.deadline():
        kept = report.con.execute("SELECT current_setting('preserve_insertion_order')").fetchone()
    if not (kept and kept[0]):
        return None
    placed, query = op_queries(f"{OPS}_placed")
    keys = list(dict.fromkeys(own + launch))
    key_sql = {k: (f"enum_code(kind::{_KIND_TEXT_ORDER})" if k == "kind" else k) for k in keys}
    # a column that is a key (but the kind, a code there) is read as the key
    as_key = {name: sql for name, sql in columns.items() if sql in key_sql and sql != "kind"}
    parts = [f"{sql} AS k_{k}" for k, sql in key_sql.items()]
    parts += [f"{sql} AS c_{name}" for name, sql in columns.items() if name != "op_id" and name not in as_key]
    report.sql(f"CREATE OR REPLACE TEMP TABLE {OPS}_placed AS {placed}")
    try:
        prefix = _prefix(keys, as_key) if "op_id" not in columns else []
        if prefix:
            staged = _read_staged(report, query, columns, keys, prefix, as_key, codes)
            if staged is not None:
                return None if staged is _DUCKDB else staged
        # every column at once, as the rows come: a table of them read a column at a time took as long
        # again, and held them in DuckDB's buffer as well
        narrow = None if compact is None else (
            [f"c_{name}" for name in compact] + [f"k_{as_key[name]}" for name in compact if name in as_key])
        fetched = fetch_arrays(report, f"SELECT {', '.join(parts)} FROM ({query})", rows=_count(report),
                               compact=narrow)
    finally:
        report.sql(f"DROP TABLE IF EXISTS {OPS}_placed")
    n = len(fetched[f"k_{keys[0]}"]) if keys else 0
    if not n or not keys:
        return None  # the table of none costs nothing, and gives the empty frame its types
    arrays = {}
    for k in keys:
        a = fetched[f"k_{k}"]
        if _array_kind(a) != "plain" or a.dtype.kind not in "iu":
            return None  # a key with NULLs is left to DuckDB's sort
        if a.min() != a.max():  # keys of one value order nothing
            arrays[k] = a  # in its own type (32-bit ids as they came): the order is the same
    launch_keys = [arrays[k] for k in launch if k in arrays]
    order_keys = [arrays[k] for k in keys if k in arrays]
    # orders as positions, None where the rows come in that order (one stream's operations, most
    # runs): then neither a sort nor a gather of each column in that order
    if "op_id" in columns and launch:
        by_launch, tied = _order(launch_keys, n)
        if tied:
            return None  # ids of operations alike in every key would be DuckDB's choice
        # the ids as 32-bit integers where they may be and fit (ten million of them: 40 MB less)
        id_type = np.int32 if compact is not None and "op_id" in compact and n < 2**31 - 1 else np.int64
        if by_launch is None:
            rank = np.arange(1, n + 1, dtype=id_type)
        else:
            rank = np.empty(n, dtype=id_type)
            step = 1 << 20  # a batch at a time: no array of every id beside the order and the ranks
            for a in range(0, n, step):
                b = min(a + step, n)
                rank[by_launch[a:b]] = np.arange(a + 1, b + 1, dtype=id_type)
        del by_launch
        # the order's own keys, then the launch order
        at, _ = _order([arrays[k] for k in own if k in arrays] + [rank], n)
    else:
        rank = None
        at, tied = _order(order_keys, n)
        if tied:
            return None
    del arrays, order_keys, launch_keys
    give_back()  # the sorts' freed arrays not resident beside the columns put in order below
    for k in keys:
        if k not in as_key.values():
            del fetched[f"k_{k}"]
    if at is not None and n < 2**31:  # the positions as 32-bit integers (ten million: 40 MB less held)
        at = at.astype(np.int32)
    source = {name: f"k_{sql}" if name in as_key else f"c_{name}" for name, sql in columns.items() if name != "op_id"}
    left = list(source.values())  # each read freed after its last use
    out: dict[str, object] = {}
    for name in columns:
        if name == "op_id":
            out[name] = rank if at is None else _gather(rank, at)
            del rank
            continue
        left.remove(source[name])
        a = fetched[source[name]] if source[name] in left else fetched.pop(source[name])
        kind = _array_kind(a)
        if len(a) != n or (kind is None and name not in codes):
            return None
        if at is not None and not _one_value(a):  # one value viewed for every row: in any order
            a = _gather(a, at)
        out[name] = (_categorical(a, codes[name]) if name in codes
                     else _nullable(a) if kind == "masked" else a)
    return pd.DataFrame(out, copy=False)


def _gather(a: np.ndarray, at: np.ndarray, step: int = 1 << 20) -> np.ndarray:
    """``a[at]`` (a plain or masked array), ``step`` positions at a time: positions held as 32-bit
    integers are not copied to 64-bit ones all at once (ten million: 80 MB)."""
    import numpy as np

    if isinstance(a, np.ma.MaskedArray):
        return np.ma.MaskedArray(_gather(np.ma.getdata(a), at, step), mask=_gather(np.ma.getmaskarray(a), at, step))
    out = np.empty(len(at), dtype=a.dtype)
    for i in range(0, len(at), step):
        np.take(a, at[i:i + step], out=out[i:i + step], mode="wrap")
    return out


def _one_value(a: np.ndarray) -> bool:
    """Whether ``a`` (plain or masked) is one value viewed for every row (see ``compact``)."""
    import numpy as np

    masked = isinstance(a, np.ma.MaskedArray)
    return len(a) > 1 and np.ma.getdata(a).strides == (0,) and (not masked or np.ma.getmaskarray(a).strides == (0,))


def _count(report: Report) -> int:
    """How many operations the query gives: one per record of each kind."""
    return sum(report.count(t) for t in ("kernel", "memcpy", "memset", "graph_launch"))


_DUCKDB = object()  # what _read_staged gives where the table must be read
MOST_TIED = 100_000  # operations tied on the first keys read again with the others, at most


def _prefix(keys: list[str], as_key: Mapping[str, str]) -> list[str]:
    """The first keys, up to one that is not read as a column, where some keys come after them."""
    wanted = set(as_key.values())
    n = 0
    while n < len(keys) and keys[n] in wanted:
        n += 1
    return keys[:n] if 0 < n < len(keys) else []


def _read_staged(report: Report, query: str, columns: Mapping[str, str], keys: list[str], prefix: list[str],
                 as_key: Mapping[str, str], codes: Mapping[str, Sequence[str]]) -> pd.DataFrame | object | None:
    """:func:`_read` of operations whose first keys (``prefix``, read as columns anyway) rarely tie:
    the columns and those keys read first, put in order, and the keys after them read only for the
    operations tied on the first ones, whose rows are then put in order among themselves: the
    result is held once, not beside the keys that only break ties (a tenth of a gigabyte each at ten
    million operations). None where too many tie (the caller reads every key at once); _DUCKDB
    where the table must be read."""
    import numpy as np
    import pandas as pd

    from .attribution import _array_kind, _categorical, _nullable

    rest = keys[len(prefix):]
    as_key = {name: k for name, k in as_key.items() if k in prefix}  # the other keys come as columns
    values = [name for name in columns if name not in as_key]
    parts = [f"{k} AS k_{k}" for k in prefix] + [f"{columns[name]} AS c_{name}" for name in values]
    got = fetch_arrays(report, f"SELECT {', '.join(parts)} FROM ({query})", rows=_count(report))
    n = len(got[f"k_{prefix[0]}"])
    if not n:
        return _DUCKDB
    first = []
    for k in prefix:
        a = got[f"k_{k}"]
        if _array_kind(a) != "plain" or a.dtype.kind not in "iu":
            return _DUCKDB
        first.append(a)
    varying = [a.astype(np.int64, copy=False) for a in first if a.min() != a.max()]
    # rows that come in order (one stream's operations, most runs) are taken as they are: no sort,
    # and no copy of each column in that order
    at = None if in_order(varying, n) else _lexsort(varying, n)[0]
    del varying
    same = np.ones(n - 1, dtype=bool)
    for a in first:
        s = a if at is None else a[at]
        same &= s[1:] == s[:-1]
    del s
    inside = np.zeros(n, dtype=bool)
    inside[:-1] |= same
    inside[1:] |= same
    pos = np.flatnonzero(inside)  # places in the order of the operations tied on the first keys
    if len(pos) > MOST_TIED:
        return None
    source = {name: f"k_{as_key[name]}" if name in as_key else f"c_{name}" for name in columns}
    left = list(source.values())  # each read freed after its last use
    out: dict[str, np.ndarray] = {}
    for name in columns:
        left.remove(source[name])
        if source[name] in left:  # read for another column too: this one's own copy
            out[name] = got[source[name]].copy() if at is None else got[source[name]][at]
        else:
            out[name] = got.pop(source[name]) if at is None else got.pop(source[name])[at]
    del got, first
    if len(pos):
        # the tied operations again, with every key: those of the tied first keys' values
        tied = {k: out[next(c for c, v in as_key.items() if v == k)][pos] for k in prefix}
        start = "start_ns" if "start_ns" in prefix else prefix[-1]
        more = [f"{k} AS k_{k}" for k in prefix] + [
            f"{'enum_code(kind::' + _KIND_TEXT_ORDER + ')' if k == 'kind' else k} AS k_{k}" for k in rest]
        more += [f"{columns[name]} AS c_{name}" for name in values]
        with report.deadline():
            again = report.con.execute(f"SELECT {', '.join(more)} FROM ({query}) WHERE {start} IN "
                                       f"(SELECT unnest(?))", [np.unique(tied[start]).tolist()]).fetchnumpy()
        # of those, the rows whose first keys are those of a tied run
        wanted = pd.MultiIndex.from_arrays([tied[k] for k in prefix]).unique()
        mine = pd.MultiIndex.from_arrays([np.asarray(again[f"k_{k}"]) for k in prefix]).isin(wanted)
        full = []
        for k in keys:
            a = again[f"k_{k}"]
            if _array_kind(a) != "plain" or a.dtype.kind not in "iu":
                return _DUCKDB
            full.append(a[mine].astype(np.int64, copy=False))
        if len(full[0]) != len(pos):
            return None
        order, tie = _lexsort(full, len(pos))
        if tie:
            return _DUCKDB  # operations alike in every key: their order would be DuckDB's choice
        for name in columns:
            src = again[f"k_{as_key[name]}" if name in as_key else f"c_{name}"]
            out[name][pos] = np.asarray(src)[mine][order] if _array_kind(src) != "masked" else src[mine][order]
    frame: dict[str, object] = {}
    for name in columns:
        a = out.pop(name)
        kind = _array_kind(a)
        if kind is None and name not in codes:
            return _DUCKDB
        frame[name] = (_categorical(a, codes[name]) if name in codes
                       else _nullable(a) if kind == "masked" else a)
    return pd.DataFrame(frame, copy=False)


def _scan(keys: list[np.ndarray], n: int, step: int) -> tuple[bool, bool]:
    """Whether the rows are in the order of ``keys`` (first key first), and whether two neighbours
    are equal in every key (so far, where they are not in order). Looked at ``step`` rows at a time,
    so that no temporary array is of all of them."""
    import numpy as np

    tied = False
    for a in range(0, n - 1, step):
        b = min(a + step, n - 1)
        undecided = np.ones(b - a, dtype=bool)  # pairs equal in every key so far
        for k in keys:
            x, y = k[a:b], k[a + 1:b + 1]
            if (undecided & (x > y)).any():
                return False, tied
            undecided &= x == y
        tied = tied or bool(undecided.any())
    return True, tied


def in_order(keys: list[np.ndarray], n: int, step: int = 1 << 20) -> bool:
    """Whether the rows are already in the order of ``keys`` (first key first; rows equal in every
    key count as in order): a stable sort of them would leave them where they are."""
    return _scan(keys, n, step)[0]


def _order(keys: list[np.ndarray], n: int, step: int = 1 << 20) -> tuple[np.ndarray | None, bool]:
    """:func:`_lexsort` of ``keys``, with None for the order where the rows are in it already
    (looked at ``step`` rows at a time): the same order and the same answer on ties."""
    if not keys or n < 2:
        return _lexsort(keys, n)
    ordered, tied = _scan(keys, n, step)
    # rows equal in every key are neighbours in sorted rows
    return (None, tied) if ordered else _lexsort(keys, n)


def _tied(key: np.ndarray, at: np.ndarray, step: int = 1 << 20) -> np.ndarray:
    """Whether each row of ``key`` taken in the order ``at`` equals the next one, read ``step`` rows
    at a time: no copy of the whole key in that order (ten million operations: 80 MB less at the
    read's peak)."""
    import numpy as np

    n = len(at)
    tied = np.empty(max(n - 1, 0), dtype=bool)
    for a in range(0, n - 1, step):
        v = key[at[a:min(a + step, n - 1) + 1]]
        np.equal(v[1:], v[:-1], out=tied[a:a + len(v) - 1])
    return tied


def _lexsort(keys: list[np.ndarray], n: int) -> tuple[np.ndarray, bool]:
    """``np.lexsort`` of ``keys`` given first key first, and whether two rows are equal in every
    key: a stable sort of the first key, then the runs it leaves tied sorted by the others
    (operations rarely tie on a time; the keys come mostly in order, which the stable sort runs
    through)."""
    import numpy as np

    if not keys or n < 2:
        return np.arange(n) if not keys else np.argsort(keys[0], kind="stable"), n >= 2 and not keys
    at = np.argsort(keys[0], kind="stable")
    tied = _tied(keys[0], at)
    if not tied.any():
        return at, False
    inside = np.zeros(n, dtype=bool)
    inside[:-1] |= tied
    inside[1:] |= tied
    pos = np.flatnonzero(inside)
    starts = np.concatenate([[True], ~tied])[pos]  # where each tied run begins
    run = np.cumsum(starts)
    rows = at[pos]
    rows = rows[np.lexsort([*(k[rows] for k in reversed(keys[1:])), run])]
    at[pos] = rows
    same = ~starts[1:]  # neighbours in one run, equal in the first key
    for k in keys[1:]:
        v = k[rows]
        same &= v[1:] == v[:-1]
    return at, bool(same.any())
