"""Module backward ranges (``--trace torch-backward``), for :class:`.torch_hooks.TorchHooks`.

A module's backward starts when the gradient of its output is ready (a tensor hook on the output)
and ends when the gradients of its inputs are (tensor hooks on the inputs that require grad). A
module whose inputs need no gradient (the first layer, an embedding) ends it when its own weights'
gradients have been accumulated (a hook on those parameters, registered once); a container of such
modules (the root) ends it when the backward pass returns. The hooks run inside autograd: nothing
here may raise.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:
    from .ranges import RangeRecorder

SOURCE = "torch"


def _tensors(obj: Any, depth: int = 0) -> Iterator[Any]:
    """Yield the tensors in a module's inputs or outputs (tuples, lists, dicts, one level deep)."""
    if hasattr(obj, "requires_grad") and hasattr(obj, "register_hook"):
        yield obj
    elif depth < 2 and isinstance(obj, (tuple, list)):
        for item in obj:
            yield from _tensors(item, depth + 1)
    elif depth < 2 and isinstance(obj, dict):
        for item in obj.values():
            yield from _tensors(item, depth + 1)


class BackwardRanges:
    """The backward half of the PyTorch hooks: arming a module's backward range at its forward call,
    ending the ranges left open with the backward pass, and saying which modules needed that."""

    r: RangeRecorder
    counts: dict[str, int]
    _torch: Any
    _open_backward: dict[int, str]
    _closed_at_pass_end: dict[str, int]
    _waiting: dict[Any, list[Callable[[Any], None]]]
    _accumulate_hooked: set[int]

    def _ranged(self, func: Callable[..., Any], category: str,
                name: Callable[[tuple[Any, ...]], str]) -> Callable[..., Any]:
        raise NotImplementedError  # TorchHooks makes the range wrapper

    def _arm_backward(self, module: Any, name: str, args: Any, output: Any) -> None:
        """Hook the module's output and input gradients to bracket its backward."""
        tensor = self._torch.Tensor
        if type(output) is tensor:  # the usual case, without the generic walk
            outs = [output] if output.requires_grad else []
        else:
            outs = [t for t in _tensors(output) if t.requires_grad]
        if not outs:
            return
        if all(type(a) is tensor for a in args):
            ins = [a for a in args if a.requires_grad]
        else:
            ins = [t for t in _tensors(args) if t.requires_grad]
        params = [] if ins else self._own_grad_params(module)
        state = {"rid": 0, "inputs_left": len(ins) or len(params)}
        r, open_backward = self.r, self._open_backward

        # Modules that return the same tensor (a container and its last child) must start their
        # backward at the same instant, or the one whose hook runs last would look innermost.
        ready = getattr(outs[0], "_gpuscope_grad_ready", None)
        if ready is None:
            ready = [None]
            for t in outs:
                t._gpuscope_grad_ready = ready

        # These run inside autograd: they must not raise, whatever happens.
        def output_ready(grad: Any) -> None:
            try:
                if state["rid"] == 0:
                    if ready[0] is None:
                        ready[0] = time.monotonic_ns()
                    rid = r.start(name, "", SOURCE, "backward", at_ns=ready[0])
                    state["rid"] = rid
                    open_backward[rid] = name
            except Exception:  # noqa: BLE001,S110
                pass

        def input_ready(grad: Any) -> None:
            try:
                state["inputs_left"] -= 1
                rid = state["rid"]
                if state["inputs_left"] == 0 and rid > 0 and open_backward.pop(rid, None) is not None:
                    r.end(rid)
            except Exception:  # noqa: BLE001,S110
                pass

        for t in outs:
            t.register_hook(output_ready)
        for t in ins:
            t.register_hook(input_ready)
        for p in params:  # no input needs a gradient: the module's own weights say when it is done
            self._waiting.setdefault(p, []).append(input_ready)

    def _own_grad_params(self, module: Any) -> list[Any]:
        """Return the module's own trainable parameters, each hooked (once) to say when its
        gradient has been accumulated; [] where the hook is not available or not needed."""
        params = [p for p in module._parameters.values() if p is not None and p.requires_grad]
        for p in params:
            if id(p) not in self._accumulate_hooked:
                if not hasattr(p, "register_post_accumulate_grad_hook"):
                    return []
                p.register_post_accumulate_grad_hook(self._accumulated)
                self._accumulate_hooked.add(id(p))
        return params

    def _accumulated(self, param: Any) -> None:
        try:
            for done in self._waiting.pop(param, ()):
                done(None)
        except Exception:  # noqa: BLE001,S110  (inside autograd: never raise)
            pass

    def _backward_pass(self, func: Callable[..., Any], name: str) -> Callable[..., Any]:
        """Wrap torch.autograd.backward/grad: a range, and the end of module backward ranges left open."""
        ranged = self._ranged(func, "autograd", lambda a: name)
        open_backward = self._open_backward

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return ranged(*args, **kwargs)
            finally:
                for rid in list(open_backward):
                    module = open_backward.pop(rid, None)
                    if module is not None:
                        self.r.end(rid)
                        self.counts["backward_closed_at_pass_end"] += 1
                        self._closed_at_pass_end[module] = self._closed_at_pass_end.get(module, 0) + 1
                self._waiting.clear()

        wrapper.__wrapped__ = func  # type: ignore[attr-defined]
        wrapper.__name__ = getattr(func, "__name__", name)
        wrapper.__doc__ = func.__doc__
        wrapper._gpuscope_hooks = self  # type: ignore[attr-defined]
        return wrapper

    def closed_at_pass_end(self) -> str | None:
        """Return one line on the module backward ranges that PyTorch never ended (gpuscope ended
        them with the backward pass), naming the modules; None when there were none."""
        closed = sorted(self._closed_at_pass_end.items(), key=lambda kv: (-kv[1], kv[0]))
        if not closed:
            return None
        one = len(closed) == 1
        names = ", ".join(f"{name} ({n} time{'s' if n != 1 else ''})" for name, n in closed[:3])
        names += f" and {len(closed) - 3} more modules" if len(closed) > 3 else ""
        return (f"the backward of {names} has no end from PyTorch: no gradient flows into "
                f"{'its' if one else 'their'} inputs (integer indices, or tensors that need no gradient), so "
                f"{'its' if one else 'their'} backward "
                f"{'range was' if sum(n for _, n in closed) == 1 else 'ranges were'} ended with the backward "
                f"pass, and layer_sum's backward time for {'it' if one else 'them'} runs to that end")
