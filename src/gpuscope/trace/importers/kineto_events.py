"""The events of a Kineto trace as msgspec decodes them: typed structs with the fields the importer
reads (unknown keys skipped in C), and the same events as the JSON objects the per-event mapping
reads (:func:`as_dict`).

This module imports neither DuckDB nor pandas: it runs in the worker processes of a parallel import.
"""

from __future__ import annotations

from typing import Any, Literal, Union

import msgspec


class Args(msgspec.Struct, gc=False, frozen=True):
    """The ``args`` of an event: the keys the importer reads, typed as the bulk mapping expects."""

    correlation: Union[int, None] = None
    device: Union[int, None] = None
    stream: Union[int, None] = None
    context: Union[int, None] = None
    grid: Union[tuple[int, int, int], None] = None
    block: Union[tuple[int, int, int], None] = None
    registers: Union[int, None] = msgspec.field(default=None, name="registers per thread")
    shared_memory: Union[int, None] = msgspec.field(default=None, name="shared memory")
    bytes: Union[int, None] = None
    cbid: Union[int, None] = None
    sequence: Union[int, None] = msgspec.field(default=None, name="Sequence number")
    input_dims: msgspec.Raw = msgspec.field(default=None, name="Input Dims")
    input_dims_old: msgspec.Raw = msgspec.field(default=None, name="Input dims")
    input_type: msgspec.Raw = msgspec.field(default=None, name="Input type")
    input_types_old: msgspec.Raw = msgspec.field(default=None, name="Input types")
    concrete: msgspec.Raw = msgspec.field(default=None, name="Concrete Inputs")
    # read only by the per-event mapping of rare events
    name: Any = None
    cuda_sync_kind: Any = None
    event_id: Any = msgspec.field(default=None, name="Event ID")
    device_id: Any = msgspec.field(default=None, name="Device Id")
    device_type: Any = msgspec.field(default=None, name="Device Type")
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=None, name="Total Reserved")


_EMPTY_ARGS = Args()
_ARG_KEYS = [(f.name, f.encode_name) for f in msgspec.structs.fields(Args)]


class Event(msgspec.Struct, gc=False):
    """One trace event, with the fields the importer reads."""

    ph: Any = None
    cat: Union[str, None] = None
    name: Union[str, None] = None
    pid: Any = None  # metadata events name theirs ("Spans"); table columns take the numbers as the per-event mapping does
    tid: Any = None
    ts: Union[int, float, None] = None
    dur: Union[int, float, None] = None
    args: Union[Args, None] = _EMPTY_ARGS  # an explicit null (never written by Kineto) maps event by event


# Categories whose events are mapped (in bulk or one by one): decoded with every field the importer
# reads. python_function events are mapped only where they are nn.Module events, which need no args;
# the others are only counted.
FULL_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "cpu_op",
                   "user_annotation", "cuda_sync", "cpu_instant_event", "overhead",
                   "Kernel", "Memcpy", "Memset", "Runtime", "Operator")  # fmt: skip
COUNTED_CATEGORIES = (
    "gpu_user_annotation", "concurrent_kernel", "external_correlation", "cuda_event", "cuda_profiler_range",
    "mtia_runtime", "mtia_ccp_events", "glow_runtime", "hpu_op", "xpu_runtime", "xpu_driver", "collective_comm",
    "gpu_pm_counter", "privateuse1_runtime", "privateuse1_driver", "Trace", "ac2g", "fwdbwd", "async_cpu_to_gpu",
)  # fmt: skip
KnownCategory = Literal[FULL_CATEGORIES + ("python_function",) + COUNTED_CATEGORIES]  # type: ignore[valid-type]


class KnownEvent(Event, gc=False):
    """An event whose category is one of :data:`KnownCategory` (or none): the category is one of
    those constant strings, not a new string per event."""

    cat: Union[KnownCategory, None] = None


_TIMES = [("name", Union[str, None], None), ("pid", Any, None), ("tid", Any, None),
          ("ts", Union[int, float, None], None), ("dur", Union[int, float, None], None)]


def _tagged(cat: str, fields: list[tuple[str, Any, Any]]) -> type:
    """A struct for the events of category ``cat`` (told apart by their ``cat`` key, which is not
    a field but the class's ``cat``)."""
    return msgspec.defstruct(f"Event_{cat}", fields, tag_field="cat", tag=cat, gc=False, namespace={"cat": cat},
                             module=__name__)


def _args_of(cat: str, attrs: tuple[str, ...]) -> tuple[type, Any]:
    """A struct with the fields ``attrs`` of :class:`Args` (the args that the bulk mapping of
    ``cat`` reads), and its empty instance."""
    info = {f.name: f for f in msgspec.structs.fields(Args)}
    fields = [(a, info[a].type, msgspec.field(default=None, name=info[a].encode_name)) for a in attrs]
    cls = msgspec.defstruct(f"Args_{cat}", fields, gc=False, frozen=True, module=__name__)
    return cls, cls()


_LAUNCH = ("correlation", "device", "stream", "context")
_ARGS_OF = {
    "kernel": _args_of("kernel", (*_LAUNCH, "grid", "block", "registers", "shared_memory")),
    "gpu_memcpy": _args_of("gpu_memcpy", (*_LAUNCH, "bytes")),
    "gpu_memset": _args_of("gpu_memset", (*_LAUNCH, "bytes")),
    "cuda_runtime": _args_of("cuda_runtime", ("correlation", "cbid")),
    "cuda_driver": _args_of("cuda_driver", ("correlation", "cbid")),
    "cpu_op": _args_of("cpu_op", ("sequence", "input_dims", "input_dims_old", "input_type", "input_types_old",
                                  "concrete")),
}  # fmt: skip
_EMPTIES = frozenset({id(_EMPTY_ARGS)} | {id(empty) for _, empty in _ARGS_OF.values()})
_ARG_KEYS_OF: dict[type, list[tuple[str, str]]] = {Args: _ARG_KEYS}
for _cls, _ in _ARGS_OF.values():
    _ARG_KEYS_OF[_cls] = [(f.name, f.encode_name) for f in msgspec.structs.fields(_cls)]


def _full(cat: str) -> type:
    args, empty = _ARGS_OF.get(cat, (Args, _EMPTY_ARGS))
    return _tagged(cat, [("ph", Any, None), *_TIMES, ("args", Union[args, None], empty)])


TAGGED = tuple(_full(c) for c in FULL_CATEGORIES) + (_tagged("python_function", _TIMES),) + \
    tuple(_tagged(c, []) for c in COUNTED_CATEGORIES)  # fmt: skip

# Three decoders, fastest first: a struct per category (every event has a known category); the
# same fields for all events, the category one of the known strings (events without a category:
# Kineto's metadata at the end of the trace); any category. A run is decoded with the next one
# where one fails; an import that met a category outside the known list goes on with the last,
# one whose runs keep having events without a category with the second.
DECODERS = (msgspec.json.Decoder(list[Union[TAGGED]]), msgspec.json.Decoder(list[KnownEvent]),  # type: ignore[valid-type]
            msgspec.json.Decoder(list[Event]))
DECODER = DECODERS[2]
_first = [0]  # the decoder this import starts each run with
_untagged = [0]  # runs in a row that had events without a category


class Tail(msgspec.Struct, gc=False):
    """The end of the trace: its last events, the end of ``traceEvents`` and the keys after it."""

    traceEvents: list[Event]  # one run: the decoder that takes any category


TAIL_DECODER = msgspec.json.Decoder(Tail)
TAIL_PREFIX = b'{"traceEvents":['


def decode(text: bytes | bytearray, tail: bool = False, array: bool = False) -> list[Any]:
    """Return the events of ``text`` (structs with a ``cat`` attribute and, for the categories that
    are mapped, the fields the importer reads): whole events and their commas, with ``array``
    already enclosed in ``[`` and ``]``, or with ``tail`` the rest of the trace from an event on
    (msgspec.DecodeError where it is not)."""
    if tail:
        return TAIL_DECODER.decode(TAIL_PREFIX + text).traceEvents
    data = text if array else b"[" + text + b"]"
    for level in range(_first[0], len(DECODERS)):
        try:
            events: list[Any] = DECODERS[level].decode(data)
        except msgspec.ValidationError:
            if level == len(DECODERS) - 1:
                raise  # not the category: values of other types, mapped event by event
            continue
        if level == 2:
            _first[0] = 2
        elif _first[0] == 0:
            _untagged[0] = _untagged[0] + 1 if level == 1 else 0
            if _untagged[0] >= 2:
                _first[0] = 1
        return events
    raise AssertionError("unreachable")


def as_dict(e: Event) -> dict[str, Any]:
    """The event as the JSON object the per-event mapping reads (keys without a value left out)."""
    ev: dict[str, Any] = {k: v for k, v in (("ph", e.ph), ("cat", e.cat), ("name", e.name), ("pid", e.pid),
                                            ("tid", e.tid), ("ts", e.ts), ("dur", e.dur)) if v is not None}
    if e.args is not None and id(e.args) not in _EMPTIES:
        args = {}
        for attr, key in _ARG_KEYS_OF[type(e.args)]:
            v = getattr(e.args, attr)
            if v is not None:
                args[key] = msgspec.json.decode(v) if isinstance(v, msgspec.Raw) else v
        ev["args"] = args
    return ev


def reset_decoders() -> None:
    """Decode the next runs with the fastest decoder first again (at the start of an import)."""
    _first[0] = _untagged[0] = 0
