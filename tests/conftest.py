"""Shared test helpers: recorded GPU reports (gzipped in tests/fixtures) opened on demand."""

from __future__ import annotations

import gzip
import shutil
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
FIXTURES = HERE / "fixtures"
GOLDEN = HERE / "golden"


def unpack_fixture(name: str, directory: Path) -> Path:
    """Decompress the recorded report ``name`` (without suffix) into ``directory``; return its path."""
    out = directory / f"{name}.gpuscope"
    with gzip.open(FIXTURES / f"{name}.gpuscope.gz", "rb") as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


@pytest.fixture
def recorded(tmp_path: Path) -> Callable[[str], Path]:
    """Return a function that unpacks a recorded report into the test's tmp_path."""
    return lambda name: unpack_fixture(name, tmp_path)


@pytest.fixture
def mlp_api(recorded: Callable[[str], Path]) -> Iterator[object]:
    """The recorded MLP training report with every CUDA record kind, API calls included."""
    from gpuscope.trace.report import Report

    with Report.open(recorded("mlp_api")) as r:
        yield r
