"""``gpuscope profile`` run as a user runs it: a subprocess, a small target script, a scratch directory.

Tests that are not about the CUDA collector pass ``-t none``: on a machine without a GPU the collector
only adds the cost of importing cupti, and the launcher, agent and report writer are the same.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal

import pytest

from .conftest import Gpuscope, Result, base_env, finish, read_report, signal_name, wait_for_file

FAST = ("-t", "none")

ECHO_ARGV = """\
    import json, sys
    print(json.dumps(sys.argv[1:]))
"""
MARKER = """\
    open("started.marker", "w").close()
"""


def _single_error(res: Result, *mentions: str) -> None:
    """Assert that ``res`` failed with exactly one line, ``gpuscope: error: ...``, naming ``mentions``."""
    assert res.returncode != 0, res.describe()
    assert "Traceback" not in res.stderr, res.describe()
    lines = [line for line in res.stderr_lines if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("gpuscope: error: "), res.describe()
    for text in mentions:
        assert text in lines[0], res.describe()
    assert res.stdout == "", res.describe()


def _cuda_driver_present() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


# -- pass-through ------------------------------------------------------------------------------


def test_argv_passes_through_including_option_like_args(gs: Gpuscope) -> None:
    """Everything after the script goes to the program, even words gpuscope itself knows as options."""
    gs.script("train.py", ECHO_ARGV)
    args = ["--epochs", "1", "-o", "other", "--stats", "-t", "bogus", "two words", ""]
    res = gs.profile(*FAST, "train.py", *args)
    assert res.returncode == 0, res.describe()
    assert json.loads(res.stdout) == args
    assert (gs.cwd / "report1.gpuscope").is_file()
    assert not (gs.cwd / "other.gpuscope").exists()


def test_stdin_passes_through(gs: Gpuscope) -> None:
    """Text piped into gpuscope reaches the program's standard input unchanged."""
    gs.script("cat.py", """\
        import sys
        sys.stdout.write(sys.stdin.read())
    """)
    text = "line one\n  line two with spaces  \n\tünïcödé\n"
    res = gs.profile(*FAST, "cat.py", stdin=text)
    assert res.returncode == 0, res.describe()
    assert res.stdout == text


def test_stdout_and_stderr_pass_through_unchanged(gs: Gpuscope) -> None:
    """The program's stdout is exactly what it wrote (gpuscope writes nothing there, even with the
    CUDA collector on and its diagnostics), and its stderr lines come through intact."""
    gs.script("talk.py", """\
        import sys
        print("OUT-1")
        sys.stderr.write("ERR-1\\nERR-2\\n")
        sys.stderr.flush()
        print("OUT-2", flush=True)
    """)
    res = gs.profile("talk.py")
    assert res.returncode == 0, res.describe()
    assert res.stdout == "OUT-1\nOUT-2\n"
    assert "gpuscope:" not in res.stdout
    assert "ERR-1\nERR-2\n" in res.stderr
    assert any(line.startswith("gpuscope: wrote ") for line in res.own_lines), res.describe()


def test_environment_passes_through(gs: Gpuscope) -> None:
    """A variable set in gpuscope's environment is visible, unchanged, to the program."""
    gs.script("env.py", """\
        import os
        print(os.environ["GPUSCOPE_TEST_VALUE"])
    """)
    value = "a b=c;'quoted' ü"
    res = gs.profile(*FAST, "env.py", env=base_env({"GPUSCOPE_TEST_VALUE": value}))
    assert res.returncode == 0, res.describe()
    assert res.stdout == value + "\n"


def test_user_pythonpath_and_sitecustomize_still_work(gs: Gpuscope) -> None:
    """The user's own PYTHONPATH entries stay importable and their sitecustomize still runs
    (gpuscope puts its bootstrap first on PYTHONPATH and must chain to the next sitecustomize)."""
    lib = gs.cwd / "userlib"
    lib.mkdir()
    (lib / "helper_mod.py").write_text("VALUE = 'from-user-pythonpath'\n")
    (lib / "sitecustomize.py").write_text("import os\nos.environ['USER_SITECUSTOMIZE_RAN'] = 'yes'\n")
    gs.script("uses_lib.py", """\
        import os
        import helper_mod
        print(helper_mod.VALUE, os.environ.get("USER_SITECUSTOMIZE_RAN"))
    """)
    res = gs.profile(*FAST, "uses_lib.py", env=base_env({"PYTHONPATH": str(lib)}))
    assert res.returncode == 0, res.describe()
    assert res.stdout == "from-user-pythonpath yes\n"
    assert read_report(gs.cwd / "report1.gpuscope").meta["status"] == "complete"


def test_working_directory_is_gpuscopes(gs: Gpuscope) -> None:
    """The program runs in gpuscope's working directory, so relative paths resolve there."""
    (gs.cwd / "data.txt").write_text("relative-data")
    gs.script("cwd.py", """\
        import os
        print(os.getcwd())
        print(open("data.txt").read())
    """)
    res = gs.profile(*FAST, "cwd.py")
    assert res.returncode == 0, res.describe()
    assert res.stdout.splitlines() == [str(gs.cwd), "relative-data"]
    processes = read_report(gs.cwd / "report1.gpuscope").processes
    assert [p["cwd"] for p in processes] == [str(gs.cwd)]


def test_exit_code_passes_through(gs: Gpuscope) -> None:
    """gpuscope exits with the program's exit code, and the report records it."""
    gs.script("three.py", "import sys\nsys.exit(3)\n")
    res = gs.profile(*FAST, "three.py")
    assert res.returncode == 3, res.describe()
    facts = read_report(gs.cwd / "report1.gpuscope")
    assert facts.meta["exit_code"] == 3
    assert facts.meta["status"] == "complete"


@pytest.mark.parametrize(
    "form",
    [["python", "prog.py"], ["prog.py"], ["-m", "pkg.prog"]],
    ids=["python-script", "script", "module"],
)
def test_command_forms(gs: Gpuscope, form: list[str]) -> None:
    """``python script.py``, ``script.py`` and ``-m package.module`` all run the program with its
    arguments (here option-like ones, as a training script takes) and profile its one process."""
    body = "import json, os, sys\nprint(json.dumps([os.path.basename(sys.argv[0]), *sys.argv[1:]]))\n"
    gs.script("prog.py", body)
    gs.script("pkg/__init__.py", "")
    gs.script("pkg/prog.py", body)
    res = gs.profile(*FAST, *form, "--epochs", "1")
    assert res.returncode == 0, res.describe()
    assert json.loads(res.stdout) == ["prog.py", "--epochs", "1"]
    assert len(read_report(gs.cwd / "report1.gpuscope").processes) == 1


def test_module_form_with_plain_args(gs: Gpuscope) -> None:
    """``-m package.module`` with plain arguments runs the module from the package in cwd."""
    gs.script("pkg/__init__.py", "")
    gs.script("pkg/main.py", ECHO_ARGV)
    res = gs.profile(*FAST, "-m", "pkg.main", "alpha", "beta")
    assert res.returncode == 0, res.describe()
    assert json.loads(res.stdout) == ["alpha", "beta"]
    assert (gs.cwd / "report1.gpuscope").is_file()


def test_double_dash_separates_the_program(gs: Gpuscope) -> None:
    """``gpuscope profile -- prog.py ARGS`` (the usual end-of-options marker) runs prog.py."""
    gs.script("prog.py", ECHO_ARGV)
    res = gs.profile(*FAST, "--", "prog.py", "x")
    assert res.returncode == 0, res.describe()
    assert json.loads(res.stdout) == ["x"]


# -- output naming ------------------------------------------------------------------------------


def test_default_output_names_count_up(gs: Gpuscope) -> None:
    """Without -o, reports go to report1.gpuscope, then report2.gpuscope, in the cwd."""
    gs.script("ok.py", "pass\n")
    first = gs.profile(*FAST, "ok.py")
    assert first.returncode == 0, first.describe()
    assert sorted(p.name for p in gs.cwd.glob("*.gpuscope")) == ["report1.gpuscope"]
    second = gs.profile(*FAST, "ok.py")
    assert second.returncode == 0, second.describe()
    assert sorted(p.name for p in gs.cwd.glob("*.gpuscope")) == ["report1.gpuscope", "report2.gpuscope"]
    assert any("report2.gpuscope" in line for line in second.own_lines if "wrote" in line)


def test_existing_output_is_refused(gs: Gpuscope) -> None:
    """An existing -o file is an error before the program starts; the file is left as it was."""
    gs.script("mark.py", MARKER)
    existing = gs.cwd / "out.gpuscope"
    existing.write_bytes(b"precious, not a report")
    res = gs.profile(*FAST, "-o", "out.gpuscope", "mark.py")
    _single_error(res, "out.gpuscope")
    assert existing.read_bytes() == b"precious, not a report"
    assert not (gs.cwd / "started.marker").exists()


def test_force_overwrite_replaces_existing_output(gs: Gpuscope) -> None:
    """With --force-overwrite the existing file is replaced by a new, complete report."""
    gs.script("ok.py", "print('ran')\n")
    existing = gs.cwd / "out.gpuscope"
    existing.write_bytes(b"old content")
    res = gs.profile(*FAST, "-o", "out.gpuscope", "--force-overwrite", "ok.py")
    assert res.returncode == 0, res.describe()
    assert res.stdout == "ran\n"
    assert read_report(existing).meta["status"] == "complete"


def test_output_name_gets_suffix(gs: Gpuscope) -> None:
    """``-o name`` writes name.gpuscope (and no file named just ``name``)."""
    gs.script("ok.py", "pass\n")
    res = gs.profile(*FAST, "-o", "myrun", "ok.py")
    assert res.returncode == 0, res.describe()
    assert (gs.cwd / "myrun.gpuscope").is_file()
    assert not (gs.cwd / "myrun").exists()
    assert not (gs.cwd / "report1.gpuscope").exists()


# -- failures before the program starts ----------------------------------------------------------


@pytest.mark.parametrize("form", [["missing.py"], ["python", "missing.py"]], ids=["script", "python"])
def test_missing_script(gs: Gpuscope, form: list[str]) -> None:
    """A script that does not exist: one error line naming it, non-zero exit, no report."""
    res = gs.profile(*FAST, *form)
    _single_error(res, "missing.py")
    assert list(gs.cwd.glob("*.gpuscope")) == []


def test_missing_command(gs: Gpuscope) -> None:
    """A program that is not on PATH: one error line naming it."""
    res = gs.profile(*FAST, "no-such-command-gpuscope-test")
    _single_error(res, "no-such-command-gpuscope-test")


def test_nothing_to_profile(gs: Gpuscope) -> None:
    """``gpuscope profile`` with no program: one error line."""
    _single_error(gs.profile())


def test_unknown_command(gs: Gpuscope) -> None:
    """An unknown subcommand is a usage error (exit 2) naming it, without a traceback."""
    res = gs.run("frobnicate", "x.py")
    assert res.returncode == 2, res.describe()
    assert "Traceback" not in res.stderr
    assert any("frobnicate" in line for line in res.errors), res.describe()


def test_unknown_trace_value(gs: Gpuscope) -> None:
    """An unknown --trace value is one error line naming it; the program does not start."""
    gs.script("mark.py", MARKER)
    res = gs.profile("-t", "cuda,bogus", "mark.py")
    _single_error(res, "bogus")
    assert not (gs.cwd / "started.marker").exists()


def test_nonexistent_output_directory(gs: Gpuscope) -> None:
    """-o into a directory that does not exist fails before the program starts."""
    gs.script("mark.py", MARKER)
    res = gs.profile(*FAST, "-o", "no/such/dir/out", "mark.py")
    _single_error(res, "no/such/dir")
    assert not (gs.cwd / "started.marker").exists()


def test_unwritable_output_directory(gs: Gpuscope) -> None:
    """-o into a read-only directory fails before the program starts."""
    ro = gs.cwd / "readonly"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if os.access(ro, os.W_OK):
            pytest.skip("this user can write a 0o500 directory (root)")
        gs.script("mark.py", MARKER)
        res = gs.profile(*FAST, "-o", "readonly/out", "mark.py")
        _single_error(res, "readonly")
        assert not (gs.cwd / "started.marker").exists()
    finally:
        ro.chmod(0o700)


# -- how the program ends -----------------------------------------------------------------------


def test_exception_in_program(gs: Gpuscope) -> None:
    """An uncaught exception: its traceback on stderr, exit 1, and a complete, readable report."""
    gs.script("boom.py", "raise ValueError('boom-1234')\n")
    res = gs.profile(*FAST, "boom.py")
    assert res.returncode == 1, res.describe()
    assert "Traceback (most recent call last)" in res.stderr
    assert "ValueError: boom-1234" in res.stderr
    report = gs.cwd / "report1.gpuscope"
    facts = read_report(report)
    assert len(facts.processes) == 1
    assert facts.meta["status"] == "complete"
    stats = gs.run("stats", "report1.gpuscope")
    assert stats.returncode == 0, stats.describe()
    assert "Traceback" not in stats.stderr


def test_os_exit_in_program(gs: Gpuscope) -> None:
    """os._exit(5) skips the agent's exit hooks; gpuscope still exits 5 and writes the report."""
    gs.script("hard_exit.py", "import os\nprint('before', flush=True)\nos._exit(5)\n")
    res = gs.profile(*FAST, "hard_exit.py")
    assert res.returncode == 5, res.describe()
    assert res.stdout == "before\n"
    facts = read_report(gs.cwd / "report1.gpuscope")
    assert facts.meta["exit_code"] == 5
    assert facts.meta["status"] == "complete"
    assert len(facts.processes) == 1


def test_program_kills_itself_with_sigkill(gs: Gpuscope) -> None:
    """A program that dies by SIGKILL: exit 137 (128+9) and a report with exit_signal 9."""
    gs.script("suicide.py", "import os\nos.kill(os.getpid(), 9)\n")
    res = gs.profile(*FAST, "suicide.py")
    assert res.returncode == 137, res.describe() + f"\n({signal_name(res.returncode)})"
    facts = read_report(gs.cwd / "report1.gpuscope")
    assert facts.meta["exit_signal"] == 9
    assert facts.meta["exit_code"] is None
    assert facts.meta["status"] == "complete"
    assert "SIGKILL" in res.stderr


SLEEPER = """\
    import time
    open("started.marker", "w").close()
    for _ in range(600):
        time.sleep(0.05)
    print("not interrupted")
"""


def test_sigterm_to_gpuscope_reaches_program(gs: Gpuscope) -> None:
    """SIGTERM sent to gpuscope is passed to the program, which dies by it (exit 143 = 128+15);
    the agent still delivers its records and gpuscope finishes the report."""
    gs.script("sleeper.py", SLEEPER)
    args = (*FAST, "sleeper.py")
    proc = gs.start("profile", *args)
    wait_for_file(gs.cwd / "started.marker", proc)
    os.kill(proc.pid, signal.SIGTERM)
    res = finish(proc, ("profile", *args))
    assert res.returncode == 143, res.describe()
    assert "not interrupted" not in res.stdout
    facts = read_report(gs.cwd / "report1.gpuscope")
    assert facts.meta["status"] == "complete"
    assert facts.meta["exit_signal"] == signal.SIGTERM
    assert len(facts.processes) == 1
    assert facts.processes[0]["end_ns"] is not None  # the agent's SIGTERM hook ran
    assert "Traceback" not in res.stderr


def test_ctrl_c_interrupts_program_and_report_is_complete(gs: Gpuscope) -> None:
    """Ctrl-C (SIGINT to the foreground process group): the program gets KeyboardInterrupt and
    shows its traceback, gpuscope waits for it and writes a complete report."""
    gs.script("sleeper.py", SLEEPER)
    args = (*FAST, "sleeper.py")
    proc = gs.start("profile", *args, new_session=True)
    wait_for_file(gs.cwd / "started.marker", proc)
    os.killpg(proc.pid, signal.SIGINT)
    res = finish(proc, ("profile", *args))
    assert "KeyboardInterrupt" in res.stderr, res.describe()
    assert "Traceback (most recent call last)" in res.stderr
    assert res.returncode == 130, res.describe()
    assert "gpuscope: interrupted" not in res.stderr
    facts = read_report(gs.cwd / "report1.gpuscope")
    assert facts.meta["status"] == "complete"
    assert facts.meta["exit_signal"] == signal.SIGINT
    assert len(facts.processes) == 1


# -- collectors that cannot run here ------------------------------------------------------------


def test_without_cupti_python(gs: Gpuscope) -> None:
    """With cupti-python missing, the program still runs and sets the exit code, and gpuscope says
    so in exactly one line (no traceback)."""
    fake = gs.cwd / "fake_site"
    (fake / "cupti").mkdir(parents=True)
    (fake / "cupti" / "__init__.py").write_text("raise ImportError('cupti hidden by the test')\n")
    gs.script("four.py", "import sys\nprint('ran')\nsys.exit(4)\n")
    res = gs.profile("-t", "cuda", "four.py", env=base_env({"PYTHONPATH": str(fake)}))
    assert res.returncode == 4, res.describe()
    assert res.stdout == "ran\n"
    assert "Traceback" not in res.stderr, res.describe()
    assert len(res.lines_mentioning("cupti-python")) == 1, res.describe()
    assert (gs.cwd / "report1.gpuscope").is_file()


@pytest.mark.skipif(_cuda_driver_present(), reason="a CUDA driver is installed here")
def test_without_cuda_driver(gs: Gpuscope) -> None:
    """Without a CUDA driver (cupti-python installed), gpuscope says so in one line, no traceback."""
    pytest.importorskip("cupti")
    gs.script("ok.py", "print('ran')\n")
    res = gs.profile("-t", "cuda", "ok.py")  # the default would skip CUDA on a machine without a GPU
    assert res.returncode == 0, res.describe()
    assert res.stdout == "ran\n"
    assert "Traceback" not in res.stderr, res.describe()
    assert len(res.lines_mentioning("no CUDA driver")) == 1, res.describe()


# -- process trees ---------------------------------------------------------------------------------


def test_child_python_process_is_profiled(gs: Gpuscope) -> None:
    """A Python child started by the program is profiled too: two rows in the process table, the
    child's parent being the program."""
    gs.script("parent.py", """\
        import subprocess, sys
        subprocess.run([sys.executable, "-c", "print('from child')"], check=True)
        print("from parent")
    """)
    res = gs.profile(*FAST, "parent.py")
    assert res.returncode == 0, res.describe()
    assert res.stdout == "from child\nfrom parent\n"
    procs = read_report(gs.cwd / "report1.gpuscope").processes
    assert len(procs) == 2, procs
    parent, child = procs  # ordered by start time
    assert child["ppid"] == parent["pid"]
    assert "-c" in json.loads(child["argv"])
    assert all(p["end_ns"] is not None for p in procs)
