"""analyze and stats keep freed heap memory for the next large array (cli/heap.py): a block of
64 MB made again after it was freed costs no new page faults."""

from __future__ import annotations

import subprocess
import sys

import pytest

_FAULTS = """
import resource, sys
import numpy as np
from gpuscope.cli.heap import keep_freed_memory
took = keep_freed_memory() if sys.argv[1] == "keep" else False
a = np.ones(8_000_000); del a  # 64 MB, touched and freed
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
b = np.ones(8_000_000)
print(int(took), resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> tuple[bool, int]:
    out = subprocess.run([sys.executable, "-c", _FAULTS, mode], capture_output=True, text=True, check=True,
                         env={"NUMPY_MADVISE_HUGEPAGE": "0", "PATH": ""}).stdout.split()
    return bool(int(out[0])), int(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_freed_memory_is_used_again_without_page_faults() -> None:
    took, kept = _faults("keep")
    if not took:
        pytest.skip("this C library has no mallopt settings to take")
    _, plain = _faults("plain")
    assert plain > 10_000  # 64 MB of 4 KiB pages, mapped afresh
    assert kept < plain / 10
