"""A query's result as numpy arrays, read a chunk at a time.

``fetchnumpy()`` has DuckDB make its whole result before the arrays are made from it, so values are
held twice at the peak (reading the twelve columns of ten million GPU operations peaked 0.4 GB higher).
Read as a stream of chunks written into arrays made once, DuckDB holds one chunk at a time and the
result is held once. The arrays are those ``fetchnumpy()`` gives: each column's type, a masked array
where the column has a NULL, the rows in the same order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ..trace.report import Report

if TYPE_CHECKING:
    import numpy as np

# the column types read in chunks (integers and booleans: a NULL is masked either way); a query with
# a column of another type is read by fetchnumpy() as it is
CHUNKED_TYPES = ("BIGINT", "INTEGER", "SMALLINT", "TINYINT", "UBIGINT", "UINTEGER", "USMALLINT", "UTINYINT",
                 "BOOLEAN")
VECTORS = 256  # DuckDB vectors (2,048 rows each) per chunk: half a million rows (32 took twice as long at 10 M)


def _execute(report: Report, sql: str, params: Sequence[Any] | None) -> Any:
    return report.con.execute(sql, params) if params is not None else report.con.execute(sql)


def chunks(report: Report, sql: str, params: Sequence[Any] | None = None,
           vectors: int | None = None) -> Iterator[dict[str, np.ndarray]] | None:
    """The rows of ``sql`` a chunk at a time, each a dict of the columns' arrays as ``fetchnumpy()``
    gives them (masked where that chunk has a NULL); None where a column is of a type not in
    :data:`CHUNKED_TYPES` (then read the query otherwise). Run within ``report.deadline()``."""
    result = _execute(report, sql, params)
    described = result.description or []
    if not described or any(str(d[1]) not in CHUNKED_TYPES for d in described):
        return None
    names = [str(d[0]) for d in described]

    def read() -> Iterator[dict[str, np.ndarray]]:
        import numpy as np
        import pandas as pd

        while True:
            chunk = result.fetch_df_chunk(vectors or VECTORS)
            if not len(chunk):
                return
            got: dict[str, np.ndarray] = {}
            for i, name in enumerate(names):
                column = chunk.iloc[:, i].array
                if isinstance(column, pd.arrays.IntegerArray | pd.arrays.BooleanArray):
                    mask = np.asarray(column.isna())
                    data = np.asarray(column.to_numpy(dtype=column.dtype.numpy_dtype, na_value=0))
                    got[name] = np.ma.MaskedArray(data, mask=mask) if mask.any() else data
                else:
                    got[name] = np.asarray(column)
            del chunk
            yield got

    return read()


def fetch_arrays(report: Report, sql: str, params: Sequence[Any] | None = None, rows: int = 0,
                 vectors: int | None = None) -> dict[str, np.ndarray]:
    """``fetchnumpy()`` of ``sql``, read in chunks into arrays made once (see the module docstring);
    ``rows``: how many rows it gives, or about (the arrays grow where there are more)."""
    with report.deadline():
        stream = chunks(report, sql, params, vectors)
        if stream is None:
            got: dict[str, np.ndarray] = _execute(report, sql, params).fetchnumpy()
            return got
        out = _Filled(rows)
        for part in stream:
            out.add(part)
        if out.empty:  # no rows: the empty arrays of their types, as fetchnumpy() gives them
            empty: dict[str, np.ndarray] = _execute(report, sql, params).fetchnumpy()
            return empty
    return out.arrays()


def kept_rows(report: Report, sql: str, keep: Callable[[dict[str, np.ndarray]], np.ndarray],
              params: Sequence[Any] | None = None, vectors: int | None = None) -> dict[str, np.ndarray] | None:
    """The rows of ``sql`` that ``keep`` (given each chunk's arrays, gives a boolean mask of its rows)
    keeps, as ``fetchnumpy()`` would give them; read in chunks, so that the rest is never held at
    once. None where a column is of a type not in :data:`CHUNKED_TYPES` or has a NULL (the caller
    reads it otherwise)."""
    import numpy as np

    with report.deadline():
        stream = chunks(report, sql, params, vectors)
        if stream is None:
            return None
        parts: list[dict[str, np.ndarray]] = []
        names: list[str] = []
        for part in stream:
            if any(isinstance(a, np.ma.MaskedArray) for a in part.values()):
                return None
            names = list(part)
            mask = keep(part)
            parts.append({name: a[mask] for name, a in part.items()})
        if not parts:  # no rows: the empty arrays of their types, as fetchnumpy() gives them
            empty: dict[str, np.ndarray] = _execute(report, sql, params).fetchnumpy()
            return empty
    return {name: np.concatenate([p[name] for p in parts]) for name in names}


class _Filled:
    """Arrays filled chunk by chunk, made at the size first given and grown where more rows come."""

    def __init__(self, rows: int) -> None:
        self.rows = max(int(rows), 0)
        self.n = 0
        self.data: dict[str, np.ndarray] = {}
        self.masks: dict[str, np.ndarray] = {}

    @property
    def empty(self) -> bool:
        return not self.data

    def add(self, part: dict[str, np.ndarray]) -> None:
        import numpy as np

        size = len(next(iter(part.values())))
        if not self.data:
            cap = max(self.rows, size)
            self.data = {name: np.empty(cap, dtype=np.ma.getdata(a).dtype) for name, a in part.items()}
        cap = len(next(iter(self.data.values())))
        if self.n + size > cap:  # more rows than said: grow (a copy of each column)
            cap = max(2 * cap, self.n + size)
            for name, a in self.data.items():
                grown = np.empty(cap, dtype=a.dtype)
                grown[:self.n] = a[:self.n]
                self.data[name] = grown
            for name, m in self.masks.items():
                self.masks[name] = np.concatenate([m, np.zeros(cap - len(m), dtype=bool)])
        at = slice(self.n, self.n + size)
        for name, a in part.items():
            self.data[name][at] = np.ma.getdata(a)
            if isinstance(a, np.ma.MaskedArray):
                if name not in self.masks:
                    self.masks[name] = np.zeros(cap, dtype=bool)
                self.masks[name][at] = np.ma.getmaskarray(a)
        self.n += size

    def arrays(self) -> dict[str, np.ndarray]:
        import numpy as np

        out: dict[str, np.ndarray] = {}
        for name in list(self.data):
            a = self.data.pop(name)
            if len(a) != self.n:  # fewer rows than said: the rows given, not a view of the larger array
                a = a[:self.n].copy()
            if name in self.masks:
                out[name] = np.ma.MaskedArray(a, mask=self.masks.pop(name)[:self.n].copy())
            else:
                out[name] = a
        return out
