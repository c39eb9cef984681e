"""One record per CUDA graph launch where a program's graphs are large: chosen at its first graph.

A kernel that runs as a node of a CUDA graph costs CUPTI a record like any other; a graph of a few
hundred nodes (``torch.compile(mode="reduce-overhead")``) costs hundreds of records per launch where
CUPTI's graph-level kind writes one. On a reduce-overhead GPT, graph-level records from the start
cost 1.21x of untraced against 1.52x for every node, the floor (kernel records alone) 1.32x
(H200, bench/results/real_clients.md). Switched on in a running process, the kind crashed the next
launch of a graph instantiated before it (a reduce-overhead GPT, a JAX loop). So the choice is
made once, at the entry of the process's first graph instantiation, before any executable graph
exists: where that graph has at least :data:`MIN_NODES` nodes, every graph of the process is
recorded as one ``graph_launch`` row per launch; otherwise every node's kernel is, as before (a JAX
step of 38 kernels measured no gain from graph-level records). Kernels launched outside graphs are
recorded one by one either way.

The watch runs in gpuscope's C subscriber (handoff.c: the node count through ``cuGraphGetNodes``,
the switch through ``cuptiActivityEnable``), no Python at an instantiation; without it nothing
switches. ``--trace cuda-graph`` records graphs at that level from the start, ``--trace
graph-nodes`` keeps every node's kernel. Once on, the kind stays on (the overhead probe and capture
windows leave it alone: the report is trimmed to the windows when written).
"""

from __future__ import annotations

import ctypes
import json
from typing import TYPE_CHECKING, Any

from .activity import loaded_library

if TYPE_CHECKING:
    from ..collectors import Context

MIN_NODES = 64  # nodes of the first graph instantiated from which graphs are recorded one row per launch
NODES_TRACE = "graph-nodes"
INSTANTIATE_APIS = ["cuGraphInstantiate", "cuGraphInstantiateWithFlags", "cuGraphInstantiateWithParams"]


class GraphLevel:
    """The switch armed in C; reads its outcome for the report."""

    def __init__(self, shim: Any, offset_ns: int) -> None:
        self._shim = shim
        self.offset = offset_ns

    def state(self) -> dict[str, int]:
        """``decided`` (a graph was instantiated), ``switched``, ``nodes`` (of the first graph; -1
        not counted), ``from_ns`` (session clock; 0 where not switched)."""
        out = (ctypes.c_int64 * 4)()
        self._shim.gs_graph_state(out)
        decided, switched, nodes, at = (int(v) for v in out)
        return {"decided": decided, "switched": switched, "nodes": nodes, "min_nodes": MIN_NODES,
                "from_ns": at + self.offset if switched else 0}

    def take_rows(self) -> dict[str, list[tuple[Any, ...]]]:
        return {}

    def set_collecting(self, on: bool) -> None:
        """Nothing: graph-level records, once on, stay on (see the module's docstring)."""

    def shutdown(self, ctx: Context) -> None:
        """The ``collector`` row: what the first graph decided."""
        st = self.state()
        ctx.add_row("collector", ("graph-level", st["switched"], 0, 0, 0, json.dumps(st, sort_keys=True)))


def start(ctx: Context, module: Any = None) -> GraphLevel | None:
    """Arm the switch where the trace leaves the choice to gpuscope and the C subscriber runs; return
    it, or None."""
    if "cuda-graph" in ctx.trace or NODES_TRACE in ctx.trace:
        return None
    cupti, hub = ctx.collector("cuda"), ctx.collector("cuda-callbacks")
    shim = getattr(hub, "native", None)
    libcuda = loaded_library("libcuda.so")
    if cupti is None or shim is None or libcuda is None or getattr(cupti, "raw", None) is None:
        return None
    try:
        nodes = ctypes.CDLL(libcuda).cuGraphGetNodes
        enable = cupti.raw._lib.cuptiActivityEnable
        kind = int(cupti.cupti_module.ActivityKind.GRAPH_TRACE)
    except (AttributeError, OSError):
        return None
    shim.gs_set_graph_switch(ctypes.cast(nodes, ctypes.c_void_p), ctypes.cast(enable, ctypes.c_void_p), kind, MIN_NODES)
    if not hub.native_graph_watch(INSTANTIATE_APIS):
        return None
    return GraphLevel(shim, ctx.clock_offset_ns)
