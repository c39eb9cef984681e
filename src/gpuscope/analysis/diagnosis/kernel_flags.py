"""What the rules ask of each steady kernel's name, answered once per distinct name.

A run of ten million kernels has a few hundred names: a question asked per kernel (a list of ten
million Python strings, a dictionary look-up each) cost seconds per rule, where the same answers
gathered by the name's code cost a few milliseconds. The rows are those of
:meth:`.context.Context.steady_kernels` (and of :func:`.steady_work.steady_work`, made from them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from .context import Context, Process


def name_codes(ctx: Context, p: Process) -> tuple[np.ndarray, list[str]]:
    """Per steady kernel of ``p``, the code of its name, and the names by code (computed once per
    process, not to be changed)."""
    key = ("name_codes", p.pid)
    if key not in ctx.cache:
        kern, _ = ctx.steady_kernels(p)
        ctx.cache[key] = codes_of(kern["name"])
    out: tuple[np.ndarray, list[str]] = ctx.cache[key]
    return out


def codes_of(names: pd.Series) -> tuple[np.ndarray, list[str]]:
    """The code of each value of ``names`` (a categorical column, or any column whose values are
    taken as text) and the texts by code: ``texts[codes[i]] == str(names.iloc[i])``; a categorical's
    codes are its own, in their own type (not a 64-bit copy: ten million names, 80 MB), read-only."""
    if isinstance(names.dtype, pd.CategoricalDtype) and not names.isna().any():
        return np.asarray(names.cat.codes), [str(c) for c in names.cat.categories]
    codes, uniques = pd.factorize(names.astype(str), sort=False)
    return codes.astype(np.int64), [str(u) for u in uniques]


def per_code(codes: np.ndarray, texts: list[str], answer: Callable[[str], Any], dtype: Any = bool) -> np.ndarray:
    """``answer(text)`` of each row's text, asked once per distinct text: an array of ``dtype``."""
    table = np.array([answer(t) for t in texts], dtype=dtype) if texts else np.zeros(0, dtype=dtype)
    if not len(codes):
        return np.zeros(0, dtype=dtype)
    return table[codes]


def name_flags(ctx: Context, p: Process, answer: Callable[[str], Any], dtype: Any = bool) -> np.ndarray:
    """``answer(name)`` per steady kernel of ``p`` (rows of :meth:`.context.Context.steady_kernels`),
    asked once per distinct name."""
    return per_code(*name_codes(ctx, p), answer, dtype)
