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


# The categories the PyTorch profiler writes (Kineto's activity types, its flows, older spellings):
# decoded as these constant strings, not a new string per event. A run with another category is
# decoded again with any string (and so is every later run of the same import).
KnownCategory = Literal[
    "cpu_op", "user_annotation", "gpu_user_annotation", "gpu_memcpy", "gpu_memset", "concurrent_kernel",
    "kernel", "external_correlation", "cuda_runtime", "cuda_driver", "cpu_instant_event", "python_function",
    "overhead", "cuda_sync", "cuda_event", "cuda_profiler_range", "mtia_runtime", "mtia_ccp_events",
    "glow_runtime", "hpu_op", "xpu_runtime", "xpu_driver", "collective_comm", "gpu_pm_counter",
    "privateuse1_runtime", "privateuse1_driver", "Trace", "ac2g", "fwdbwd", "async_cpu_to_gpu",
    "Kernel", "Memcpy", "Memset", "Runtime", "Operator",
]  # fmt: skip


class KnownEvent(Event, gc=False):
    """An event whose category is one of :data:`KnownCategory` (or none)."""

    cat: Union[KnownCategory, None] = None


DECODER = msgspec.json.Decoder(list[Event])
KNOWN_DECODER = msgspec.json.Decoder(list[KnownEvent])
_known = [True]  # whether this import has met only known categories so far


class Tail(msgspec.Struct, gc=False):
    """The end of the trace: its last events, the end of ``traceEvents`` and the keys after it."""

    traceEvents: list[Event]


TAIL_DECODER = msgspec.json.Decoder(Tail)
TAIL_PREFIX = b'{"traceEvents":['


def decode(text: bytes | bytearray, tail: bool = False, array: bool = False) -> list[Event]:
    """Return the events of ``text``: whole events and their commas, with ``array`` already
    enclosed in ``[`` and ``]``, or with ``tail`` the rest of the trace from an event on
    (msgspec.DecodeError where it is not)."""
    if tail:
        return TAIL_DECODER.decode(TAIL_PREFIX + text).traceEvents
    data = text if array else b"[" + text + b"]"
    if _known[0]:
        try:
            return KNOWN_DECODER.decode(data)  # type: ignore[return-value]
        except msgspec.ValidationError:
            events = DECODER.decode(data)  # raises again where the category was not the cause
            _known[0] = False
            return events
    return DECODER.decode(data)


def as_dict(e: Event) -> dict[str, Any]:
    """The event as the JSON object the per-event mapping reads (keys without a value left out)."""
    ev: dict[str, Any] = {k: v for k, v in (("ph", e.ph), ("cat", e.cat), ("name", e.name), ("pid", e.pid),
                                            ("tid", e.tid), ("ts", e.ts), ("dur", e.dur)) if v is not None}
    if e.args is not None and e.args is not _EMPTY_ARGS:
        args = {}
        for attr, key in _ARG_KEYS:
            v = getattr(e.args, attr)
            if v is not None:
                args[key] = msgspec.json.decode(v) if isinstance(v, msgspec.Raw) else v
        ev["args"] = args
    return ev


def expect_known() -> None:
    """Decode the next runs with the known categories first again (at the start of an import)."""
    _known[0] = True
