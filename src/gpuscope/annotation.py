"""Annotating code: ranges and marks that gpuscope records, and that Nsight tools see as NVTX.

``annotate`` takes the arguments of the ``nvtx`` package's ``annotate`` (message, color, domain,
category, payload), as a decorator or a context manager, so swapping the import works. When
gpuscope profiles the process, ranges go to its recorder; under another NVTX tool (Nsight Systems)
they are emitted as NVTX through the ``nvtx`` package; otherwise they cost a function call.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class _Backend:
    """Where annotations go: chosen once, at first use, or set by the profiling agent.

    This base records nothing (``active`` False), so a range costs a call and an attribute read.
    """

    active = False

    def push(self, message: str, color: Any, domain: str | None, category: Any) -> None:
        return None

    def pop(self, domain: str | None) -> None:
        return None

    def start(self, message: str, color: Any, domain: str | None, category: Any) -> Any:
        return None

    def end(self, handle: Any) -> None:
        return None

    def mark(self, message: str, color: Any, domain: str | None, category: Any) -> None:
        return None

    def step(self) -> None:
        return None


class _Nvtx(_Backend):
    """Emit real NVTX through the nvtx package (seen by Nsight Systems)."""

    active = True

    def __init__(self, nvtx: Any) -> None:
        self.nvtx = nvtx

    def push(self, message: str, color: Any, domain: str | None, category: Any) -> None:
        self.nvtx.push_range(message, color=color, domain=domain, category=category)

    def pop(self, domain: str | None) -> None:
        self.nvtx.pop_range(domain=domain)

    def start(self, message: str, color: Any, domain: str | None, category: Any) -> Any:
        return self.nvtx.start_range(message, color=color, domain=domain, category=category)

    def end(self, handle: Any) -> None:
        self.nvtx.end_range(handle)

    def mark(self, message: str, color: Any, domain: str | None, category: Any) -> None:
        self.nvtx.mark(message, color=color, domain=domain, category=category)


class RecorderBackend(_Backend):
    """Record in the profiling agent's range recorder."""

    active = True

    def __init__(self, recorder: Any, source: str = "gpuscope") -> None:
        self.r = recorder
        self.source = source

    def push(self, message: str, color: Any, domain: str | None, category: Any) -> None:
        self.r.push(message, domain or "", self.source, _text(category), _text(color))

    def pop(self, domain: str | None) -> None:
        self.r.pop()

    def start(self, message: str, color: Any, domain: str | None, category: Any) -> Any:
        return self.r.start(message, domain or "", self.source, _text(category), _text(color))

    def end(self, handle: Any) -> None:
        self.r.end(handle)

    def mark(self, message: str, color: Any, domain: str | None, category: Any) -> None:
        self.r.mark(message, domain or "", self.source, _text(category), _text(color))

    def step(self) -> None:
        self.r.mark("step", "", self.source, "step", None)


def _text(value: Any) -> str:
    return "" if value is None else str(value)


_backend: _Backend | None = None


def _choose() -> _Backend:
    """NVTX through the nvtx package when a tool listens (Nsight sets NVTX_INJECTION64_PATH),
    otherwise nothing: without a tool NVTX calls do nothing anyway, only slower."""
    global _backend
    if _backend is None:
        _backend = _Backend()
        if os.environ.get("NVTX_INJECTION64_PATH"):
            try:
                import nvtx  # noqa: PLC0415  (optional)

                _backend = _Nvtx(nvtx)
            except ImportError:
                pass
    return _backend


def use_recorder(recorder: Any) -> None:
    """Send annotations to ``recorder`` (called by the agent when gpuscope profiles the process)."""
    global _backend
    _backend = RecorderBackend(recorder)


def make_api(backend: Callable[[], _Backend]) -> dict[str, Any]:
    """Return the annotation API (annotate, push_range, pop_range, start_range, end_range, mark)
    bound to the backend that ``backend()`` returns at each call."""

    class annotate:  # noqa: N801  (named as the nvtx package names it)
        """A range around a block (``with annotate("name"):``) or a function (``@annotate()``).

        ``message`` defaults to the decorated function's name; ``color``, ``domain`` and
        ``category`` are kept with the range; ``payload`` is accepted for compatibility and not
        recorded.
        """

        __slots__ = ("message", "color", "domain", "category", "_b")

        def __init__(self, message: str | None = None, color: Any = None, domain: str | None = None,
                     category: Any = None, payload: Any = None) -> None:
            self.message = message
            self.color = color
            self.domain = domain
            self.category = category

        def __enter__(self) -> "annotate":
            b = self._b = backend()
            if b.active:
                b.push(self.message or "", self.color, self.domain, self.category)
            return self

        def __exit__(self, *exc: object) -> None:
            b = self._b
            if b.active:
                b.pop(self.domain)

        def __call__(self, func: F) -> F:
            message = self.message or func.__name__
            color, domain, category = self.color, self.domain, self.category

            @functools.wraps(func)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                b = backend()
                if not b.active:
                    return func(*args, **kwargs)
                b.push(message, color, domain, category)
                try:
                    return func(*args, **kwargs)
                finally:
                    b.pop(domain)

            return wrapper  # type: ignore[return-value]

    def push_range(message: str | None = None, color: Any = None, domain: str | None = None,
                   category: Any = None, payload: Any = None) -> None:
        """Open a range on this thread; close it with ``pop_range``."""
        backend().push(message or "", color, domain, category)

    def pop_range(domain: str | None = None) -> None:
        """Close this thread's innermost range (a pop with no open range is counted, not raised)."""
        backend().pop(domain)

    def start_range(message: str | None = None, color: Any = None, domain: str | None = None,
                    category: Any = None, payload: Any = None) -> Any:
        """Open a range that any thread may end; return the handle for ``end_range``."""
        return backend().start(message or "", color, domain, category)

    def end_range(handle: Any) -> None:
        """End a range opened by ``start_range``."""
        backend().end(handle)

    def mark(message: str | None = None, color: Any = None, domain: str | None = None,
             category: Any = None, payload: Any = None) -> None:
        """Record an instant."""
        backend().mark(message or "", color, domain, category)

    return {"annotate": annotate, "push_range": push_range, "pop_range": pop_range,
            "start_range": start_range, "end_range": end_range, "mark": mark}


def _current() -> _Backend:
    return _backend or _choose()


_api = make_api(_current)
annotate = _api["annotate"]
push_range = _api["push_range"]
pop_range = _api["pop_range"]
start_range = _api["start_range"]
end_range = _api["end_range"]
mark = _api["mark"]


def step() -> None:
    """Mark the end of a training or inference step; steps then follow these marks."""
    _current().step()
