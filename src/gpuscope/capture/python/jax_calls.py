"""JAX programs: the end of each outermost call of a jitted function, as an iteration mark.

A JAX loop calls one jitted function per step (a training step, a forward) and marks nothing that
gpuscope sees: no optimizer PyTorch counts, no module calls. Its steps are found afterwards from the
repeating launches (analysis/pattern_steps.py), but the overhead probe has to switch collection off
and on *while* the loop runs, counting iterations as it goes. So while gpuscope profiles, ``jax.jit``
returns its function wrapped: the end of each call on the main thread that is not inside another
jitted call is an ``iteration`` mark of source ``jit`` (capture/process/window.py counts them as it
counts a PyTorch inference loop's outermost module calls, below any step mark of the program's own).

The wrapper costs one Python call and a counter per jitted call (a JAX dispatch is several µs).
Everything else goes to JAX's own object: ``lower``, ``trace``, ``eval_shape``, attributes, binding
as a method; calls made while JAX traces (a jitted function called inside another) are not counted.
Functions jitted before the program imported jax through gpuscope (inside jax itself) are left as
they are. Standard library only; nothing here raises into the program.
"""

from __future__ import annotations

import functools
import threading
import types
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from ..collectors import Context
    from .ranges import RangeRecorder

SOURCE = "jit"


class _Counter:
    """The depth of jitted calls on the main thread, and what to do at the end of an outermost one."""

    def __init__(self, mark: Callable[[], None], on_error: Callable[[BaseException], None]) -> None:
        self.main = threading.main_thread().ident
        self.depth = 0
        self.mark = mark
        self.on_error = on_error
        self.enabled = True

    def ended(self) -> None:
        try:
            self.mark()
        except Exception as exc:  # noqa: BLE001  (a failed mark never breaks the program's call)
            self.enabled = False
            self.on_error(exc)


class Jitted:
    """A function ``jax.jit`` returned, whose outermost calls on the main thread mark an iteration."""

    __slots__ = ("_gpuscope_jitted", "_gpuscope_counter", "__weakref__")

    def __init__(self, jitted: Any, counter: _Counter) -> None:
        object.__setattr__(self, "_gpuscope_jitted", jitted)
        object.__setattr__(self, "_gpuscope_counter", counter)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        counter = self._gpuscope_counter
        if not counter.enabled or threading.get_ident() != counter.main:
            return self._gpuscope_jitted(*args, **kwargs)
        counter.depth += 1
        try:
            return self._gpuscope_jitted(*args, **kwargs)
        finally:
            counter.depth -= 1
            if not counter.depth:
                counter.ended()

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return self
        return functools.partial(self, instance)  # a jitted method, bound as JAX binds it

    def __getattr__(self, name: str) -> Any:
        return getattr(self._gpuscope_jitted, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._gpuscope_jitted, name, value)

    def __repr__(self) -> str:
        return repr(self._gpuscope_jitted)

    @property
    def __wrapped__(self) -> Any:
        return self._gpuscope_jitted


def wrap_jit(jit: Callable[..., Any], counter: _Counter) -> Callable[..., Any]:
    """``jax.jit`` that wraps what it returns; as a decorator with options (``jax.jit(static_argnums=0)``
    returns a decorator) too."""

    @functools.wraps(jit)
    def gpuscope_jit(*args: Any, **kwargs: Any) -> Any:
        made = jit(*args, **kwargs)
        if not args and callable(made) and not hasattr(made, "lower"):  # jit(**options): a decorator
            return lambda fun: Jitted(made(fun), counter)
        return Jitted(made, counter)

    gpuscope_jit._gpuscope_original = jit  # type: ignore[attr-defined]
    return gpuscope_jit


class JaxCalls:
    """``jax.jit`` wrapped in the imported jax module: a collector with no rows of its own (its marks
    are the range recorder's) that gives jax its ``jit`` back at :meth:`uninstall`."""

    def __init__(self, jax: types.ModuleType, recorder: RangeRecorder, diag: Callable[[str, str], None]) -> None:
        self.jax = jax
        self.original = getattr(jax, "jit", None)
        self.counter = _Counter(lambda: recorder.mark("iteration", "", SOURCE, "iteration"),
                                lambda exc: diag("warning", f"JAX iteration marks stopped: {type(exc).__name__}: {exc}"))
        if self.original is not None and not hasattr(self.original, "_gpuscope_original"):
            jax.jit = wrap_jit(self.original, self.counter)  # type: ignore[attr-defined]

    def set_collecting(self, on: bool) -> None:
        """Nothing: the marks count iterations whether collection is on or off (the probe needs both)."""

    def take_rows(self) -> dict[str, list[tuple[Any, ...]]]:
        """Nothing: the range recorder delivers the marks."""
        return {}

    def uninstall(self) -> None:
        """Give jax its own ``jit``; functions already wrapped stop marking."""
        self.counter.enabled = False
        if self.original is not None and getattr(self.jax, "jit", None) is not self.original:
            self.jax.jit = self.original  # type: ignore[attr-defined]


def start(ctx: Context, module: Any = None) -> JaxCalls:
    """Wrap the imported jax module's ``jit`` (``module``), marking into the process's range recorder."""
    return JaxCalls(module, ctx.collector("ranges"), ctx.diag)
