"""The Python sampling profiler that runs inside the profiled process (``--trace cpu``).

A thread wakes every ``interval`` (4 ms by default: 250 Hz), takes every thread's Python stack with
``sys._current_frames()``, and records one sample per thread: its stack, as a node of a prefix
tree of frames, and the wall time since that thread's previous sample (a sample stands for the
time the sampler could not look; it may wake late while another thread holds the GIL).
Frames and stack nodes are interned in the process's shared :class:`~.stacks.StackTable`, so a
sample is three integers.

Every 0.1 s, and when sampling stops, the CPU times of the threads Python knows are read from
their CPU-time clocks, for CPU time against wall time per thread: no file is read, so the reading
keeps the GIL (each read of a /proc file hands it over and waits to get it back: beside dozens of
threads and a program running Python, one reading of them all took a good part of a second, and no
sample was taken meanwhile). Every task of the process (native threads too: OpenMP's, CUDA's) is
read from /proc rarely: at the first reading, then at least a second apart and fifty times what the
last such reading took, and when sampling stops. Without the clocks (not Linux) every reading is
from /proc.

While it runs, the interpreter's switch interval is at most half the sampling interval (see
:meth:`Sampler.start`). Outside a capture window (``set_collecting(False)``) the thread sleeps until
collection is back on.

What it costs the program: every sample takes the GIL once, from a thread that runs Python, which
stops there until the sampler hands it back. So the sampler wakes with ``time.sleep`` (one
acquisition of the GIL per sample; ``Event.wait`` with a timeout takes it several times, each a
forced switch of the running thread), and it counts in ``held_ns`` the wall time from its waking
with the GIL to its next sleep (two clock reads per sample): the time the program's threads could
not run Python because of it, descheduling of the sampler while it held the GIL included. When it
ends, the thread's CPU time is kept in ``busy_ns`` (one read of its CPU clock). Both go to the
report's ``collector`` row for the overhead line.

Standard library only.
"""

from __future__ import annotations

import os
import sys
import threading
import json
import time
from typing import TYPE_CHECKING, Any

from .stacks import MAX_DEPTH, StackTable

if TYPE_CHECKING:
    from ..collectors import Context

SAMPLE_RATE_ENV = "GPUSCOPE_SAMPLE_HZ"
DEFAULT_SAMPLE_HZ = 250  # 1 kHz cost 1.27x on a small CPU training loop, 250 Hz 1.09x (bench/RESULTS.md)

THREAD_TIMES_EVERY_NS = 100_000_000  # between readings of the threads' CPU times
ALL_TASKS_EVERY_NS = 1_000_000_000  # at least this between readings of every task's CPU time from /proc,
ALL_TASKS_SPACING = 50  # and this many times what the last one took
Rows = dict[str, list[tuple[Any, ...]]]


class Sampler:
    """Samples the stacks of every thread of this process into rows for the report."""

    def __init__(self, interval_s: float, offset_ns: int, stacks: StackTable | None = None) -> None:
        self.interval = interval_s
        self.offset = offset_ns
        self.samples = 0
        self.stacks = stacks if stacks is not None else StackTable()
        self._own_stacks = stacks is None
        self._rows: Rows = {"cpu_sample": [], "thread_time": []}
        self._last: dict[int, int] = {}  # thread ident -> time of its previous sample
        self._prev: dict[int, tuple[Any, int, int]] = {}  # id(frame) -> (frame, instruction offset, node), last sample
        self._native: dict[int, tuple[int, str]] = {}  # thread ident -> (native id, name)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._active = threading.Event()
        self._active.set()
        self._thread: threading.Thread | None = None
        self._switch: float | None = None  # the switch interval to restore
        self.busy_ns = 0
        self.held_ns = 0  # wall time holding the GIL, from waking to the next sleep
        self._clocks: bool | None = None  # whether the threads' CPU-time clocks can be read (checked once)
        self._all_tasks_at = 0  # monotonic time of the next reading of every task from /proc

    def set_collecting(self, on: bool) -> None:
        """Sample (``on``) or sleep until sampling is switched on again."""
        if on:
            self._active.set()
        else:
            self._active.clear()

    def start(self) -> None:
        # The sampler needs the GIL: a thread running Python hands it over only when the switch
        # interval (5 ms by default) has passed, so a sample would land up to 5 ms late, often
        # after a short hot loop has ended, and count it to whatever line runs then. Half the
        # sampling interval keeps samples where the time went; restored by stop().
        self._switch = sys.getswitchinterval()
        sys.setswitchinterval(min(self._switch, self.interval / 2))
        self._thread = threading.Thread(target=self._run, name="gpuscope-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling, with a last reading of the threads' CPU times."""
        if self._switch is not None:
            sys.setswitchinterval(self._switch)
            self._switch = None
        self._stop.set()
        self._active.set()  # wake a sleeping sampler so that it sees the stop
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2)
        try:
            self._thread_times()
        except Exception:  # noqa: BLE001,S110
            pass

    def shutdown(self, ctx: Context) -> None:
        """Stop sampling (:meth:`stop`) and add the ``collector`` row: samples, CPU and GIL time."""
        self.stop()
        detail = {"hz": round(1.0 / self.interval, 3), "held_ns": self.held_ns,
                  "interval_ns": int(self.interval * 1e9)}
        ctx.add_row("collector", ("sampler", self.samples, 0, self.busy_ns, 0, json.dumps(detail, sort_keys=True)))

    def take_rows(self) -> Rows:
        """The collector protocol's name for :meth:`take`."""
        return self.take()

    def take(self) -> Rows:
        """Return the rows recorded since the last call (frames and nodes before their samples).

        Frames and nodes of a shared stack table are left to its owner to hand over.
        """
        with self._lock:
            rows, self._rows = self._rows, {k: [] for k in self._rows}
        out = self.stacks.take() if self._own_stacks else {}
        out.update({k: v for k, v in rows.items() if v})
        return out

    # -- sampling --------------------------------------------------------------------------
    def _run(self) -> None:
        me = threading.get_ident()
        last_times = 0
        sleep, clock, interval = time.sleep, time.monotonic_ns, self.interval
        stop, active = self._stop, self._active
        held = 0
        while True:
            sleep(interval)
            woke = clock()
            if stop.is_set():
                break
            if not active.is_set():
                active.wait()
                self._last.clear()  # the pause is no thread's time
                continue
            try:
                self._sample(me)
                if woke - last_times >= THREAD_TIMES_EVERY_NS:
                    self._thread_times(all_tasks=woke >= self._all_tasks_at)
                    last_times = woke
            except Exception:  # noqa: BLE001,S110  (a sampler error must not reach the program)
                pass
            held += clock() - woke
            self.held_ns = held
        self.busy_ns = time.thread_time_ns()

    def _sample(self, me: int) -> None:
        now = time.monotonic_ns()
        frames = sys._current_frames()
        seen: dict[int, tuple[Any, int, int, Any, int]] = {}
        rows = []
        for ident, frame in frames.items():
            if ident == me:
                continue
            info = self._native.get(ident)
            if info is None:
                self._refresh_threads()
                info = self._native.setdefault(ident, (ident, ""))  # a thread Python did not start
            if info[1].startswith("gpuscope-"):
                continue
            prev = self._last.get(ident, now - int(self.interval * 1e9))
            self._last[ident] = now
            rows.append((now + self.offset, info[0], self._node(frame, seen), now - prev))
        del frames
        self._prev = seen  # this sample's frames, by id: their code and callers, never the frames themselves
        with self._lock:
            self._rows["cpu_sample"] += rows
        self.samples += 1

    def _node(self, frame: Any, seen: dict[int, tuple[Any, int, int, Any, int]]) -> int:
        """Return the stack node of ``frame``, adding to ``seen`` every frame of its stack.

        A frame that was on a stack at the previous sample, at the same instruction, keeps the node it
        had (its callers are suspended, so its whole stack is unchanged): usually only the top
        few frames are new, and the walk stops below them. The frames themselves are not kept from
        one sample to the next: a frame holds its locals, and a frame kept after its function
        returned would keep them alive (tensors that the program, or torch.compile's CUDA-graph trees,
        count on being freed). A frame is known again by its id with its code, instruction, and its
        caller's id and code; a new frame that took a dead one's id matches only where it runs the
        same code at the same place under a caller of the same id and code.
        """
        prev = self._prev
        fresh: list[Any] = []
        base = 0
        f = frame
        while f is not None and len(fresh) < MAX_DEPTH:
            hit = prev.get(id(f))
            if hit is not None and _same(hit, f) and hit[1] == f.f_lasti:
                base = hit[4]
                while f is not None:  # carry the unchanged callers over to this sample
                    kept = prev.get(id(f))
                    if kept is None or not _same(kept, f):
                        break
                    seen[id(f)] = kept
                    f = f.f_back
                break
            fresh.append(f)
            f = f.f_back
        node = base
        stacks = self.stacks
        for f in reversed(fresh):
            node = stacks.child(node, stacks.frame_of(f))
            back = f.f_back
            seen[id(f)] = (f.f_code, f.f_lasti, id(back), back.f_code if back is not None else None, node)
        return node

    def _refresh_threads(self) -> None:
        for t in threading.enumerate():
            if t.ident is not None:
                self._native[t.ident] = (t.native_id or t.ident, t.name)

    def _thread_times(self, all_tasks: bool = True) -> None:
        """Record the CPU time so far of each thread Python knows (from its clock) and, with
        ``all_tasks`` or without the clocks, of every other task of the process (from /proc).

        Rows are (time, native thread id, name, CPU time in ns) from either source: a thread's CPU
        time is read from one source for as long as Python knows it, and /proc's utime + stime is
        its clock's value in ticks (10 ms), rounded down.
        """
        start = time.monotonic_ns()
        now = start + self.offset
        rows: list[tuple[Any, ...]] = []
        if self._clocks is None:
            self._clocks = _thread_clocks_work()
        read = self._clock_times(now, rows) if self._clocks else set()
        if all_tasks or not self._clocks:
            self._proc_times(now, rows, read)
            end = time.monotonic_ns()
            self._all_tasks_at = end + max(ALL_TASKS_EVERY_NS, ALL_TASKS_SPACING * (end - start))
        with self._lock:
            self._rows["thread_time"] += rows

    def _clock_times(self, now: int, rows: list[tuple[Any, ...]]) -> set[int]:
        """Add the CPU time of every thread of ``threading`` from its clock; return their native ids."""
        read: set[int] = set()
        clock = time.clock_gettime_ns
        for t in threading.enumerate():
            ident, native = t.ident, t.native_id
            if ident is None or native is None or native in read:
                continue
            self._native[ident] = (native, t.name)  # an ident is reused by the next thread: keep it current
            try:
                cpu_ns = clock(_cpu_clock(native))
            except (OSError, ValueError, OverflowError):
                continue  # it ended since the listing
            rows.append((now, native, t.name, cpu_ns))
            read.add(native)
        return read

    def _proc_times(self, now: int, rows: list[tuple[Any, ...]], skip: set[int]) -> None:
        """Add the CPU time of every task of the process (from /proc) but those in ``skip``."""
        names = {native: name for native, name in self._native.values()}
        try:
            tids = os.listdir("/proc/self/task")
        except OSError:
            return
        for tid in tids:
            if int(tid) in skip:
                continue
            cpu_ns = _proc_cpu_ns(tid)
            if cpu_ns is not None:
                rows.append((now, int(tid), names.get(int(tid), ""), cpu_ns))


def start(ctx: Context, module: Any = None) -> Sampler:
    """Start sampling every thread at ``GPUSCOPE_SAMPLE_HZ`` (250 Hz by default); return the sampler."""
    try:
        hz = float(os.environ.get(SAMPLE_RATE_ENV, DEFAULT_SAMPLE_HZ))
    except ValueError:
        hz = DEFAULT_SAMPLE_HZ
    sampler = Sampler(1.0 / max(hz, 1.0), ctx.clock_offset_ns, ctx.stacks)
    sampler.start()
    return sampler


def _same(kept: tuple[Any, int, int, Any, int], f: Any) -> bool:
    """Whether ``f`` is the frame ``kept`` describes: same code, same caller (by id and code)."""
    back = f.f_back
    return (kept[0] is f.f_code and kept[2] == id(back)
            and kept[3] is (back.f_code if back is not None else None))


def _cpu_clock(native_id: int) -> int:
    """The id of the CPU-time clock of thread ``native_id`` of this process (Linux's encoding, as
    glibc's and musl's ``pthread_getcpuclockid`` make it).

    Made from the native id rather than by ``time.pthread_getcpuclockid(ident)``: that reads the
    thread's descriptor through its pthread_t, whose memory may be unmapped once the thread has
    ended (a thread may end between the listing and the read). The kernel answers an ended thread's
    clock, or another process's thread, with EINVAL.
    """
    return (~native_id << 3) | 6  # CPUCLOCK_PERTHREAD_MASK (4) | CPUCLOCK_SCHED (2)


def _thread_clocks_work() -> bool:
    """Whether threads' CPU-time clocks can be read here: Linux's encoding, checked on this thread."""
    if not sys.platform.startswith("linux") or not hasattr(time, "pthread_getcpuclockid"):
        return False
    try:
        clock = _cpu_clock(threading.get_native_id())
        return time.pthread_getcpuclockid(threading.get_ident()) == clock and time.clock_gettime_ns(clock) >= 0
    except (OSError, ValueError, OverflowError, AttributeError):
        return False


def _proc_cpu_ns(tid: int | str) -> int | None:
    """Task ``tid``'s CPU time so far in ns, from /proc (utime + stime, in ticks); None if it ended."""
    try:
        with open(f"/proc/self/task/{tid}/stat") as fh:
            fields = fh.read().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")
