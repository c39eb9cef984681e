"""JAX loops: the ends of outermost calls of jitted functions are iteration marks (source ``jit``), so
that the overhead probe can time a loop that marks no steps. Checked against a stand-in ``jax``
module (the real one is a GPU-image dependency), and, end to end, by profiling a program that imports
such a module."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
import types
from pathlib import Path
from typing import Any

from gpuscope.analysis.probe import probe_timings
from gpuscope.capture.capture_range import CaptureSpec
from gpuscope.capture.process.window import CaptureWindow
from gpuscope.capture.python.jax_calls import JaxCalls
from gpuscope.trace.report import Report


class _Compiled:
    """What a stand-in ``jax.jit`` returns: calls the function, and has a method of JAX's own."""

    def __init__(self, fun: Any, static: Any = None) -> None:
        self.fun, self.static = fun, static

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fun(*args, **kwargs)

    def lower(self, *args: Any) -> str:
        return f"lowered {self.fun.__name__}{args}"


def _fake_jax() -> types.ModuleType:
    jax = types.ModuleType("jax")

    def jit(fun: Any = None, *, static_argnums: Any = None) -> Any:
        if fun is None:  # jax.jit(static_argnums=...) as a decorator
            return lambda f: _Compiled(f, static_argnums)
        return _Compiled(fun, static_argnums)

    jax.jit = jit  # type: ignore[attr-defined]
    return jax


class _Recorder:
    def __init__(self, fail: bool = False) -> None:
        self.marks: list[tuple[str, str, str, str]] = []
        self.fail = fail

    def mark(self, name: str, domain: str = "", source: str = "gpuscope", category: str = "") -> None:
        if self.fail:
            raise RuntimeError("no room")
        self.marks.append((name, domain, source, category))


def _install(fail: bool = False) -> tuple[types.ModuleType, _Recorder, list[str], JaxCalls]:
    jax, rec, said = _fake_jax(), _Recorder(fail), []
    calls = JaxCalls(jax, rec, lambda level, text: said.append(f"{level}: {text}"))  # type: ignore[arg-type]
    return jax, rec, said, calls


def test_each_outermost_jitted_call_marks_one_iteration() -> None:
    jax, rec, _, _ = _install()
    inner = jax.jit(lambda x: x + 1)

    def body(x: int) -> int:
        return inner(x) * 2  # a jitted call inside another: JAX traces it, no iteration of its own

    step = jax.jit(body)
    assert [step(i) for i in range(3)] == [2, 4, 6]
    assert rec.marks == [("iteration", "", "jit", "iteration")] * 3
    assert step.lower(1) == "lowered body(1,)"  # JAX's own methods still answer
    assert step.__wrapped__.fun is body


def test_decorator_forms_and_methods_are_wrapped() -> None:
    jax, rec, _, _ = _install()

    @jax.jit
    def plain(x: int) -> int:
        return x

    @functools.partial(jax.jit, static_argnums=1)
    def partial_form(x: int, n: int) -> int:
        return x * n

    @jax.jit(static_argnums=0)
    def options_form(x: int) -> int:
        return -x

    class Model:
        scale = 3

        @jax.jit
        def forward(self, x: int) -> int:
            return self.scale * x

    assert (plain(1), partial_form(2, 3), options_form(4), Model().forward(5)) == (1, 6, -4, 15)
    assert len(rec.marks) == 4
    assert partial_form.static == 1 and options_form.static == 0


def test_other_threads_do_not_mark_and_uninstall_gives_jit_back() -> None:
    jax, rec, _, calls = _install()
    original = calls.original
    step = jax.jit(lambda x: x)
    worker = threading.Thread(target=lambda: [step(i) for i in range(5)])
    worker.start()
    worker.join()
    assert rec.marks == []  # a data-loading thread's calls are not the loop's iterations
    step(1)
    assert len(rec.marks) == 1
    calls.uninstall()
    assert jax.jit is original
    step(2)  # wrapped before: passes through, marks no more
    assert len(rec.marks) == 1


def test_a_failing_mark_never_breaks_the_call_and_is_said_once() -> None:
    jax, _, said, _ = _install(fail=True)
    step = jax.jit(lambda x: x * 10)
    assert [step(i) for i in range(3)] == [0, 10, 20]
    assert len(said) == 1 and said[0].startswith("warning: JAX iteration marks stopped: RuntimeError")


NOW = [0]


def test_jitted_calls_count_steps_above_module_calls_and_below_optimizer_steps() -> None:
    switches: list[bool] = []
    w = CaptureWindow(CaptureSpec(), lambda: NOW[0], switches.append, lambda *row: None)
    w.begin()
    for n in range(1, 4):
        w.step_mark("module", n)
    assert (w.step_source, w.steps) == ("module", 3)
    w.step_mark("jit", 10)
    assert (w.step_source, w.steps) == ("jit", 1)  # a better source starts the count again
    w.step_mark("module", 11)  # module calls inside a JAX program's loop no longer count
    assert w.steps == 1
    w.step_mark("torch", 12)
    assert (w.step_source, w.steps) == ("torch", 1)
    w.finish()


FAKE_JAX = '''
def jit(fun=None, **options):
    if fun is None:
        return lambda f: jit(f, **options)
    return fun
'''

JAX_LOOP = '''
import time
import jax

@jax.jit
def train_step(x):
    return x + 1

x = 0
for i in range(60):
    x = train_step(x)
    time.sleep(0.004)
'''


def test_the_probe_times_a_jax_loop_by_its_jitted_calls(tmp_path: Path) -> None:
    (tmp_path / "jax").mkdir()
    (tmp_path / "jax" / "__init__.py").write_text(FAKE_JAX)
    prog = tmp_path / "loop.py"
    prog.write_text(JAX_LOOP)
    out = tmp_path / "loop"
    proc = subprocess.run([sys.executable, "-m", "gpuscope", "profile", "-t", "nvtx", "-o", str(out), str(prog)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "GPUSCOPE_PROBE_GAP_S": "0", "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
    with Report.open(str(out) + ".gpuscope") as report:
        timings = probe_timings(report)
        marks = report.sql("SELECT count(*) FROM nvtx_range WHERE kind = 'mark' AND category = 'iteration' "
                           "AND source = 'jit'")[0][0]
    assert marks == 60  # one per call of train_step, recorded or not
    (timing,) = timings.values()
    assert timing.source == "jit" and timing.probes >= 2 and timing.measured
    assert timing.off_median > 4_000_000  # each iteration sleeps 4 ms
    assert "iterations (outermost calls of jitted JAX functions" in timing.describe()
