"""Output files are never written through a symbolic link, never overwritten without
--force-overwrite, and two runs started together in one directory get two report names."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

import pytest

from .conftest import Gpuscope, finish

VICTIM = "precious data\n"


def _victim(tmp_path: Path) -> Path:
    path = tmp_path / "victim.txt"
    path.write_text(VICTIM)
    return path


@pytest.fixture
def report(recorded: Callable[[str], Path]) -> Path:
    return recorded("gemm_conv")


def test_profile_onto_a_dangling_link_is_refused_and_forced_replaces_the_link(gs: Gpuscope, tmp_path: Path) -> None:
    gs.script("hello.py", "print('hello')\n")
    target = tmp_path / "elsewhere.gpuscope"
    (tmp_path / "out.gpuscope").symlink_to(target)
    res = gs.profile("-o", "out.gpuscope", sys.executable, "hello.py")
    assert res.returncode == 2 and "symbolic link" in res.errors[0], res.describe()
    assert not target.exists() and "hello" not in res.stdout  # refused before the program ran
    res = gs.profile("-o", "out.gpuscope", "--force-overwrite", sys.executable, "hello.py")
    assert res.returncode == 0, res.describe()
    assert not target.exists() and not (tmp_path / "out.gpuscope").is_symlink()
    assert (tmp_path / "out.gpuscope").stat().st_size > 0


def test_a_planted_wal_link_is_refused(gs: Gpuscope, tmp_path: Path) -> None:
    gs.script("hello.py", "print('hello')\n")
    victim = _victim(tmp_path)
    (tmp_path / "out.gpuscope.wal").symlink_to(victim)
    res = gs.profile("-o", "out.gpuscope", sys.executable, "hello.py")
    assert res.returncode == 2 and "out.gpuscope.wal" in res.errors[0], res.describe()
    assert victim.read_text() == VICTIM and not (tmp_path / "out.gpuscope").exists()
    res = gs.profile("-o", "out.gpuscope", "--force-overwrite", sys.executable, "hello.py")
    assert res.returncode == 0, res.describe()
    assert victim.read_text() == VICTIM


def test_export_ignores_a_planted_partial_link(gs: Gpuscope, report: Path, tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    out = tmp_path / "x.trace.json"
    (tmp_path / ".x.trace.json.partial").symlink_to(victim)
    res = gs.run("export", str(report), "-o", str(out))
    assert res.returncode == 0, res.describe()
    assert victim.read_text() == VICTIM and out.read_text().lstrip().startswith(("{", "["))
    res = gs.run("export", str(report), "-o", str(out))  # exists now
    assert res.returncode == 2 and "--force-overwrite" in res.errors[0], res.describe()


@pytest.mark.parametrize("command", [
    ("stats", "--output"), ("analyze", "--output"), ("export", "-o"), ("roofline", "-o"), ("report", "-o")])
def test_outputs_never_overwrite_or_follow_links(gs: Gpuscope, report: Path, tmp_path: Path,
                                                 command: tuple[str, str]) -> None:
    name, option = command
    if name == "roofline":
        pytest.importorskip("matplotlib")
    suffix = ".svg" if name == "roofline" else ".txt"
    existing = tmp_path / f"existing{suffix}"
    existing.write_text(VICTIM)
    res = gs.run(name, str(report), option, str(existing))
    assert res.returncode == 2 and "--force-overwrite" in res.errors[0], res.describe()
    assert existing.read_text() == VICTIM
    victim = _victim(tmp_path)
    link = tmp_path / f"link{suffix}"
    link.symlink_to(victim)
    res = gs.run(name, str(report), option, str(link))
    assert res.returncode == 2 and "symbolic link" in res.errors[0], res.describe()
    res = gs.run(name, str(report), option, str(link), "--force-overwrite")
    assert res.returncode == 0, res.describe()
    assert victim.read_text() == VICTIM and not link.is_symlink() and link.stat().st_size > 0


def test_two_runs_started_together_get_two_reports(gs: Gpuscope, tmp_path: Path) -> None:
    gs.script("wait.py", "import time; time.sleep(1.0); print('done')\n")
    procs = [gs.start("profile", sys.executable, "wait.py") for _ in range(3)]
    results = [finish(p) for p in procs]
    assert all(r.returncode == 0 for r in results), "\n".join(r.describe() for r in results)
    names = sorted(p.name for p in tmp_path.glob("report*.gpuscope"))
    assert names == ["report1.gpuscope", "report2.gpuscope", "report3.gpuscope"]
    wrote = sorted(line.split("wrote ")[1].split(" ")[0] for r in results for line in r.lines_mentioning("wrote "))
    assert [Path(w).name for w in wrote] == names


def test_import_never_follows_a_link(gs: Gpuscope, tmp_path: Path) -> None:
    from conftest import FIXTURES

    trace = str(FIXTURES / "gpt_eager.torch_trace.json.gz")
    victim = tmp_path / "victim.gpuscope"
    link = tmp_path / "out.gpuscope"
    link.symlink_to(victim)  # dangling: the old check (exists()) let it through
    res = gs.run("import", trace, "-o", str(link))
    assert res.returncode == 2 and "symbolic link" in res.errors[0], res.describe()
    assert not victim.exists()
    res = gs.run("import", trace, "-o", str(link), "--force-overwrite")
    assert res.returncode == 0, res.describe()
    assert not victim.exists() and not link.is_symlink() and link.stat().st_size > 0
