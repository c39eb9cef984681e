"""ForkWatch: a fork from PyTorch's DataLoader and any other fork each give one warning, once."""

from __future__ import annotations

import os

import pytest

from gpuscope.capture.python.forks import DATALOADER, OTHER, WORKERS, ForkWatch


def _fork_and_reap() -> None:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


def _dataloader_fork() -> None:
    """A fork made by code of a file named like PyTorch's dataloader.py."""
    where = os.path.join(os.sep, "site-packages", DATALOADER)
    scope = {"fork": _fork_and_reap}
    exec(compile("def start_worker():\n    fork()\n", where, "exec"), scope)  # noqa: S102
    scope["start_worker"]()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_each_kind_of_fork_is_said_once() -> None:
    clock = iter(range(100, 200))
    watch = ForkWatch(lambda: next(clock))
    watch.install()
    try:
        assert watch.take_rows() == {}
        _dataloader_fork()
        _dataloader_fork()
        rows = watch.take_rows()["diagnostic"]
        assert [(level, text) for _, level, text in rows] == [("warning", WORKERS)]
        assert watch.forks == {"dataloader": 2, "other": 0}
        _fork_and_reap()
        _fork_and_reap()
        assert [text for _, _, text in watch.take_rows()["diagnostic"]] == [OTHER]
        _dataloader_fork()
        assert watch.take_rows() == {}  # said already
        assert watch.forks == {"dataloader": 3, "other": 2}
    finally:
        watch.stop()
    _fork_and_reap()
    assert watch.forks["other"] == 2  # stopped: no longer counted
