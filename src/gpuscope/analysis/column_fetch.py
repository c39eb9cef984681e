"""A query's result as numpy arrays, read a chunk at a time.

``fetchnumpy()`` has DuckDB make its whole result before the arrays are made from it, so values are
held twice at the peak (reading the twelve columns of ten million GPU operations peaked 0.4 GB higher).
Read as a stream of chunks written into arrays made once, DuckDB holds one chunk at a time and the
result is held once. The arrays are those ``fetchnumpy()`` gives: each column's type, a masked array
where the column has a NULL, the rows in the same order.

Asked for it (``compact``), a column of one value everywhere (or NULL everywhere: a process id, a
device, a thread not recorded) comes as that value viewed read-only for every row, without memory
of its own, and the 64-bit integer columns named in ``compact`` as 32-bit integers where every value
fits: ten million operations read 0.3 GB less. The values are the same.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
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
                 vectors: int | None = None, compact: Collection[str] | None = None) -> dict[str, np.ndarray]:
    """``fetchnumpy()`` of ``sql``, read in chunks into arrays made once (see the module docstring);
    ``rows``: how many rows it gives, or about (the arrays grow where there are more). With
    ``compact`` (column names, possibly none), columns of one value as read-only views of it and
    the 64-bit integers of the named columns as 32-bit where they fit (see the module docstring)."""
    with report.deadline():
        stream = chunks(report, sql, params, vectors)
        if stream is None:
            got: dict[str, np.ndarray] = _execute(report, sql, params).fetchnumpy()
            return got
        out = _Filled(rows) if compact is None else _Compact(rows, compact)
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
        self.cap = 0  # the rows the arrays have room for
        self.data: dict[str, np.ndarray] = {}
        self.masks: dict[str, np.ndarray] = {}

    @property
    def empty(self) -> bool:
        return not self.data

    def add(self, part: dict[str, np.ndarray]) -> None:
        import numpy as np

        size = len(next(iter(part.values())))
        if not self.data:
            self.cap = max(self.rows, size)
            self.data = {name: np.empty(self.cap, dtype=np.ma.getdata(a).dtype) for name, a in part.items()}
        self._grow(self.n + size)
        at = slice(self.n, self.n + size)
        for name, a in part.items():
            self.data[name][at] = np.ma.getdata(a)
            if isinstance(a, np.ma.MaskedArray):
                if name not in self.masks:
                    self.masks[name] = np.zeros(self.cap, dtype=bool)
                self.masks[name][at] = np.ma.getmaskarray(a)
        self.n += size

    def _grow(self, need: int) -> None:
        """Room for ``need`` rows: where there is less, each column and mask copied into arrays twice
        as large (or of ``need`` rows, if more), the rows so far kept."""
        import numpy as np

        if need <= self.cap:
            return
        cap = max(2 * self.cap, need)
        for name, a in self.data.items():
            grown = np.empty(cap, dtype=a.dtype)
            grown[:self.n] = a[:self.n]
            self.data[name] = grown
        for name, m in self.masks.items():
            self.masks[name] = np.concatenate([m, np.zeros(cap - len(m), dtype=bool)])
        self.cap = cap

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


_INT32 = (-(2**31), 2**31 - 1)


class _Compact(_Filled):
    """:class:`_Filled` whose columns of one value (or of NULL) are held as that value until a chunk
    brings another, and whose 64-bit integer columns named in ``narrow`` are held as 32-bit integers
    while every value fits (made 64-bit again, a copy, where one does not)."""

    def __init__(self, rows: int, narrow: Collection[str]) -> None:
        super().__init__(rows)
        self.narrow = frozenset(narrow)
        # per column still of one value: (its value or None for NULL, the array's type, masked at all)
        self.one: dict[str, tuple[Any, Any, bool]] = {}
        self.names: list[str] = []

    @property
    def empty(self) -> bool:
        return not self.names

    @staticmethod
    def _value(a: np.ndarray) -> tuple[bool, Any]:
        """Whether the chunk ``a`` is of one value (NULL everywhere counts), and that value (None: NULL)."""
        import numpy as np

        data = np.ma.getdata(a)
        if isinstance(a, np.ma.MaskedArray):
            mask = np.ma.getmaskarray(a)
            if mask.all():
                return True, None
            if mask.any():
                return False, None
        if not len(data):
            return True, None
        first = data[0]
        return bool((data == first).all()), first.item()

    def _type(self, name: str, dtype: Any, values: list[Any]) -> Any:
        """The type to hold column ``name`` in: 32-bit where it may be narrowed and ``values`` fit."""
        import numpy as np

        if name in self.narrow and dtype.kind == "i" and dtype.itemsize > 4 and all(
                v is None or _INT32[0] <= v <= _INT32[1] for v in values):
            return np.dtype(np.int32)
        return dtype

    def _fits(self, name: str, a: np.ndarray) -> bool:
        """Whether the unmasked values of the chunk ``a`` fit the type column ``name`` is held in."""
        import numpy as np

        held = self.data[name].dtype
        data = np.ma.getdata(a)
        if held == data.dtype or not len(data):
            return True
        if isinstance(a, np.ma.MaskedArray):
            data = data[~np.ma.getmaskarray(a)]
            if not len(data):
                return True
        return bool(data.min() >= _INT32[0] and data.max() <= _INT32[1])

    def _materialize(self, name: str, a: np.ndarray, values: list[Any]) -> None:
        """Column ``name``, held as one value so far, as an array of its rows so far."""
        import numpy as np

        value, dtype, masked = self.one.pop(name)
        data = np.empty(self.cap, dtype=self._type(name, dtype, [value, *values]))
        data[:self.n] = 0 if value is None else value
        self.data[name] = data
        if masked or (value is None and self.n) or isinstance(a, np.ma.MaskedArray):
            self.masks[name] = np.zeros(self.cap, dtype=bool)
            self.masks[name][:self.n] = value is None

    def add(self, part: dict[str, np.ndarray]) -> None:
        import numpy as np

        size = len(next(iter(part.values())))
        if not self.names:
            self.names = list(part)
            self.cap = max(self.rows, size)
            for name, a in part.items():
                self.one[name] = (None, np.ma.getdata(a).dtype, False)
            first = True
        else:
            first = False
        self._grow(self.n + size)
        at = slice(self.n, self.n + size)
        for name, a in part.items():
            data = np.ma.getdata(a)
            if name in self.one:
                same, value = self._value(a)
                held, dtype, masked = self.one[name]
                if same and (first or value == held):
                    self.one[name] = (value, dtype, masked or isinstance(a, np.ma.MaskedArray))
                    continue
                if first:
                    self.one[name] = (None, dtype, False)  # no rows before this chunk
                values = [] if not len(data) else [int(data.min()), int(data.max())] if data.dtype.kind == "i" else []
                if isinstance(a, np.ma.MaskedArray) and values:
                    kept = data[~np.ma.getmaskarray(a)]
                    values = [int(kept.min()), int(kept.max())] if len(kept) else []
                self._materialize(name, a, values)
            elif not self._fits(name, a):  # a value past 32 bits: the column as 64-bit integers
                self.data[name] = self.data[name].astype(data.dtype)
            self.data[name][at] = data
            if isinstance(a, np.ma.MaskedArray):
                if name not in self.masks:
                    self.masks[name] = np.zeros(self.cap, dtype=bool)
                self.masks[name][at] = np.ma.getmaskarray(a)
        self.n += size

    def arrays(self) -> dict[str, np.ndarray]:
        import numpy as np

        out = super().arrays()
        for name, (value, dtype, masked) in self.one.items():
            dtype = self._type(name, dtype, [value])
            data = np.broadcast_to(np.array(0 if value is None else value, dtype=dtype), (self.n,))
            if masked or value is None:
                out[name] = np.ma.MaskedArray(data, mask=np.broadcast_to(np.bool_(value is None), (self.n,)))
            else:
                out[name] = data
        return {name: out[name] for name in self.names}
