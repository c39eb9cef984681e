"""CUPTI's buffer callbacks in C (capture/cupti/handoff.c): built on first use, a completed buffer
waits in the queue until gpuscope drains it, drained buffers come back zeroed and are reused, a
failing reader does not stop the others, and without a compiler gpuscope says why and keeps its
Python callbacks."""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpuscope.capture.cupti import native
from gpuscope.capture.cupti.buffers import RawBuffers, run_offsets, walk

if not native._compiler():
    pytest.skip("no C compiler here", allow_module_level=True)


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    return native.load(tmp_path_factory.mktemp("native"))


def _request(lib: ctypes.CDLL) -> tuple[int, int]:
    ptr, size, maxrec = ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_size_t(9)
    lib.gs_requested(ctypes.byref(ptr), ctypes.byref(size), ctypes.byref(maxrec))
    assert maxrec.value == 0
    return int(ptr.value), int(size.value)


def test_the_library_is_built_once_per_source_and_reused(tmp_path: Path) -> None:
    first = native.build(tmp_path)
    mtime = first.stat().st_mtime_ns
    assert native.build(tmp_path) == first and first.stat().st_mtime_ns == mtime
    assert [p.name for p in tmp_path.iterdir()] == [first.name], "no temporary files left behind"


def test_completed_buffers_wait_in_order_until_popped_and_come_back_zeroed(shim: ctypes.CDLL) -> None:
    shim.gs_set_buffer_size(4096)
    bufs = [_request(shim) for _ in range(3)]
    assert all(size == 4096 for _, size in bufs)
    for i, (addr, _) in enumerate(bufs):
        view = (ctypes.c_uint8 * 4096).from_address(addr)
        assert not any(view), "CUPTI gets zeroed memory"
        ctypes.memset(addr, i + 1, 100 * (i + 1))
        shim.gs_completed(None, 0, addr, 4096, 100 * (i + 1))
    assert shim.gs_queued() == 3
    ptr, valid = ctypes.c_void_p(), ctypes.c_size_t()
    popped = []
    while shim.gs_pop(ctypes.byref(ptr), ctypes.byref(valid)):
        popped.append((int(ptr.value), int(valid.value)))
        shim.gs_release(ptr.value, valid.value)
    assert popped == [(addr, 100 * (i + 1)) for i, (addr, _) in enumerate(bufs)]
    again = _request(shim)[0]
    assert again in {a for a, _ in bufs}, "a released buffer is handed out again"
    assert not any((ctypes.c_uint8 * 4096).from_address(again)), "and it is zeroed"
    shim.gs_completed(None, 0, again, 4096, 0)  # an empty buffer goes straight back to the pool
    assert shim.gs_queued() == 0


def test_completions_from_many_threads_are_all_queued(shim: ctypes.CDLL) -> None:
    shim.gs_set_buffer_size(256)
    addrs = [_request(shim)[0] for _ in range(64)]

    def complete(part: list[int]) -> None:
        for a in part:
            shim.gs_completed(None, 0, a, 256, 8)

    threads = [threading.Thread(target=complete, args=(addrs[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ptr, valid = ctypes.c_void_p(), ctypes.c_size_t()
    got = set()
    while shim.gs_pop(ctypes.byref(ptr), ctypes.byref(valid)):
        got.add(int(ptr.value))
        shim.gs_release(ptr.value, valid.value)
    assert got == set(addrs)


def test_raw_buffers_drain_what_the_c_callbacks_queued() -> None:
    """RawBuffers with the C callbacks: nothing is read until drain(); then every buffer, in order,
    a failing reader reported and the others still read."""
    lib = native.load()
    seen: list[bytes] = []
    errors: list[BaseException] = []

    def on_buffer(raw: np.ndarray, valid: int, next_record: Any) -> None:
        seen.append(bytes(raw[:valid]))
        if len(seen) == 2:
            raise ValueError("reader failed")

    rb = RawBuffers(None, None, 1 << 12, on_buffer, errors.append)
    rb.use_native(lib)
    for i in range(3):
        addr, size = _request(lib)
        assert size == 1 << 12
        ctypes.memset(addr, 0x41 + i, 16)
        lib.gs_completed(None, 0, addr, size, 16)
    assert seen == []
    assert rb.drain() == 3
    assert seen == [bytes([0x41 + i]) * 16 for i in range(3)]
    assert [str(e) for e in errors] == ["reader failed"]
    assert rb.drain() == 0


def test_without_a_compiler_the_reason_is_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CC", "no-such-compiler")
    with pytest.raises(native.NativeUnavailable, match="no C compiler"):
        native.build(tmp_path / "cache")
    monkeypatch.setenv(native.NATIVE_ENV, "0")
    with pytest.raises(native.NativeUnavailable, match=native.NATIVE_ENV):
        native.load(tmp_path / "cache")


def test_the_source_uses_no_python_api() -> None:
    """The C callbacks must never need the GIL: no Python headers, no Python calls."""
    text = native.SOURCE.read_text()
    assert "Python.h" not in text and "Py" not in text.replace("Python", "")
    assert os.path.exists(native.SOURCE)


def test_the_cache_follows_gpuscope_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path))
    assert native.cache_dir() == tmp_path / "native"
    monkeypatch.delenv("GPUSCOPE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert native.cache_dir() == tmp_path / "xdg" / "gpuscope" / "native"
