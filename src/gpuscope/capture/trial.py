"""Inside a process launched by ``gpuscope try``: the fix's start-up patch, the step budget, and
what the launcher compares afterwards.

Started by the bootstrap right after the agent (which runs with collection off, so that its step
marks are kept and nothing is recorded), when ``GPUSCOPE_TRY`` holds the run's settings (JSON:
``patches`` ``[{"patch", "settings"}]``, ``steps``, ``time_budget_s``, ``losses``, ``out``). It

- installs the patches: at the import of torch (TF32, cuDNN's autotuner, the DataLoader's defaults),
  and at the first call of the *top module*, the first outermost module call of the main thread
  whose module has parameters (torch.compile, channels_last, bf16 autocast);
- times every step mark the agent sees, and ends the program (``SystemExit``, so that it exits as
  it would) at the step budget or once the time budget has passed at a step mark;
- keeps the first losses (scalar tensors whose ``backward`` is called) and a sample of the top
  module's last output, for the comparison of the program's numbers;
- writes all of it, with what each patch did (or why it did nothing), to ``out`` at exit.

Standard library only until the program imports torch.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
import threading
import time
from typing import Any, Callable

TRY_ENV = "GPUSCOPE_TRY"
OUTPUT_SAMPLE = 1024  # elements of each output tensor kept for the comparison
MAX_OUTPUT_TENSORS = 4
AT_IMPORT = ("tf32", "cudnn_benchmark", "dataloader", "pin_memory")
AT_FIRST_CALL = ("compile", "compile_reduce_overhead", "channels_last", "bf16_autocast", "tf32", "cudnn_benchmark")

_trial: Trial | None = None


class Trial:
    """The state of one tried run."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.patches: dict[str, dict[str, Any]] = {p["patch"]: dict(p.get("settings") or {})
                                                   for p in settings.get("patches", [])}
        self.steps = int(settings.get("steps") or 0)
        self.warmup = int(settings.get("warmup") or 0)
        self.window: dict[str, Any] | None = None  # the timed window: its source, first mark's count, start
        self.time_budget_ns = int(float(settings.get("time_budget_s") or 0) * 1e9)
        self.max_losses = int(settings.get("losses", 5))
        self.out = str(settings["out"])
        self.began = time.monotonic_ns()
        self.marks: dict[str, list[int]] = {}
        self.losses: list[float] = []
        self.applied: dict[str, str] = {}  # patch -> what it did
        self.held: dict[str, tuple[int, str]] = {}  # patch -> (times the program set it back, first line)
        self.errors: list[str] = []
        self.stopped: str | None = None
        self.top: Any = None
        self.top_name = ""
        self.last_output: Any = None
        self._written = False
        self._depth = 0
        self._in_top = False
        self._target: Callable[..., Any] | None = None
        self._autocast: str | None = None
        self._channels_last = False

    # -- steps ------------------------------------------------------------------------------
    def step_mark(self, source: str, t: int) -> None:
        """A step mark of the agent: timed, then the budgets are checked."""
        self.marks.setdefault(source, []).append(t)
        if self.stopped is not None:
            return
        best = max(self.marks, key=lambda s: _RANK.get(s, -1))
        count = len(self.marks[best])
        if self.window is None or self.window["source"] != best:
            if count == self.warmup + 1 or (self.window is not None and count > self.warmup):
                self.window = {"source": best, "first": count, "start_ns": _drained()}
        if self.steps and count >= self.steps:
            self.stop("steps")
        elif self.time_budget_ns and time.monotonic_ns() - self.began >= self.time_budget_ns:
            self.stop("time")

    def stop(self, reason: str) -> None:
        """End the program at a budget: close the timed window, write the results, then exit as the
        program would."""
        self.stopped = reason
        w = self.window
        if w is not None:
            w["end_ns"] = _drained()
            w["steps"] = len(self.marks.get(w["source"], [])) - w["first"]
        self.write()
        raise SystemExit(0)

    # -- results ----------------------------------------------------------------------------
    def write(self) -> None:
        """Write what the run saw to ``out`` (once)."""
        if self._written:
            return
        self._written = True
        data = {"marks": self.marks, "window": self.window, "losses": self.losses, "applied": self.applied,
                "errors": self.errors,
                "stopped": self.stopped, "top_module": self.top_name, "output": self._output_sample(),
                "dynamo": _dynamo_counters()}
        tmp = self.out + ".part"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        os.replace(tmp, self.out)

    def _output_sample(self) -> list[dict[str, Any]] | None:
        out = self.last_output
        if out is None:
            return None
        try:
            return [_sample(t) for t in _tensors(out)[:MAX_OUTPUT_TENSORS]]
        except Exception as exc:  # noqa: BLE001  (an output that can no longer be read: not compared)
            self.errors.append(f"the top module's output could not be read: {type(exc).__name__}: {exc}")
            return None

    def fail(self, where: str, exc: BaseException) -> None:
        """A patch failed: said on stderr and in the results; the program runs on."""
        line = f"gpuscope: the fix could not be applied ({where}): {type(exc).__name__}: {exc}"
        self.errors.append(line)
        try:
            sys.stderr.write(line + "\n")
        except (OSError, ValueError, AttributeError):
            pass

    # -- patches at the import of torch -------------------------------------------------------
    def at_torch_import(self, torch: Any) -> None:
        """Install what is switched on at import, and the wrapper that finds the top module."""
        _global_switches(self, torch)
        if "dataloader" in self.patches or "pin_memory" in self.patches:
            _patch_dataloader(self, torch)
        if self.max_losses > 0:
            _watch_losses(self, torch)
        _wrap_module_call(self, torch)

    # -- the top module -----------------------------------------------------------------------
    def first_top_call(self, torch: Any, module: Any) -> None:
        """Apply the patches of the top module at its first call."""
        self.top = module
        orig = getattr(module, "_orig_mod", None)  # the program compiled it already
        self.top_name = type(orig if orig is not None else module).__name__
        _global_switches(self, torch)  # again: the program may have set them back meanwhile
        params = next(module.parameters(), None)
        device = params.device.type if params is not None else "cpu"
        if "channels_last" in self.patches:
            convs = sum(1 for m in module.modules() if isinstance(m, torch.nn.Conv2d))
            if convs:
                module.to(memory_format=torch.channels_last)
                self._channels_last = True
                self.applied["channels_last"] = f"{self.top_name} ({convs} Conv2d) and its 4-D inputs"
            else:
                self.applied["channels_last"] = f"not applied: {self.top_name} has no Conv2d"
        for patch, mode in (("compile", None), ("compile_reduce_overhead", "reduce-overhead")):
            if patch in self.patches:
                base = orig if orig is not None else module
                self._target = torch.compile(base, mode=mode) if mode else torch.compile(base)
                again = " (recompiled: the program compiled it already)" if orig is not None else ""
                self.applied[patch] = f"{self.top_name} compiled{again}"
        if "bf16_autocast" in self.patches:
            self._autocast = device
            self.applied["bf16_autocast"] = f"{self.top_name}'s forward under autocast({device}, bfloat16)"

    def call_top(self, torch: Any, inner: Callable[..., Any], module: Any, args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> Any:
        """One call of the top module, with its patches."""
        if self._channels_last:
            args = tuple(a.contiguous(memory_format=torch.channels_last)
                         if isinstance(a, torch.Tensor) and a.dim() == 4 and a.is_floating_point() else a
                         for a in args)
        self._in_top = True
        try:
            target = self._target
            autocast = (torch.autocast(self._autocast, dtype=torch.bfloat16) if self._autocast is not None
                        else contextlib.nullcontext())
            with autocast:  # never the truth of target: a compiled wrapper's is len() of the model, which most lack
                out = target(*args, **kwargs) if target is not None else inner(module, *args, **kwargs)
        finally:
            self._in_top = False
        self.last_output = out
        return out


def _drained() -> int:
    """Wait for the device's queued work (where the program has started CUDA), then read the clock."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_initialized():
            torch.cuda.synchronize()
    except Exception:  # noqa: BLE001  (a broken device shows in the program's own next call)
        pass
    return time.monotonic_ns()


_RANK = {"module": 0, "torch": 1, "gpuscope": 2}  # what counts steps, worst first (as the capture window)


def _global_switches(trial: Trial, torch: Any) -> None:
    if "tf32" in trial.patches:
        torch.set_float32_matmul_precision("high")
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        trial.applied.setdefault("tf32", "float32 matmul precision 'high', cuDNN TF32 on")
        _hold(trial, torch, "tf32", {"_set_cublas_allow_tf32": lambda v: True, "_set_cudnn_allow_tf32": lambda v: True,
                                     "_set_float32_matmul_precision": lambda v: "high" if v == "highest" else v,
                                     "_set_fp32_precision_setter": _tf32_precision})
    if "cudnn_benchmark" in trial.patches:
        torch.backends.cudnn.benchmark = True
        trial.applied.setdefault("cudnn_benchmark", "cudnn.benchmark = True")
        _hold(trial, torch, "cudnn_benchmark", {"_set_cudnn_benchmark": lambda v: True})


def _tf32_precision(*args: Any) -> Any:
    """``_set_fp32_precision_setter(backend, op, precision)`` with "ieee" held at "tf32" for the CUDA
    backends (the CPU's are left as the program sets them)."""
    if len(args) == 3 and args[0] == "cuda" and args[2] == "ieee":
        return (*args[:-1], "tf32")
    return args


def _hold(trial: Trial, torch: Any, patch: str, setters: dict[str, Callable[..., Any]]) -> None:
    """Keep a switched-on setting on: each of torch's C setters named (what ``torch.backends`` and
    ``torch.set_float32_matmul_precision`` call) is wrapped to turn the value the program asks for
    into the fix's. A program that sets the switch back (``allow_tf32 = False`` in its step, say) is
    said in the results, with the line that did it the first time, so the measured gain is the fix's."""
    C = torch._C
    for name, held in setters.items():
        original = getattr(C, name, None)
        if original is None or getattr(original, "_gpuscope_held", False):
            continue

        def setter(*args: Any, _original: Callable[..., Any] = original, _held: Callable[..., Any] = held,
                   _name: str = name) -> Any:
            if _name == "_set_fp32_precision_setter":
                wanted = _held(*args)
            else:
                wanted = (_held(args[0]), *args[1:]) if args else args
            if tuple(wanted) != tuple(args):
                _note_held(trial, patch)
            return _original(*wanted)

        setter._gpuscope_held = True  # type: ignore[attr-defined]
        setattr(C, name, setter)
        # torch.backends.cudnn's switches are descriptors that kept the C setter itself
        backends = getattr(getattr(torch, "backends", None), "cudnn", None)
        for prop in vars(type(backends)).values() if backends is not None else ():
            if getattr(prop, "setter", None) is original:
                prop.setter = setter


def _note_held(trial: Trial, patch: str) -> None:
    """Count a program's attempt to turn ``patch``'s switch back, and name its first line."""
    count = trial.held.get(patch, (0, ""))
    where = count[1] or _program_line()
    trial.held[patch] = (count[0] + 1, where)
    base = trial.applied.get(patch, patch).split("; held on", 1)[0]
    trial.applied[patch] = (f"{base}; held on: the program switched it back {count[0] + 1} time(s)"
                            + (f", first at {where}" if where else ""))


def _program_line() -> str:
    """The innermost frame of the program's own code (not torch's, not gpuscope's), as file:line."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if f"{os.sep}torch{os.sep}" not in name and f"{os.sep}gpuscope{os.sep}" not in name:
            return f"{os.path.basename(name)}:{frame.f_lineno}"
        frame = frame.f_back
    return ""


def _patch_dataloader(trial: Trial, torch: Any) -> None:
    """Change the defaults of every DataLoader the program makes (subclasses included)."""
    import inspect

    loader = torch.utils.data.DataLoader
    original = loader.__init__
    signature = inspect.signature(original)
    iterable = torch.utils.data.IterableDataset
    gpu = bool(torch.cuda.is_available())
    made: list[str] = []

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError:  # the program's own mistake: let DataLoader say it
            return original(self, *args, **kwargs)
        a = bound.arguments
        said = []
        added = False
        if "dataloader" in trial.patches:
            if isinstance(a.get("dataset"), iterable):
                said.append("workers not added: an IterableDataset would be read once per worker")
            elif not a.get("num_workers"):
                a["num_workers"] = int(trial.patches["dataloader"].get("num_workers", 2))
                said.append(f"num_workers={a['num_workers']}")
                added = True
            if a.get("num_workers"):
                if not a.get("persistent_workers"):
                    a["persistent_workers"] = True
                    said.append("persistent_workers=True")
                if a.get("prefetch_factor") is None:
                    a["prefetch_factor"] = int(trial.patches["dataloader"].get("prefetch_factor", 2))
                    said.append(f"prefetch_factor={a['prefetch_factor']}")
                if added:
                    said.extend(_fit_threads(torch, int(a["num_workers"])))
        if (gpu or "pin_memory" in trial.patches) and not a.get("pin_memory"):
            a["pin_memory"] = True
            said.append("pin_memory=True")
        made.append(", ".join(said) or "as it was")
        for patch in ("dataloader", "pin_memory"):
            if patch in trial.patches:
                trial.applied[patch] = f"{len(made)} DataLoader(s): " + "; ".join(sorted(set(made)))
        original(*bound.args, **bound.kwargs)

    __init__.__wrapped__ = original  # type: ignore[attr-defined]
    loader.__init__ = __init__


def _cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _fit_threads(torch: Any, workers: int) -> list[str]:
    """Cut PyTorch's intra-op threads to the cores the ``workers`` leave the loop (at least one), as
    the finding's fix says; return what was done.

    Without it the loop's threads and the workers outnumber the cores: a parallel region waits
    for a thread that another process holds off its core, and its threads spin meanwhile; on a
    busy 2-core machine that made a 10 ms step take 90 ms of CPU time, and the workers measured
    slower than the program as written.
    """
    cores, threads = _cores(), int(torch.get_num_threads())
    if workers + threads <= cores:
        return []
    fit = max(1, cores - workers)
    if fit >= threads:
        return []
    torch.set_num_threads(fit)
    return [f"torch.set_num_threads({fit}) (was {threads}; {cores} cores)"]


def _watch_losses(trial: Trial, torch: Any) -> None:
    """Keep the value of the first scalar tensors whose ``backward`` is called (the losses)."""
    original = torch.Tensor.backward

    def backward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self.numel() == 1 and len(trial.losses) < trial.max_losses:
            trial.losses.append(float(self.detach().float().item()))
            if len(trial.losses) >= trial.max_losses:
                torch.Tensor.backward = original
        return original(self, *args, **kwargs)

    torch.Tensor.backward = backward


def _wrap_module_call(trial: Trial, torch: Any) -> None:
    """Wrap ``nn.Module.__call__`` to find the top module, and route its calls through the patches."""
    module_cls = torch.nn.Module
    inner = module_cls.__call__
    is_compiling = torch.compiler.is_compiling
    main = threading.main_thread().ident
    get_ident = threading.get_ident

    def __call__(module: Any, *args: Any, **kwargs: Any) -> Any:
        if is_compiling():  # first: torch.compile traces this frame, and what it reads here becomes a guard
            return inner(module, *args, **kwargs)
        top = trial.top
        if top is not None:
            if module is top and not trial._in_top:
                return trial.call_top(torch, inner, module, args, kwargs)
            return inner(module, *args, **kwargs)
        if trial._depth or get_ident() != main or next(module.parameters(), None) is None:
            trial._depth += get_ident() == main
            try:
                return inner(module, *args, **kwargs)
            finally:
                trial._depth -= get_ident() == main
        try:
            trial.first_top_call(torch, module)
        except Exception as exc:  # noqa: BLE001
            trial.fail("at the model's first call", exc)
            trial.top = module
            return inner(module, *args, **kwargs)
        return trial.call_top(torch, inner, module, args, kwargs)

    __call__.__wrapped__ = inner  # type: ignore[attr-defined]
    module_cls.__call__ = __call__


def _tensors(value: Any) -> list[Any]:
    """The tensors of a module's output: a tensor, or those in its tuples, lists and dicts."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        items = list(value.values())
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        return []
    out: list[Any] = []
    for item in items:
        out.extend(_tensors(item))
    return out


def _sample(t: Any) -> dict[str, Any]:
    """The dtype, shape and up to :data:`OUTPUT_SAMPLE` evenly spaced elements of a tensor."""
    import torch

    flat = t.detach().reshape(-1)
    n = flat.numel()
    if n > OUTPUT_SAMPLE:
        flat = flat[torch.linspace(0, n - 1, OUTPUT_SAMPLE, device=flat.device).long()]
    return {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
            "values": flat.double().cpu().tolist()}


def _dynamo_counters() -> dict[str, int] | None:
    """Dynamo's counters (frames compiled, graphs, graph breaks), or None where it was not loaded."""
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None)
    if not counters:
        return None
    return {"frames": int(counters.get("frames", {}).get("total", 0)),
            "frames_compiled": int(counters.get("frames", {}).get("ok", 0)),
            "unique_graphs": int(counters.get("stats", {}).get("unique_graphs", 0)),
            "graph_breaks": int(sum(counters.get("graph_break", {}).values()))}


def start_from_env() -> Trial | None:
    """Start the tried run's patches if ``GPUSCOPE_TRY`` asks for them (after the agent); return it."""
    global _trial
    text = os.environ.get(TRY_ENV)
    if not text or _trial is not None:
        return _trial
    os.environ.pop(TRY_ENV, None)  # the program's own child processes run as they are
    trial = Trial(json.loads(text))
    _trial = trial
    from .process import agent as agent_mod
    from .python import imports

    agent = agent_mod.current()
    ranges = agent.ranges if agent is not None else None
    if ranges is not None:
        before = ranges.on_step

        def on_step(source: str, t: int) -> None:
            if before is not None:
                before(source, t)
            trial.step_mark(source, t)

        ranges.on_step = on_step
    else:
        trial.errors.append("no step marks: the profiling agent did not start")
    imports.when_imported({"torch": [trial.at_torch_import]}, lambda name, exc: trial.fail(f"at import of {name}", exc))
    atexit.register(trial.write)
    return trial
