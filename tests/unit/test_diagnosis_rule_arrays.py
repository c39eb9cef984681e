"""The rules' array helpers that replaced frame copies on long runs: the same answers as the
frame operations they replace (the elementwise runs: tests/unit/test_diagnosis_kernel_flags.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from gpuscope.analysis.diagnosis.rules.fusion import _texts
from gpuscope.analysis.diagnosis.rules.gemm_loops import _groups
from gpuscope.analysis.diagnosis.rules.idle import _median_duration, _median_interval


def test_names_sliced_from_codes() -> None:
    names = pd.Series(pd.Categorical.from_codes([2, 0, 2, 1], categories=["b", "a", "c"]))
    texts = _texts(names)
    assert list(texts[1:4]) == ["b", "c", "a"] and texts[0] == "c"
    missing = pd.Series(pd.Categorical.from_codes([0, -1], categories=["a"]))
    assert isinstance(_texts(missing), np.ndarray)  # a missing name: the values as they are


def _groupby(ops: pd.DataFrame, rows: np.ndarray) -> list[tuple[str, object, object, list[int]]]:
    keys = ["name", "config_id", "device_id"]
    kern = ops[keys].take(rows).reset_index(drop=True).assign(at=np.arange(len(rows)))
    return [(str(n), c, d, rows[g["at"].to_numpy()].tolist())
            for (n, c, d), g in kern.groupby(keys, dropna=False, observed=True)]


def test_groups_in_the_order_of_a_groupby() -> None:
    rng = np.random.default_rng(5)
    n = 400
    names = pd.Categorical.from_codes(rng.integers(0, 4, n), categories=["mm_b", "mm_a", "gemm", "unused"])
    ops = pd.DataFrame({"name": names, "config_id": rng.integers(0, 3, n).astype(np.int32),
                        "device_id": rng.integers(0, 2, n).astype(np.int32)})
    rows = np.flatnonzero(rng.random(n) < 0.6)
    numpy_sorted = [(str(a), b, c, r.tolist()) for a, b, c, r in _groups(ops, rows)]
    assert numpy_sorted == _groupby(ops, rows)
    assert len(numpy_sorted) > 6
    # a missing configuration: grouped by pandas, missing keys last
    ops["config_id"] = pd.array(np.where(rng.random(n) < 0.2, None, ops["config_id"]), dtype="Int32")
    by_pandas = [(str(a), b, c, r.tolist()) for a, b, c, r in _groups(ops, rows)]
    expected = _groupby(ops, rows)
    assert [(a, d, r) for a, _, d, r in by_pandas] == [(a, d, r) for a, _, d, r in expected]
    assert any(pd.isna(b) for _, b, _, _ in by_pandas)


def test_launch_medians_as_the_sorted_differences() -> None:
    rng = np.random.default_rng(7)
    launch = np.cumsum(rng.integers(1, 1_000, 1_001)).astype(np.int64)
    shuffled = rng.permutation(launch)
    end = launch + rng.integers(1, 5_000, len(launch))
    before = shuffled.copy()
    for values in (launch, shuffled):
        for inside in (np.ones(len(values), bool), rng.random(len(values)) < 0.5):
            expected = float(np.median(np.diff(np.sort(values[inside], kind="stable"))))
            assert _median_interval(values, inside) == expected
            assert _median_duration(values, end, inside) == float(np.median(end[inside] - values[inside]))
    assert np.array_equal(shuffled, before)  # the operations' column is not sorted in place
    assert _median_interval(launch, np.zeros(len(launch), bool)) == 0.0
