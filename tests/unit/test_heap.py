"""analyze and stats keep freed heap memory for the next large array while they run (analysis/heap.py):
a block of 64 MB made again after it was freed costs no new page faults inside, and does again
once malloc's settings are back."""

from __future__ import annotations

import subprocess
import sys

import pytest

_FAULTS = """
import resource
import numpy as np
from gpuscope.analysis.heap import freed_memory_kept

def again() -> int:
    a = np.ones(8_000_000); del a  # 64 MB, touched and freed
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    b = np.ones(8_000_000); del b
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

plain = again()
with freed_memory_kept() as took:
    kept = again()
after = again()
print(int(took), plain, kept, after)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_freed_memory_is_used_again_without_page_faults_while_kept() -> None:
    out = subprocess.run([sys.executable, "-c", _FAULTS], capture_output=True, text=True, check=True,
                         env={"NUMPY_MADVISE_HUGEPAGE": "0", "PATH": ""}).stdout.split()
    took, plain, kept, after = (int(x) for x in out)
    if not took:
        pytest.skip("this C library has no mallopt settings to take")
    assert plain > 10_000  # 64 MB of 4 KiB pages, mapped afresh
    assert kept < plain / 10
    assert after > plain / 2  # the defaults are back: mapped afresh again


_GIVE_BACK = """
import numpy as np
from gpuscope.analysis.heap import freed_memory_kept, give_back

def resident() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096

with freed_memory_kept() as took:
    a = np.ones(32_000_000); del a  # 256 MB, touched and freed: kept by malloc
    kept = resident()
    gave = give_back()
    back = resident()
print(int(took), int(gave), kept, back)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_kept_memory_is_given_back_between_parts() -> None:
    out = subprocess.run([sys.executable, "-c", _GIVE_BACK], capture_output=True, text=True, check=True,
                         env={"NUMPY_MADVISE_HUGEPAGE": "0", "PATH": ""}).stdout.split()
    took, gave, kept, back = (int(x) for x in out)
    if not (took and gave):
        pytest.skip("this C library has no mallopt or malloc_trim")
    assert kept - back > 200 * 2**20  # the freed 256 MB left the resident set
