"""What one range and one PyTorch module call cost the program, measured in the process at its end.

Timing each call of the range recorder or of the PyTorch hooks would add two clock reads (about
0.1 µs each on the CPU machine, bench/RESULTS.md) to calls that cost 0.3 to 16 µs, so the cost is
estimated instead: the number of calls (from the report) times a per-call cost measured here, once,
when the process ends. The measurements:

- a range: push and pop on a scratch recorder;
- a launch anchor (launch_anchors.py): the anchor call itself, CUPTI's callback included, so it is
  measured before gpuscope leaves CUPTI (the anchors made for it are not kept);
- a module call: the hooked against the plain ``nn.Module.__call__`` of a small linear layer on the
  CPU, forward only (no gradient; on the path the process's hooks take, logged or full) and forward
  with backward (which adds the backward range's tensor hooks), on scratch hooks that record into a
  scratch recorder, whose logged ranges are paired as the flush thread pairs them (that thread's
  work is the program's CPU time too);
- a PyTorch operator (``torch-ops``, ``torch-shapes``): small CPU operators under a scratch
  recorder's dispatch mode, recording and passing through, against none.

Each is the fastest of a few rounds, so a busy machine inflates it little. On a GPU the hooks were
measured to cost more than this (autograd's thread must take the GIL for each tensor hook; see
bench/RESULTS.md), so the estimate is a lower bound there. Nothing here may raise into the program.
"""

from __future__ import annotations

import time
from typing import Any, Callable

ROUNDS = 3
RANGE_CALLS = 300
MODULE_CALLS = 30
ANCHOR_CALLS = 30
OPERATOR_CALLS = 200


def _fastest(run: Callable[[], None], calls: int, rounds: int = ROUNDS) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        run()
        best = min(best, time.perf_counter_ns() - t0)
    return best / calls


def range_cost_ns(r: Any) -> int:
    """Return the cost of one range (push and pop) on ``r``, a scratch range recorder, in ns."""

    def run() -> None:
        for _ in range(RANGE_CALLS):
            r.push("calibration")
            r.pop()

    cost = _fastest(run, RANGE_CALLS)
    r.take()
    return int(cost)


def module_call_costs_ns(torch: Any, hooks: Any) -> tuple[int, int]:
    """Return what the PyTorch hooks add to one module call, in ns: forward only (on the path ``hooks``
    take), and forward followed by its backward (backward ranges on). ``hooks``: scratch hooks
    (torch_hooks.TorchHooks) on a scratch recorder."""
    hooks._torch = torch
    # as in a program whose steps are marked: the scratch layer's every call is an outermost one, and in
    # a program that marks no steps each would end with an iteration mark, which such a program makes
    # once per iteration, not once per module call (a GPT-2 decoding step calls about 85 modules)
    hooks.r.step_marked = True
    module_cls = torch.nn.Module
    plain = getattr(module_cls.__call__, "__wrapped__", module_cls.__call__)
    hooked = hooks._module_call(plain)
    backward = getattr(torch.autograd.backward, "__wrapped__", torch.autograd.backward)
    layer = torch.nn.utils.skip_init(torch.nn.Linear, 8, 8)  # no initialisation: no random numbers
    with torch.no_grad():
        layer.weight.fill_(0.01)
        layer.bias.zero_()

    def forward(call: Callable[..., Any]) -> Callable[[], None]:
        def run() -> None:
            x = torch.ones(4, 8)
            with torch.no_grad():
                for _ in range(MODULE_CALLS):
                    call(layer, x)
            hooks.r.take_rows()  # hands the logged ranges over, as the flush thread does
        return run

    def with_backward(call: Callable[..., Any]) -> Callable[[], None]:
        def run() -> None:
            with torch.enable_grad():
                for _ in range(MODULE_CALLS):
                    # a fresh input each time, as in training: hooks stay on the tensors they were put on
                    backward(call(layer, torch.ones(4, 8, requires_grad=True)).sum())
        return run

    fwd = _fastest(forward(hooked), MODULE_CALLS) - _fastest(forward(plain), MODULE_CALLS)
    hooks.backward = True
    hooks._refresh()
    both = _fastest(with_backward(hooked), MODULE_CALLS) - _fastest(with_backward(plain), MODULE_CALLS)
    hooks.r.take_rows()
    return max(int(fwd), 0), max(int(both), 0)


def anchor_cost_ns(anchor: Callable[[], None]) -> int:
    """Return the cost of one launch anchor, in ns."""

    def run() -> None:
        for _ in range(ANCHOR_CALLS):
            anchor()

    return int(_fastest(run, ANCHOR_CALLS))


def operator_costs_ns(torch: Any, recorder: Callable[..., Any], ops: int = OPERATOR_CALLS) -> tuple[int, int]:
    """Return what the operator recorder adds to one PyTorch operator, in ns: recording it (the
    ``torch-ops`` path), and passing it through (the mode on the stack, not recording: operators
    before and between ``torch-shapes`` sample windows). Measured on small CPU operators (an
    addition, a product, a matrix product, a sum) under the dispatch mode of a scratch ``recorder``
    (the class torch_ops.TorchOps)."""
    from torch.utils._python_dispatch import TorchDispatchMode  # noqa: PLC0415

    from .dispatch_stack import dynamo_skips  # noqa: PLC0415

    def mode(recording: bool) -> Any:
        scratch = recorder(0, lambda level, message: None)
        scratch._on = recording
        scratch._waiting = False
        handler = scratch._handler(torch)
        # as the recorder's own mode (torch_ops.py): TorchDynamo skips the handler, and torch adds no
        # per-call wrapper, whose first call imports torch._dynamo (which fails at exit, once PyTorch
        # has removed its prims library)
        skip = dynamo_skips(handler)

        class Calibration(TorchDispatchMode):  # type: ignore[misc]
            if skip:
                @classmethod
                def _should_skip_dynamo(cls) -> bool:
                    return False

            __torch_dispatch__ = handler

        return Calibration()

    x = torch.ones(8, 8)

    def under(m: Any) -> Callable[[], None]:
        def run() -> None:
            with torch.no_grad():
                if m is None:
                    for _ in range(ops // 4):
                        torch.mm(torch.add(x, x).mul(0.5), x).sum()
                else:
                    with m:
                        for _ in range(ops // 4):
                            torch.mm(torch.add(x, x).mul(0.5), x).sum()
        return run

    calls = ops // 4 * 4
    plain = _fastest(under(None), calls)
    recorded = _fastest(under(mode(True)), calls) - plain
    passed = _fastest(under(mode(False)), calls) - plain
    return max(int(recorded), 0), max(int(passed), 0)


def costs(ranges: Callable[[], Any], torch_hooks: Any, diag: Callable[[str, str], None]) -> dict[str, int]:
    """Return the measured per-call costs for the ``ranges`` collector row (empty where not measured).
    ``ranges`` makes a scratch range recorder; ``torch_hooks`` are the process's PyTorch hooks, or None."""
    out: dict[str, int] = {}
    try:
        out["ns_per_range"] = range_cost_ns(ranges())
        torch = getattr(torch_hooks, "_torch", None)
        if torch is not None and not torch_hooks._disabled:
            scratch = type(torch_hooks)(ranges(), lambda level, message: None, backward=torch_hooks.backward)
            scratch.force_full = not torch_hooks.logged  # the path the process's module calls took
            scratch._refresh()
            fwd, both = module_call_costs_ns(torch, scratch)
            out["ns_per_module_call"] = fwd
            out["ns_per_module_call_with_backward"] = both
    except Exception as exc:  # noqa: BLE001  (at exit; the overhead line says it was not measured)
        diag("info", f"the cost of gpuscope's ranges was not measured: {type(exc).__name__}: {exc}")
    return out
