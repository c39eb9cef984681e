"""PyTorch operators with their shapes: every ATen operator call as a ``torch_op`` row.

A ``TorchDispatchMode`` is pushed when the program imports torch, on the importing thread and,
through ``threading.setprofile``, on every thread the program starts afterwards. Autograd's worker
threads run the backward pass with the dispatch state of the thread that called ``backward()``,
so backward operators are recorded too. The mode sees an operator where autograd hands it to the
backend: composite operators appear as the operators they decompose into (``linear`` as ``t`` and
``addmm``), and the operators a kernel calls internally are not seen (the mode is off while one of
its operators runs), so the rows of one thread never nest. Inside ``torch.compile`` the mode is off
while compiling and on for the compiled code: a graph run by the eager backend shows its operators,
an Inductor graph only the library calls it makes (``mm.out``); fused kernels are not operators.

Threads that were running when torch was imported (other than the importing one) are not covered.
The autograd sequence number of a backward call is that of the node being run; a forward call has
the number of the node autograd created for it, seen as the thread's sequence counter having moved
since its previous call.

The call itself is bracketed by two clock reads; the shapes, dtypes and scalar arguments are read
before it, as Python objects, and turned into JSON when the agent takes the rows (once per distinct
signature). Nothing here may raise into the program: a failure is counted, said once, and the
operator runs as usual.

Outside a capture window the mode is taken off the main thread's stack, so that its operators cost
what they cost without gpuscope, and put back when collection resumes (dispatch_stack.py says how
and when); other threads keep it and pass calls through. With ``--trace torch-shapes`` operators
are recorded only in a few sample windows (op_sample.py); once they are over every thread takes the
mode off its own stack.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Callable

from . import hook_cost
from .dispatch_stack import InferenceGuards, MainThreadMode, SafePoint, dynamo_skips, leave_on_next_event, place
from .groups import group_info
from .op_sample import FINISHED, RECORDING, RESTING, WAITING, Emit, OpSample, SamplePolicy, policy_from_env
from .op_signature import GROUP, SCALAR, TENSOR_LIST, UNKNOWN, Plan, SignatureText

if TYPE_CHECKING:
    from ..collectors import Context

# start_ns, end_ns, tid, name, seq, shapes, dtypes, out_shapes, scalars: the torch_op columns (name
# not yet interned, pid left out)
Row = tuple[Any, ...]

_NO_NODE = (1 << 64) - 1  # the sequence number of nodes that have none (AccumulateGrad)
_MAX_SIGNATURES = 200_000  # distinct signatures given ids; further ones travel with their rows
_intern_lock = threading.Lock()


class TorchOps:
    """Records ATen operator calls; the agent takes the finished rows at each flush."""

    def __init__(self, clock_offset_ns: int, diag: Callable[[str, str], None], policy: SamplePolicy | None = None,
                 emit_window: Emit | None = None, anchor: Callable[[], None] | None = None) -> None:
        """Record every operator, or with a ``policy`` only in sample windows (op_sample.py), each of which
        ``emit_window`` is given as a ``torch_op_window`` row. ``anchor`` (a launch anchor, launch_anchors.py)
        is called right before each time read of a sampled operator and of a window's ends, so that the GPU
        work an operator launched is placed inside it even where it ran much later."""
        self.offset = clock_offset_ns
        self.diag = diag
        self.anchor = anchor if policy is not None else None  # not for every operator: ~3 µs each on a GPU host
        self._on = True  # read by the handler: record this call; set through ``recording`` and the sample
        self._capture = True  # inside a capture window (``recording``)
        self._waiting = False  # passing calls through, counted, until a sample window opens
        self._gone = False  # sampling rests or is over: threads take the mode off their stacks
        self.counts = {"ops": 0, "failed": 0, "threads": 0, "signatures": 0, "uninterned": 0}
        self.mode: Any = None
        self._main: MainThreadMode | None = None  # moves the mode on and off the main thread's stack
        self._safe: SafePoint | None = None  # where a thread's stack may change (None: threads keep the mode)
        # Rows are (start, end, tid, signature, seq): integers only, so the garbage collector stops
        # looking at them, where rows holding shapes made every collection slower as they piled up.
        self._raw: deque[tuple[Any, ...]] = deque()  # appended by any thread, drained by take()
        self._plans: dict[int, Plan] = {}  # by id() of the operator (its hash is Python code)
        self._inputs: dict[tuple[Any, ...], int] = {}  # (plan, shapes, dtypes, scalars) -> id
        self._input_keys: list[tuple[Any, ...]] = []
        self._signatures: dict[tuple[Any, ...], int] = {}  # (input id, output shapes) -> id
        self._signature_keys: list[tuple[Any, ...]] = []
        self._encoded: list[tuple[str, str, str, str, str] | None] = []  # by signature id; None: failed
        self._texts = SignatureText()
        # per thread: autograd's next sequence number after its last recorded operator (None: not known)
        self._last_seq: dict[int, int | None] = {}
        self._said = False
        self._take_lock = threading.RLock()
        self._traced_process = True  # False in a forked child
        self.sample: OpSample | None = None
        if policy is not None:
            sample = OpSample(policy, self._boundary, lambda: self.counts["ops"], emit_window or (lambda *row: None))
            sample.on_change = self._apply
            self.sample = sample
            self._apply()

    @property
    def recording(self) -> bool:
        """Whether operators are recorded now (the capture window sets it, and the sample windows decide within
        it; off, the mode leaves the main thread's stack and other threads pass calls through)."""
        return self._on

    @recording.setter
    def recording(self, on: bool) -> None:
        self._capture = on
        if self.sample is not None:
            self.sample.set_capture(on and self._traced_process)
        self._apply()

    def _apply(self) -> None:
        """Set what the handler does and where the mode should be, from the capture window and the sample."""
        capture = self._capture and self._traced_process
        state = RECORDING if self.sample is None else self.sample.state
        on = capture and state == RECORDING
        if on and not self._on:  # autograd numbered nodes meanwhile: the next call can not tell its own
            for tid in list(self._last_seq):
                self._last_seq[tid] = None
        self._on = on
        self._waiting = capture and state == WAITING
        self._gone = state in (RESTING, FINISHED)
        if self._main is not None:
            self._main.want(on or self._waiting)

    def _boundary(self) -> int:
        """Return the time of a sample window's end on the session clock, an anchor made right before."""
        if self.anchor is not None:
            self.anchor()
        return time.monotonic_ns() + self.offset

    def step_mark(self, t: int) -> None:
        """A step ended at ``t`` (session clock): sample windows open and close at step marks."""
        if self.sample is not None:
            self.sample.step_mark(t)

    def end_sample(self) -> None:
        """The process ends: close an open sample window (``process end``) and plan no other."""
        if self.sample is not None:
            self.sample.finish()
            self._apply()

    # -- installation ----------------------------------------------------------------------
    def install(self, torch: Any) -> None:
        """Push the recording mode on this thread and on every thread started from now on."""
        from torch.utils import _python_dispatch as dispatch  # noqa: PLC0415

        try:
            self._safe = SafePoint(torch)  # read now, before the program could have entered a guard
        except Exception as exc:  # noqa: BLE001  (an older torch: no thread could tell where a move is safe)
            self.diag("warning", f"PyTorch operators: the recorder's dispatch mode stays on every thread's stack, "
                                 f"passing operators through outside the recorded ones: {exc!r}")
        handler = self._handler(torch)
        skip_in_dynamo = dynamo_skips(handler)

        class GpuscopeOps(dispatch.TorchDispatchMode):  # type: ignore[misc]
            supports_higher_order_operators = True

            @classmethod
            def ignore_compile_internals(cls) -> bool:
                return True  # off while torch.compile traces; compiled programs stay compiled

            if skip_in_dynamo:
                @classmethod
                def _should_skip_dynamo(cls) -> bool:
                    return False  # already skipped, without a wrapper per call

            __torch_dispatch__ = handler

        mode = GpuscopeOps()
        previous = threading.getprofile() if hasattr(threading, "getprofile") else None
        push = dispatch._push_mode

        def on_thread_start(frame: Any, event: str, arg: Any) -> None:
            sys.setprofile(previous)
            try:
                if self._traced_process and not self._gone:  # also while recording is paused: it may resume
                    push(mode)
                    self.counts["threads"] += 1
            except Exception as exc:  # noqa: BLE001
                self._fail(exc)

        threading.setprofile(on_thread_start)
        os.register_at_fork(after_in_child=lambda: self._forked(torch))
        mode.__enter__()  # where anything above failed, the program runs without the mode
        self.mode = mode
        self.counts["threads"] += 1
        guards = None
        if self._safe is not None:
            try:  # a loop inside one inference_mode guard: the mode may still leave (dispatch_stack.py)
                guards = InferenceGuards(torch._C, mode, self._fail)
                guards.install(torch.autograd.grad_mode.inference_mode, self._safe.keys)
                self._safe.guards = guards
            except Exception as exc:  # noqa: BLE001  (moves inside such a guard wait for its end)
                self._fail(exc)
        if threading.current_thread() is threading.main_thread() and self._safe is not None:
            try:
                main = MainThreadMode(torch, mode, self._fail, self._safe)
            except Exception as exc:  # noqa: BLE001  (the mode stays on the stack, passing calls through)
                self._fail(exc)
            else:
                main.want(self._on or self._waiting)
                self._main = main
                if guards is not None:
                    guards.after_exit = main.after_guard

    def _forked(self, torch: Any) -> None:
        # a forked child (DataLoader worker) is not traced: stop recording, and take the mode off
        # this thread's stack
        self._traced_process = False
        if self._main is not None:
            self._main.enabled = False  # the child's pending calls are not ours to make
        self._capture = False
        self._apply()  # not through the sample: its lock may have been held by a thread the child lacks
        self._raw.clear()
        try:
            if self._safe is not None and self._safe():
                place(torch._C, list(torch._C._TorchDispatchModeKey.__members__.values()), self.mode, False)
            elif self._safe is not None:  # forked inside a guard that the child may still end: not here
                leave_on_next_event(torch._C, self.mode, self._safe, lambda exc: None)
        except Exception:  # noqa: BLE001,S110  (the mode stays, and only passes calls through)
            pass

    # -- the hot path ----------------------------------------------------------------------
    def _handler(self, torch: Any) -> Callable[..., Any]:
        tensor_type = torch.Tensor
        plans, raw, counts, last_seq = self._plans, self._raw, self.counts, self._last_seq
        inputs, signatures = self._inputs, self._signatures
        now, native_id = time.monotonic_ns, threading.get_native_id
        main_native = threading.main_thread().native_id
        current_node = torch._C._current_autograd_node
        next_seq = torch._C._autograd._get_sequence_nr
        new_plan, new_input, new_signature, fail = self._plan, self._new_input, self._new_signature, self._fail
        sample = self.sample
        waited = sample.waited_op if sample is not None else None
        torch_c, graph_task = torch._C, getattr(torch._C, "_current_graph_task_id", lambda: -1)
        safe = self._safe
        anchor = self.anchor

        def __torch_dispatch__(mode: Any, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            # off, yet on this thread's stack: on the main thread, leave it after this call; on another one
            # whose sampling is over, at its next Python event. Waiting for a sample window: count the call.
            if not self._on and not (self._waiting and waited() and self._on):  # type: ignore[misc]
                if native_id() == main_native:
                    main = self._main
                    if main is not None:
                        main.request()
                elif self._gone and safe is not None and graph_task() == -1:
                    leave_on_next_event(torch_c, mode, safe, fail)
                return func(*args, **kwargs) if kwargs else func(*args)
            try:
                plan = plans.get(id(func)) or new_plan(func)
                shapes: list[Any] = []
                dtypes: list[Any] = []
                scalars: list[Any] = []
                kinds, names = plan.kinds, plan.names
                for i, a in enumerate(args):
                    kind = kinds[i] if i < len(kinds) else UNKNOWN
                    if isinstance(a, tensor_type):
                        shapes.append(a.shape)
                        dtypes.append(a.dtype)
                    elif a is not None and (kind == TENSOR_LIST or (kind == UNKNOWN and type(a) in (list, tuple)
                                                                    and a and isinstance(a[0], tensor_type))):
                        shapes.append(tuple(t.shape if isinstance(t, tensor_type) else None for t in a))
                        dtypes.append(tuple(t.dtype if isinstance(t, tensor_type) else None for t in a))
                    else:
                        shapes.append(None)
                        dtypes.append(None)
                        if kind == SCALAR and a is not None:
                            scalars.append((names[i], tuple(a) if type(a) is list else a))
                        elif kind == GROUP and a is not None:
                            scalars.append((names[i], group_info(a)))
                if kwargs:
                    keyword_kinds = plan.keyword_kinds
                    for name, a in kwargs.items():
                        kind = keyword_kinds.get(name, UNKNOWN)
                        if isinstance(a, tensor_type):
                            shapes.append(a.shape)
                            dtypes.append(a.dtype)
                        elif kind == TENSOR_LIST and a is not None:
                            shapes.append(tuple(t.shape if isinstance(t, tensor_type) else None for t in a))
                            dtypes.append(tuple(t.dtype if isinstance(t, tensor_type) else None for t in a))
                        elif kind == SCALAR and a is not None:
                            scalars.append((name, tuple(a) if type(a) is list else a))
                key = (plan, tuple(shapes), tuple(dtypes), tuple(scalars))
                try:
                    input_id = inputs.get(key)
                except TypeError:  # a value that can not be hashed (a list in a list): its text stands in
                    key = (plan, key[1], key[2], tuple((k, repr(v)) for k, v in scalars))
                    input_id = inputs.get(key)
                if input_id is None:
                    input_id = new_input(key)
                tid = native_id()
                node = current_node()
                if node is not None:  # a backward operator: the node it runs for
                    seq = node._sequence_nr()
                    if seq == _NO_NODE:
                        seq = None
                else:  # autograd numbered a node for this operator if the counter moved
                    peek = next_seq()
                    last = last_seq.get(tid, 0)  # a new thread's numbers start at 0
                    seq = peek - 1 if last is not None and peek > last else None
            except Exception as exc:  # noqa: BLE001
                fail(exc)
                return func(*args, **kwargs) if kwargs else func(*args)
            if anchor is not None:  # the GPU work of the call falls between these two anchors
                anchor()
            start = now()
            out = func(*args, **kwargs) if kwargs else func(*args)
            if anchor is not None:
                anchor()
            end = now()
            try:
                if isinstance(out, tensor_type):
                    outs: tuple[Any, ...] = (out.shape,)
                elif type(out) in (tuple, list):
                    outs = tuple(o.shape if isinstance(o, tensor_type) else
                                 (tuple(t.shape for t in o if isinstance(t, tensor_type))
                                  if type(o) in (tuple, list) else None) for o in out)
                else:
                    outs = () if out is None else (None,)
                if node is None:
                    last_seq[tid] = next_seq()
                out_key = (input_id, outs)
                signature = signatures.get(out_key)
                if signature is None:
                    signature = new_signature(out_key)
                raw.append((start, end, tid, signature, seq))
                counts["ops"] += 1
                if sample is not None and counts["ops"] >= sample.limit:
                    sample.at_limit()
            except Exception as exc:  # noqa: BLE001
                fail(exc)
            return out

        return __torch_dispatch__

    def _plan(self, func: Any) -> Plan:
        plan = self._plans[id(func)] = Plan(func)
        return plan

    def _new_input(self, key: tuple[Any, ...]) -> Any:
        """The id of a new input signature; past the limit, the signature itself (not kept)."""
        if len(self._input_keys) >= _MAX_SIGNATURES:
            return key
        with _intern_lock:
            found = self._inputs.get(key)
            if found is None:
                found = self._inputs[key] = len(self._input_keys)
                self._input_keys.append(key)
        return found

    def _new_signature(self, key: tuple[Any, ...]) -> Any:
        if len(self._signature_keys) >= _MAX_SIGNATURES or type(key[0]) is not int:
            self.counts["uninterned"] += 1
            return key
        new = False
        with _intern_lock:
            found = self._signatures.get(key)
            if found is None:
                found = self._signatures[key] = len(self._signature_keys)
                self._signature_keys.append(key)
                self.counts["signatures"] += 1
                new = True
        if new and self.sample is not None:
            self.sample.new_signature()
        return found

    def _fail(self, exc: BaseException) -> None:
        self.counts["failed"] += 1
        self._say(exc)

    def _say(self, exc: BaseException) -> None:
        if not self._said:
            self._said = True
            self.diag("warning", f"PyTorch operators: a call was not recorded after an error in gpuscope: {exc!r}")

    # -- delivery ----------------------------------------------------------------------------
    def set_collecting(self, on: bool) -> None:
        """Record operators (``on``), or take the dispatch mode off the main thread's stack."""
        self.recording = on

    def take_rows(self) -> dict[str, list[Row]]:
        """Return the operators recorded since the last call, as ``torch_op`` rows."""
        rows = self.take()
        return {"torch_op": rows} if rows else {}

    def take(self) -> list[Row]:
        """Return the rows recorded since the last call, times on the session clock."""
        raw, encoded, off = self._raw, self._encoded, self.offset
        rows = []
        with self._take_lock:  # the flush thread, and any thread that reports an error
            for _ in range(len(raw)):
                start, end, tid, signature, seq = raw.popleft()
                if type(signature) is int:
                    while len(encoded) <= signature:
                        encoded.append(self._text(self._signature_keys[len(encoded)]))
                    text = encoded[signature]
                else:
                    text = self._text(signature)
                if text is None:
                    self.counts["failed"] += 1
                    continue
                rows.append((start + off, end + off, tid, text[0], seq, *text[1:]))
        return rows

    def _text(self, signature: tuple[Any, ...]) -> tuple[str, str, str, str, str] | None:
        try:
            return self._encode(signature)
        except Exception as exc:  # noqa: BLE001  (its rows are counted as failed)
            self._say(exc)
            return None

    def _encode(self, signature: tuple[Any, ...]) -> tuple[str, str, str, str, str]:
        """Return name, shapes, dtypes, out_shapes and scalars (JSON) of a signature."""
        input_id, outs = signature
        plan, shapes, dtypes, scalars = self._input_keys[input_id] if type(input_id) is int else input_id
        return self._texts.encode(plan, shapes, dtypes, scalars, outs)

    def ending(self) -> None:
        """The process ends (before the capture window's last close): :meth:`end_sample`."""
        self.end_sample()

    def shutdown(self, ctx: Context) -> None:
        """Stop, and add the ``collector`` row with the per-operator costs measured now (hook_cost.py)
        in its detail, for the overhead estimate."""
        row = self.stop()
        try:
            info = json.loads(row[5])
            if info.get("ops") or info.get("waited_ops"):
                recorded, passed = hook_cost.operator_costs_ns(sys.modules["torch"], TorchOps)
                info.update(ns_per_op_recorded=recorded, ns_per_op_passed=passed)
            row = (*row[:5], json.dumps(info, sort_keys=True))
        except Exception as exc:  # noqa: BLE001  (at exit; the overhead line says it was not measured)
            ctx.diag("info", f"the cost of recording PyTorch operators was not measured: {type(exc).__name__}: {exc}")
        ctx.add_row("collector", row)

    def stop(self) -> tuple[Any, ...]:
        """Stop recording; return the ``collector`` row (name, records, buffers, callback_ns,
        failed_records, detail): ``torch-ops``, or ``torch-shapes`` with what the sample did."""
        self.end_sample()
        self.recording = False
        info: dict[str, Any] = dict(self.counts)
        if self._main is not None:
            info["mode_moves"] = self._main.moves
            info["mode_waits"] = self._main.waits
        if self.sample is not None:
            info.update(self.sample.summary())
        detail = json.dumps(info, sort_keys=True)
        name = "torch-ops" if self.sample is None else "torch-shapes"
        return (name, self.counts["ops"], 0, 0, self.counts["failed"], detail)


def start(ctx: Context, torch: Any = None) -> TorchOps:
    """Record the operators of the imported ``torch``: every one (``torch-ops``), or those of sample
    windows (``torch-shapes``; op_sample.py); return the recorder."""
    policy = None if "torch-ops" in ctx.trace else policy_from_env(ctx.diag)  # every operator wins
    ops = TorchOps(ctx.clock_offset_ns, ctx.diag, policy, lambda *row: ctx.add_row("torch_op_window", row),
                   ctx.collector("ranges").anchor)
    ops.install(torch)
    return ops
