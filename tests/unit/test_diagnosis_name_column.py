"""Kernel names of the diagnosis's operations by string id (Context._name_column): by a table of the
ids, the names a search of the sorted ids gives, ids missing or out of range as ""."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpuscope.analysis.diagnosis.context import Context


class _Names:
    def __init__(self, names: dict[int, str]) -> None:
        self.names = names


def _searched(names: dict[int, str], ids: pd.Series) -> list[str]:
    """Each id's name by a search of the sorted ids, the first of equal ones ("" for none)."""
    keys = sorted(names)
    out = []
    for v in ids.fillna(-1).astype("int64"):
        hits = [names[k] for k in keys if k == v]
        out.append(hits[0] if hits else "")
    return out


def test_names_by_id() -> None:
    ids = pd.Series(pd.array([3, 7, None, 5, 0, -4, 100], dtype="Int64"))
    got = Context._name_column(_Names({3: "gemm", 7: "relu", 0: "copy"}), ids)  # type: ignore[arg-type]
    assert got.tolist() == ["gemm", "relu", "", "", "copy", "", ""]
    assert isinstance(got.dtype, pd.CategoricalDtype)


@pytest.mark.parametrize("names", [{3: "a", 7: "b", 0: "c"}, {5: "", 9: "x"}, {-1: "neg", 4: "y"},
                                   {2**30: "far", 1: "s"}])
def test_names_are_those_a_search_finds(names: dict[int, str]) -> None:
    rng = np.random.default_rng(0)
    ids = pd.Series(pd.array(rng.integers(-3, 12, 500), dtype="Int64"))
    ids[rng.random(500) < 0.1] = pd.NA
    ids[:3] = [2**30, 2**31, -(2**40)]
    got = Context._name_column(_Names(names), ids)  # type: ignore[arg-type]
    assert got.astype(str).tolist() == _searched(names, ids)
