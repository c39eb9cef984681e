"""What CUPTI's activity records add to one kernel launch in this process, measured at its end.

CUPTI works inside each CUDA call that launches work while its records are on: the launching call
takes longer, and in a launch-bound loop the GPU waits that much longer too. How much depends on
the machine (the CPU, the driver, a virtual machine's scheduling), so it is measured in the
process, once, when the program is done: an empty kernel launched in blocks on the program's
current CUDA context, with gpuscope's record kinds on (and off, in turn), then after gpuscope has
detached from CUPTI. The median difference per launch between the blocks with the kinds on and
the detached ones is the cost; analysis/steps/overhead.py multiplies it by the kernels, copies and sets
recorded. Detached, not only disabled: most of CUPTI's work inside a launch stays after its kinds
are disabled, until CUPTI is detached (bench/RESULTS.md). The cost is measured for both ways a
kernel is launched: through the driver (``cuLaunchKernel``: Triton's kernels) and through the CUDA
runtime (``cudaLaunchKernel``: PyTorch's own kernels).

Why the driver and runtime APIs through ctypes (no PyTorch, no cuda-bindings): nothing of the
program runs (PyTorch's dispatcher, a recorder of its operators), the cost of the Python call is
the same in every block, and the libraries are already loaded wherever there is something to
measure. The records of these launches are dropped (the caller reads them into nothing).

Nothing here may hang or raise into the program: each block is launched only after the one before
it finished (polled with ``cuStreamQuery`` up to a deadline, so a GPU still busy with a kernel that
never ends leaves the measurement undone instead of blocking on a full launch queue), on a stream
of its own that does not wait for the program's streams.
"""

from __future__ import annotations

import ctypes
import statistics
import time
from collections.abc import Callable

BLOCK = 200  # launches per block
PAIRS = 7  # blocks with records on, as many with them off (alternating), and as many detached
DEADLINE_S = 0.5  # the longest wait for one block's kernels to finish
CU_STREAM_NON_BLOCKING = 1
CUDA_SUCCESS = 0
CUDA_ERROR_NOT_READY = 600

# An empty kernel, in PTX the driver compiles for whatever GPU it runs on.
EMPTY_KERNEL = b"""
.version 6.0
.target sm_50
.address_size 64
.visible .entry gpuscope_empty()
{
    ret;
}
\0"""

Switch = Callable[[bool], None]  # turns the record kinds on (True) or off


class Unmeasured(RuntimeError):
    """The cost could not be measured here (the message says why)."""


def measure(libcuda: ctypes.CDLL, switch: Switch, cudart: ctypes.CDLL | None = None, pairs: int = PAIRS,
            block: int = BLOCK, clock: Callable[[], int] = time.perf_counter_ns,
            detach: Callable[[], None] | None = None) -> dict[str, int]:
    """Return the ns CUPTI's records add to one kernel launch (0 where none was seen) by launch path:
    ``driver`` (``cuLaunchKernel``, as Triton's launchers do) and, where ``cudart`` (the CUDA runtime
    the program loaded) is given and can launch it, ``runtime`` (``cudaLaunchKernel``, as PyTorch's
    own kernels are launched). Launches go on the current context of the calling thread; ``switch``
    turns gpuscope's record kinds on or off, blocks alternating, and leaves them on.

    With ``detach`` (which detaches CUPTI from the process), ``pairs`` more blocks are launched after
    it, and the cost is against those; the cost against the blocks with the kinds off is kept as
    ``<path>_kinds_off``. Disabling the kinds leaves most of CUPTI's work inside each launch in
    place: only detaching removes it (bench/RESULTS.md). Raises :class:`Unmeasured`."""
    lib = _Driver(libcuda)
    ctx = ctypes.c_void_p()
    lib.call("cuCtxGetCurrent", ctypes.byref(ctx))
    if not ctx.value:
        raise Unmeasured("no CUDA context on this thread")
    module, fn, stream = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    lib.call("cuModuleLoadData", ctypes.byref(module), ctypes.c_char_p(EMPTY_KERNEL))
    drained = True  # whether nothing of ours is left on the GPU (else the module and stream stay)
    runtime_library = ctypes.c_void_p()
    try:
        lib.call("cuModuleGetFunction", ctypes.byref(fn), module, b"gpuscope_empty")
        lib.call("cuStreamCreate", ctypes.byref(stream), ctypes.c_uint(CU_STREAM_NON_BLOCKING))
        launchers = {"driver": _driver_launcher(libcuda, fn, stream)}
        if cudart is not None:
            runtime = _runtime_launcher(cudart, stream, runtime_library)
            if runtime is not None:
                launchers["runtime"] = runtime
        drained = False
        for launch in launchers.values():
            launch(8)
            lib.wait(stream)  # the kernel runs at all (a GPU busy forever fails here)
        times: dict[str, tuple[list[float], list[float], list[float]]] = {
            name: ([], [], []) for name in launchers}  # per path: blocks with the kinds on, off, detached

        def blocks(column: int) -> None:
            for name, launch in launchers.items():
                t0 = clock()
                launch(block)
                times[name][column].append((clock() - t0) / block)
                lib.wait(stream)

        try:
            for i in range(2 * pairs):
                records = (i % 2 == 0) == ((i // 2) % 2 == 0)  # on-off, off-on, on-off, ...
                switch(records)
                blocks(0 if records else 1)
        finally:
            switch(True)
        if detach is not None:
            detach()
            for _ in range(pairs):
                blocks(2)
        drained = True
    finally:
        if drained:
            if stream.value:
                libcuda.cuStreamDestroy_v2(stream)
            libcuda.cuModuleUnload(module)
            if runtime_library.value and cudart is not None:
                cudart.cudaLibraryUnload(runtime_library)
    out = {}
    for name, (on, off, detached) in times.items():
        base = detached if detach is not None else off
        out[name] = max(0, round(statistics.median(on) - statistics.median(base)))
        if detach is not None:
            out[f"{name}_kinds_off"] = max(0, round(statistics.median(on) - statistics.median(off)))
    return out


def _driver_launcher(libcuda: ctypes.CDLL, fn: ctypes.c_void_p, stream: ctypes.c_void_p) -> Callable[[int], None]:
    launch = libcuda.cuLaunchKernel
    u = ctypes.c_uint
    return repeat(launch, (fn, u(1), u(1), u(1), u(1), u(1), u(1), u(0), stream, None, None), "cuLaunchKernel")


def repeat(launch: Callable[..., int], args: tuple[object, ...], name: str) -> Callable[[int], None]:
    """Return a function that calls ``launch(*args)`` n times, raising :class:`Unmeasured` on an error code."""

    def run(n: int) -> None:
        for _ in range(n):
            rc = launch(*args)
            if rc != CUDA_SUCCESS:
                raise Unmeasured(f"{name} returned CUDA error {rc}")
    return run


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


def _runtime_launcher(cudart: ctypes.CDLL, stream: ctypes.c_void_p,
                      library: ctypes.c_void_p) -> Callable[[int], None] | None:
    """Launch the empty kernel through the CUDA runtime: loaded as a runtime library, its kernel
    handle passed to ``cudaLaunchKernel``; None where this runtime cannot (``library`` holds what
    was loaded, for the caller to unload)."""
    kernel = ctypes.c_void_p()
    try:
        load, get, launch = cudart.cudaLibraryLoadData, cudart.cudaLibraryGetKernel, cudart.cudaLaunchKernel
        if load(ctypes.byref(library), ctypes.c_char_p(EMPTY_KERNEL), None, None, ctypes.c_uint(0), None, None,
                ctypes.c_uint(0)) != CUDA_SUCCESS:
            return None
        if get(ctypes.byref(kernel), library, b"gpuscope_empty") != CUDA_SUCCESS:
            return None
    except AttributeError:  # a runtime older than CUDA 12
        return None
    try:
        launch.argtypes = [ctypes.c_void_p, Dim3, Dim3, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        launch.restype = ctypes.c_int
    except (AttributeError, TypeError):  # not a ctypes function (a test's fake)
        pass
    one = Dim3(1, 1, 1)
    return repeat(launch, (kernel, one, one, None, 0, stream), "cudaLaunchKernel")


class _Driver:
    """Calls into libcuda that raise :class:`Unmeasured` on an error code."""

    def __init__(self, libcuda: ctypes.CDLL) -> None:
        self.lib = libcuda

    def call(self, name: str, *args: object) -> None:
        rc = getattr(self.lib, name)(*args)
        if rc != CUDA_SUCCESS:
            raise Unmeasured(f"{name} returned CUDA error {rc}")

    def wait(self, stream: ctypes.c_void_p, deadline_s: float = DEADLINE_S) -> None:
        end = time.monotonic() + deadline_s
        while True:
            rc = self.lib.cuStreamQuery(stream)
            if rc == CUDA_SUCCESS:
                return
            if rc != CUDA_ERROR_NOT_READY:
                raise Unmeasured(f"cuStreamQuery returned CUDA error {rc}")
            if time.monotonic() > end:
                raise Unmeasured("the GPU did not run an empty kernel within half a second")
            time.sleep(0.0005)
