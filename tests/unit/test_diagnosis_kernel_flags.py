"""The rules' per-kernel questions answered once per name, and the runs and attention chains found in
numpy: each compared with the kernel-by-kernel walk it replaced, on random and recorded kernels."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pytest

from gpuscope.analysis.diagnosis.context import Context
from gpuscope.analysis.diagnosis.kernel_flags import codes_of, name_codes, per_code
from gpuscope.analysis.diagnosis.kernel_names import is_elementwise
from gpuscope.analysis.diagnosis.rules.attention import MAX_BETWEEN, _is_product, attention_chains, chains
from gpuscope.analysis.diagnosis.rules.fusion import _runs
from gpuscope.trace.report import Report

NAMES = [
    "void at::native::vectorized_elementwise_kernel<4, MulFunctor>",  # elementwise
    "void at::native::unrolled_elementwise_kernel<direct_copy_kernel_cuda>",  # elementwise copy
    "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_tn",  # product
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>",  # softmax
    "void at::native::reduce_kernel<512, 1>",  # neither
    "",
]


def _runs_walk(ok: np.ndarray, step: np.ndarray, least: int) -> list[tuple[int, int]]:
    """The kernel-by-kernel walk :func:`_runs` replaced."""
    out = []
    i = 0
    while i < len(ok):
        if not ok[i]:
            i += 1
            continue
        j = i
        while j < len(ok) and ok[j] and step[j] == step[i]:
            j += 1
        if j - i >= least:
            out.append((i, j))
        i = j
    return out


def _neighbour(names: list[str], i: int, step: np.ndarray, direction: int) -> int | None:
    j = i + direction
    for _ in range(MAX_BETWEEN + 1):
        if j < 0 or j >= len(names) or step[j] != step[i]:
            return None
        if _is_product(names[j]):
            return j
        if not is_elementwise(names[j]):
            return None
        j += direction
    return None


def _chains_walk(names: list[str], step: np.ndarray) -> list[tuple[int, int, int]]:
    """The kernel-by-kernel walk :func:`chains` replaced."""
    out = []
    taken = -1
    for i, name in enumerate(names):
        if i <= taken or not re.search("softmax", name, re.I):
            continue
        a, b = _neighbour(names, i, step, -1), _neighbour(names, i, step, +1)
        if a is None or b is None:
            continue
        first = a
        while first - 1 > taken and step[first - 1] == step[a] and re.search("copy", names[first - 1], re.I) \
                and is_elementwise(names[first - 1]) and a - first < MAX_BETWEEN:
            first -= 1
        out.append((first, a, b))
        taken = b
    return out


@pytest.mark.parametrize("seed", range(6))
def test_runs_match_the_walk(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 3000
    ok = rng.random(n) < [0.3, 0.6, 0.9, 0.95, 0.5, 1.0][seed]
    step = np.cumsum(rng.random(n) < 0.01)
    for least in (1, 2, 3, 5):
        assert _runs(ok, step, least) == _runs_walk(ok, step, least)
    assert _runs(np.zeros(0, bool), np.zeros(0, np.int64), 2) == []


def test_short_runs_match_the_walk() -> None:
    rng = np.random.default_rng(3)
    for _ in range(500):
        n = int(rng.integers(1, 40))
        ok = rng.random(n) < rng.random()
        step = np.sort(rng.integers(0, 3, n))
        for least in (1, 2, 3):
            assert _runs(ok, step, least) == _runs_walk(ok, step, least)


@pytest.mark.parametrize("seed", range(8))
def test_attention_chains_match_the_walk(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 4000
    # mostly the pieces of chains, so that chains overlap, share products and reach back over copies
    codes = rng.choice(len(NAMES), size=n, p=[0.25, 0.2, 0.2, 0.2, 0.1, 0.05])
    step = np.cumsum(rng.random(n) < 0.02)
    names = [NAMES[c] for c in codes]
    found = chains(codes.astype(np.int64), NAMES, step)
    assert found == _chains_walk(names, step)
    assert len(found) > 20  # the case is not empty


def test_codes_give_each_name() -> None:
    values = ["b", "a", "b", "", "c", "a"]
    for column in (pd.Series(pd.Categorical(values, categories=["c", "a", "b", "", "unused"])), pd.Series(values)):
        codes, texts = codes_of(column)
        assert [texts[c] for c in codes] == values
        asked: list[str] = []
        flags = per_code(codes, texts, lambda t: asked.append(t) or t in ("a", ""))
        assert flags.tolist() == [v in ("a", "") for v in values]
        assert len(asked) == len(texts)  # once per name
    assert per_code(np.zeros(0, np.int64), [], str.isupper).tolist() == []


@pytest.mark.parametrize("name", ["program_naive_attention_bf16", "program_elementwise_chain"])
def test_recorded_chains_and_names_match_the_walk(recorded: Callable[[str], Path], name: str) -> None:
    with Report.open(recorded(name)) as report:
        ctx = Context(report)
        for p in ctx.processes:
            kern, step = ctx.steady_kernels(p)
            names = kern["name"].astype(str).tolist()
            codes, texts = name_codes(ctx, p)
            assert [texts[c] for c in codes] == names
            assert attention_chains(ctx, p) == _chains_walk(names, step)
