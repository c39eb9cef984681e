"""Nothing the program did is lost because of gpuscope: names that are not UTF-8, a closed or broken
stderr, two runs writing the same report at once, and a program that handles SIGTERM itself."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import gpuscope

from .conftest import TIMEOUT_S, Gpuscope, Result, base_env, finish, read_report, wait_for_file

FAST = ("-t", "none")

# Names made of bytes that are not UTF-8, as Python gives them (surrogateescape), and one lone
# surrogate that no file name makes; and a name interned after them, that must not be lost with them.
NAMES = """\
    import os, sys, threading, time
    import gpuscope

    gpuscope.mark("lone\\udcffsurrogate")
    gpuscope.mark(os.environ["RUN_NAME"])
    with gpuscope.annotate("step\\udce9", domain="dom\\udce9", category="cat\\ud800"):
        pass

    def spin():
        t = time.perf_counter()
        while time.perf_counter() - t < 0.3:
            pass

    worker = threading.Thread(target=spin, name="worker\\udce9")
    worker.start()
    worker.join()
    with gpuscope.annotate("after"):
        pass
    print("args", len(sys.argv))
"""


def test_names_that_are_not_utf8_are_kept_escaped_and_lose_nothing_else(gs: Gpuscope) -> None:
    gs.script("train_\udce9.py", NAMES)
    env = base_env({"RUN_NAME": "run\udcfe"})  # the variable's value is the byte 0xfe
    res = gs.profile("-t", "cpu", "train_\udce9.py", "arg\udcff", env=env)
    assert res.returncode == 0 and res.stdout == "args 2\n", res.describe()
    assert "Traceback" not in res.stderr and not res.errors, res.describe()
    facts = read_report(gs.cwd / "report1.gpuscope")
    assert facts.meta["status"] == "complete", res.describe()
    assert facts.meta["command"][1:] == ["train_\\xe9.py", "arg\\xff"]
    assert json.loads(facts.processes[0]["argv"])[1:] == ["train_\\xe9.py", "arg\\xff"]
    with gpuscope.load(str(gs.cwd / "report1.gpuscope")) as report:
        strings = {value for (value,) in report.sql("SELECT value FROM string")}
        threads = {name for (name,) in report.sql("SELECT DISTINCT name FROM thread_time")}
        categories = {c for (c,) in report.sql("SELECT DISTINCT category FROM nvtx_range WHERE category <> ''")}
    assert {"lone\\xffsurrogate", "run\\xfe", "step\\xe9", "dom\\xe9", "after"} <= strings
    assert "worker\\xe9" in threads and categories == {"cat\\ud800"}


def test_a_working_directory_that_is_not_utf8_gets_its_report_and_summary(tmp_path: Path) -> None:
    from gpuscope.trace.outputs import readable_name

    where = tmp_path / "d\udce9"
    where.mkdir()
    gs = Gpuscope(where)
    gs.script("hello.py", "print('hello')\n")
    res = gs.profile(*FAST, "hello.py")
    assert res.returncode == 0 and res.stdout == "hello\n", res.describe()
    assert not res.errors and "Program:" in res.stderr, res.describe()  # the summary read the report
    with readable_name(where / "report1.gpuscope") as name, gpuscope.load(str(name)) as report:
        assert report.meta["status"] == "complete" and report.meta["cwd"].endswith("/d\\xe9")
        assert report.sql("SELECT cwd FROM process")[0][0].endswith("/d\\xe9")
    assert sorted(p.name for p in where.iterdir()) == ["hello.py", "report1.gpuscope"]


TALKER = """\
    import os, sys, time
    for fd in (0, 2):
        try:
            os.fstat(fd)
            print(fd, "open", flush=True)
        except OSError:
            print(fd, "closed", flush=True)
    for i in range(3):
        print("out", i, flush=True)
        time.sleep(0.05)
    sys.exit(3)
"""


def _close_stdin_and_stderr() -> None:
    os.close(0)
    os.close(2)


def _run_with_stderr(gs: Gpuscope, args: tuple[str, ...], stderr: int | None, close_them: bool) -> Result:
    """Run gpuscope with ``stderr`` as its fd 2 (or fds 0 and 2 closed) and its stdout captured."""
    proc = subprocess.run(
        [sys.executable, "-m", "gpuscope", "profile", *args], cwd=gs.cwd, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=stderr, env=base_env(), timeout=TIMEOUT_S, text=True,
        preexec_fn=_close_stdin_and_stderr if close_them else None)
    return Result(args, proc.returncode, proc.stdout, "")


def test_closed_stderr_keeps_gpuscope_out_of_stdout_and_the_program_gets_it_closed(gs: Gpuscope) -> None:
    gs.script("talk.py", TALKER)
    res = _run_with_stderr(gs, (*FAST, "talk.py"), None, close_them=True)
    assert res.returncode == 3, res.describe()
    assert res.stdout == "0 closed\n2 closed\nout 0\nout 1\nout 2\n", res.describe()
    assert read_report(gs.cwd / "report1.gpuscope").meta["status"] == "complete"


def test_broken_stderr_pipe_does_not_stop_the_run(gs: Gpuscope) -> None:
    """gpuscope's stderr is a pipe nobody reads any more (``2>&1 >/dev/null | head``): its lines are
    lost, never the report or the program's exit code."""
    gs.script("talk.py", TALKER)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        # the default collectors: gpuscope writes before the program starts (no GPU here) and at its end
        res = _run_with_stderr(gs, ("talk.py",), write_end, close_them=False)
    finally:
        os.close(write_end)
    assert res.returncode == 3, res.describe()
    assert res.stdout == "0 open\n2 open\nout 0\nout 1\nout 2\n", res.describe()
    facts = read_report(gs.cwd / "report1.gpuscope")
    assert facts.meta["status"] == "complete" and facts.meta["exit_code"] == 3


WAIT = """\
    import os, sys, time
    open(sys.argv[1] + ".started", "w").close()
    while sys.argv[2] != "now" and not os.path.exists(sys.argv[2]):
        time.sleep(0.02)
"""


def test_two_runs_forcing_one_name_leave_the_last_ones_whole_report(gs: Gpuscope) -> None:
    gs.script("wait.py", WAIT)
    first = gs.start("profile", *FAST, "-o", "same", "--force-overwrite", "wait.py", "first", "go")
    wait_for_file(gs.cwd / "first.started", first)  # its report is open: the second one starts now
    second = gs.start("profile", *FAST, "-o", "same", "--force-overwrite", "wait.py", "second", "now")
    done_second = finish(second)
    (gs.cwd / "go").touch()  # the first ends last
    done_first = finish(first)
    for res in (done_first, done_second):
        assert res.returncode == 0 and res.lines_mentioning("wrote "), res.describe()
    facts = read_report(gs.cwd / "same.gpuscope")
    assert facts.meta["status"] == "complete" and facts.meta["command"][-2:] == ["first", "go"]
    left = sorted(p.name for p in gs.cwd.iterdir() if p.name.startswith(".") or p.suffix == ".wal")
    assert left == [], left


OWN_HANDLER = """\
    import signal, sys, time
    import gpuscope

    signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    for i in range(3000):
        with gpuscope.annotate("step"):
            time.sleep(0.01)
        print(f"step {i}", flush=True)
        if i == 20:
            open("ready", "w").close()
"""


def test_group_sigterm_to_a_program_with_its_own_handler(gs: Gpuscope) -> None:
    """The group's SIGTERM reaches the program, and gpuscope, which would pass it on: the program's
    handler exits, the report is complete, and nothing is said about an exception in the agent's exit
    hook (the agent's part: test_agent_lifecycle)."""
    gs.script("own.py", OWN_HANDLER)
    proc = gs.start("profile", "-t", "cpu", "own.py", new_session=True)
    wait_for_file(gs.cwd / "ready", proc)
    os.killpg(proc.pid, signal.SIGTERM)
    res = finish(proc)
    assert res.returncode == 0, res.describe()
    assert "Exception ignored" not in res.stderr and "Traceback" not in res.stderr, res.describe()
    printed = sum(1 for line in res.stdout.splitlines() if line.startswith("step "))
    with gpuscope.load(str(gs.cwd / "report1.gpuscope")) as report:
        assert report.meta["status"] == "complete"
        steps = report.sql("""SELECT count(*) FROM nvtx_range r JOIN string s ON s.id = r.name_id
                              WHERE s.value = 'step' AND r.end_ns IS NOT NULL""")[0][0]
        ended = report.sql("SELECT count(*) FROM process WHERE end_ns IS NOT NULL")[0][0]
    assert printed - 1 <= steps <= printed + 1 and ended == 1, res.describe()


def test_a_signal_the_program_got_from_its_group_is_not_passed_on_again() -> None:
    """The launcher passes a SIGTERM on to the program only if the program has not begun to end
    (it then got it from the process group already)."""
    from gpuscope.capture.process import launch

    child = [sys.executable, "-c", "import time; time.sleep(1.0)"]
    codes = []
    for ending in (True, False):
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()
        status = launch.run(child, dict(os.environ), lambda: None, 0.05, ending=lambda pid, e=ending: e)
        codes.append(status.returncode)
    assert codes == [0, -signal.SIGTERM]


def test_killed_launcher_leaves_its_report_in_place(gs: Gpuscope) -> None:
    """gpuscope is killed: the program moves the report that was being written to its name."""
    gs.script("own.py", OWN_HANDLER.replace("3000", "150"))
    proc = gs.start("profile", *FAST, "-o", "kept", "own.py", new_session=True)
    wait_for_file(gs.cwd / "ready", proc)
    os.kill(proc.pid, signal.SIGKILL)
    finish(proc)  # the program holds the pipes until it ends
    facts = read_report(gs.cwd / "kept.gpuscope")
    assert facts.meta["status"] == "recording" and len(facts.processes) == 1
    assert not [p for p in gs.cwd.iterdir() if p.name.startswith(".kept")]


def test_writer_escapes_names_at_each_way_in(tmp_path: Path) -> None:
    """Meta, interned strings, rows with text and the writer's own problems: each stored valid."""
    from gpuscope.trace.writer import ReportWriter

    w = ReportWriter(tmp_path / "r.gpuscope")
    w.set_meta(cwd="/d\udce9", command=["x\udcff"])
    ids = [w.intern("a\udce9"), w.intern("a\\xe9"), w.intern("b")]
    w.add_host_counters([(1, 2, "n\udce9", 1.0)])
    w.record_problem(0, "bad \udce9")
    w.close(exit_code=0)
    assert ids[0] == ids[1] != ids[2]
    with gpuscope.load(str(tmp_path / "r.gpuscope")) as report:
        assert report.meta["cwd"] == "/d\\xe9" and report.meta["command"] == ["x\\xff"]
        assert report.sql("SELECT name FROM host_counter") == [("n\\xe9",)]
        assert report.sql("SELECT message FROM diagnostic") == [("bad \\xe9",)]


def test_a_report_whose_own_name_is_not_utf8_is_read(tmp_path: Path) -> None:
    """DuckDB opens UTF-8 names only: the reader reaches such a report through a descriptor of its own."""
    import gzip
    import shutil

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "mlp_default.gpuscope.gz"
    target = os.path.join(os.fsencode(tmp_path), b"r\xe9.gpuscope")
    with gzip.open(fixture) as src, open(target, "wb") as dst:
        shutil.copyfileobj(src, dst)
    res = subprocess.run([os.fsencode(sys.executable), b"-m", b"gpuscope", b"stats", b"-r", b"cuda_gpu_kern_sum",
                          target], capture_output=True, timeout=120)
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    assert b"CUDA GPU Kernel Summary" in res.stdout and b"damaged" not in res.stderr
