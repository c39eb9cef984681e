"""What a host sync waited for, as the host_sync finding names it: a call that waited for no copy (the
join leaves NaN) is not a copy. On a real two-GPU FSDP report, such calls at a line that also read
values made the finding's evidence ask for the mode of no copy kinds, and `analyze` failed."""

from __future__ import annotations

import math

from gpuscope.analysis.diagnosis.rules.sync import SCALAR_BYTES, _kind


def test_no_copy_waited_for_is_not_a_copy() -> None:
    assert _kind("cudaStreamSynchronize", math.nan, math.nan) == "other"
    assert _kind("cudaStreamSynchronize", None, None) == "other"
    assert _kind("cudaDeviceSynchronize", math.nan, math.nan) == "device"


def test_copies_by_direction_and_size() -> None:
    assert _kind("cudaMemcpyAsync", "DtoH", 4.0) == "read"
    assert _kind("cudaMemcpyAsync", "DtoH", float(SCALAR_BYTES * 4)) == "copy"
    assert _kind("cudaStreamSynchronize", "HtoD", 8e6) == "copy"
