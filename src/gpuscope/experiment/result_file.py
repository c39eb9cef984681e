"""A result of ``gpuscope try --json`` read back, so that other outputs (the HTML report) show it.

The file is what :func:`..reporters.try_text.as_data` wrote, but it may come from anyone: every field
that is shown is checked for its type (text, a finite number, a list of them) and a file that is not
such a result is refused in one line (:class:`TryResultError`, exit 2) saying which field is wrong. The
result is rebuilt as the :class:`.measure.TryResult` the measurement returned, so that its texts come
from the same functions as ``gpuscope try``'s own. The runs (``runs``) are not read back: no output
shows them but the JSON itself.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..analysis.diagnosis.finding import Finding
from ..errors import GpuscopeError
from .fixes import Fix, Planned
from .interval import Gain
from .measure import FixResult, TryResult
from .numerics import Agreement
from .runs import Budget, Program

STATUSES = ("measured", "crashed", "not applied", "no steps")
MAX_BYTES = 64 * 1024 * 1024  # far past any real result: a file this large is something else
_LARGEST = 1e18  # past this a number is no step time nor share (and would overflow the texts' arithmetic)


class TryResultError(GpuscopeError):
    """A file given as a result of ``gpuscope try --json`` that is not one."""

    def __init__(self, source: str, why: str) -> None:
        super().__init__(f"{source} is not a result of gpuscope try --json: {why}", exit_code=2)


class _Fields:
    """One JSON object of the file, its fields read with their types checked."""

    def __init__(self, value: Any, where: str, source: str) -> None:
        if not isinstance(value, dict):
            raise TryResultError(source, f"{where or 'the file'} is {_kind(value)}, not an object")
        self.d, self.where, self.source = value, where, source

    def _name(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def _bad(self, key: str, want: str) -> TryResultError:
        if key not in self.d:
            return TryResultError(self.source, f"it has no {self._name(key)}")
        return TryResultError(self.source, f"{self._name(key)} is {_kind(self.d[key])}, not {want}")

    def text(self, key: str, optional: bool = False) -> str | None:
        v = self.d.get(key)
        if isinstance(v, str) or (optional and v is None):
            return v
        raise self._bad(key, "text")

    def number(self, key: str, optional: bool = False) -> float | None:
        v = self.d.get(key)
        if optional and v is None:
            return None
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and abs(v) < _LARGEST:
            return float(v)
        raise self._bad(key, "a finite number")

    def count(self, key: str, least: int, optional: bool = False) -> int | None:
        v = self.d.get(key)
        if optional and v is None:
            return None
        if isinstance(v, int) and not isinstance(v, bool) and least <= v < _LARGEST:
            return v
        raise self._bad(key, f"a whole number >= {least}")

    def flag(self, key: str, optional: bool = False) -> bool | None:
        v = self.d.get(key)
        if isinstance(v, bool) or (optional and v is None):
            return v
        raise self._bad(key, "true or false")

    def items(self, key: str, optional: bool = False) -> list[Any]:
        v = self.d.get(key)
        if optional and v is None:
            return []
        if isinstance(v, list):
            return v
        raise self._bad(key, "a list")

    def texts(self, key: str, optional: bool = False) -> list[str]:
        out = self.items(key, optional)
        if not all(isinstance(x, str) for x in out):
            raise self._bad(key, "a list of texts")
        return out

    def numbers(self, key: str) -> tuple[float, ...]:
        out = self.items(key, optional=True)
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in out):
            raise self._bad(key, "a list of finite numbers")
        return tuple(float(x) for x in out)

    def child(self, key: str, optional: bool = False) -> _Fields | None:
        v = self.d.get(key)
        if optional and v is None:
            return None
        if key not in self.d:
            raise self._bad(key, "an object")
        return _Fields(v, self._name(key), self.source)


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true or false"
    if isinstance(v, (int, float)):
        return f"the number {v!r}" if math.isfinite(v) and abs(v) < _LARGEST else "a number out of range"
    return {str: "text", list: "a list", dict: "an object"}.get(type(v), type(v).__name__)


def read(path: str | Path) -> TryResult:
    """The result in the file at ``path``; :class:`TryResultError` (or :class:`GpuscopeError` for a file
    that cannot be read) in one line otherwise."""
    source = str(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise GpuscopeError(f"{source}: no such file") from None
    except IsADirectoryError:
        raise GpuscopeError(f"{source} is a directory, not a result of gpuscope try --json") from None
    except OSError as exc:
        raise GpuscopeError(f"{source}: cannot read it: {exc.strerror or exc}") from None
    if len(raw) > MAX_BYTES:
        raise TryResultError(source, f"it is larger than {MAX_BYTES // (1024 * 1024)} MB")
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise TryResultError(source, "it is not UTF-8 text") from None
    except RecursionError:
        raise TryResultError(source, "its JSON is nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, NaN or Infinity
        raise TryResultError(source, f"it is not JSON ({str(exc).splitlines()[0]})") from None
    return from_data(data, source)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def from_data(data: Any, source: str) -> TryResult:
    """The result that ``as_data`` made ``data`` of (``source`` names the file in errors)."""
    top = _Fields(data, "", source)
    if "fixes" not in top.d or "command" not in top.d:
        raise TryResultError(source, "it has no command and fixes (gpuscope try --json writes them)")
    argv = top.texts("command")
    if not argv:
        raise TryResultError(source, "its command is empty")
    budget = top.child("budget")
    assert budget is not None
    result = TryResult(
        program=Program(argv, top.text("cwd") or "", {}), rounds=top.count("rounds", 1) or 1,
        budget=Budget(budget.count("steps", 0) or 0, budget.number("time_s") or 0.0),
        warmup=top.count("warmup_steps", 0) or 0, tolerance=top.number("tolerance") or 0.0,
        fixes=[_fix(_Fields(f, f"fixes[{i}]", source)) for i, f in enumerate(top.items("fixes"))],
        needs_edit=[_not_tried(_Fields(f, f"not_tried[{i}]", source)) for i, f in
                    enumerate(top.items("not_tried", optional=True))],
        step_ns=top.number("step_ns", optional=True), step_source=top.text("step_source", optional=True) or "",
        baseline_error=top.text("baseline_error", optional=True), report=top.text("report", optional=True) or "",
        top_findings=top.texts("top_findings", optional=True))
    return result


def _finding(f: _Fields, share: float | None) -> Finding:
    return Finding(f.text("rule") or "", f.text("title") or "", 0.0, share or 0.0, [],
                   f.text("location", optional=True) or "", "")


def _not_tried(f: _Fields) -> Finding:
    return _finding(f, f.number("estimated_gain"))


def _fix(f: _Fields) -> FixResult:
    status = f.text("status") or ""
    if status not in STATUSES:
        raise TryResultError(f.source, f"{f.where}.status is {status[:40]!r}, not one of {', '.join(STATUSES)}")
    fix = Fix(f.text("name") or "", f.text("title") or "", tuple(f.texts("rules", optional=True)),
              changes_numerics=bool(f.flag("changes_numerics", optional=True)))
    answered = f.child("finding", optional=True)
    finding = None if answered is None else _finding(answered, f.number("estimated_gain", optional=True))
    settings = f.d.get("settings")
    planned = Planned(fix, finding, settings if isinstance(settings, dict) else {})
    gain = None
    g = f.child("measured_gain", optional=True)
    if g is not None:
        gain = Gain(g.number("median") or 0.0, g.number("low", optional=True), g.number("high", optional=True),
                    g.count("rounds", 1) or 1)
    return FixResult(planned, status, gain, _agreement(f.child("numerics", optional=True)),
                     f.number("step_ns", optional=True), f.text("detail", optional=True) or "", _dynamo(f),
                     f.text("verdict", optional=True) or "", f.text("ending", optional=True) or "",
                     f.count("crashed_round", 1, optional=True))


def _agreement(a: _Fields | None) -> Agreement | None:
    if a is None:
        return None
    agrees = a.flag("agrees", optional=True)
    compared = agrees is not None  # the texts of a comparison name its difference and tolerance
    return Agreement(a.text("what", optional=True) or "", a.number("difference", optional=not compared),
                     a.number("tolerance", optional=not compared), agrees, a.text("note", optional=True) or "",
                     a.numbers("losses_fixed"), a.numbers("losses_as_written"))


def _dynamo(f: _Fields) -> dict[str, int] | None:
    d = f.child("dynamo", optional=True)
    if d is None:
        return None
    return {str(k): d.count(k, 0) or 0 for k in d.d}
