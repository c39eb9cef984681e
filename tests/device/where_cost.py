"""Where the default collectors' cost on a launch-bound loop sits, measured inside one profiled process.

Run under ``gpuscope profile --no-overhead-probe`` (any ``--trace``). Blocks of steps alternate between
settings changed in the running process, so every setting shares the process's conditions (its
memory layout, its core, the GPU's clocks), which differ by 25-35% between fresh processes on these
machines. Each block records the wall time per step (the step ends with a sync, as the overhead
benchmark's workloads do) and the main thread's CPU time per step; the flush thread's CPU time over
the block is read from the agent.

Settings (each compared with ``as-is`` of the same round):
- ``as-is``: what the trace asked for;
- ``full``: module forward ranges pushed and popped (the path backward ranges take), with anchors;
- ``logged``: module forward ranges in the thread's log, without launch anchors;
- ``no-wrapper``: ``nn.Module.__call__`` put back (no module ranges at all);
- ``hooks-off``: every PyTorch hook passes its call through (no module, optimizer or step ranges);
- ``cupti-off``: CUPTI's record kinds that a capture window switches turned off;
- ``cupti-off-no-wrapper``: both;
- ``sampler-off``: the Python sampler asleep (``--trace cpu``);
- ``ops-off``: the operator recorder off (``torch-ops``/``torch-shapes``);
- ``callbacks-off``: CUPTI's callbacks for synchronization sites and graph launches disabled (the
  launch anchors' callback stays);
- ``graph-level``: CUPTI's graph-level records (``GRAPH_TRACE``) turned on beside the kernel records,
  for the graphs launched during the block (each launch one record instead of one per node, where
  CUPTI honours the switch in a running process; the report's ``graph_launch`` rows say whether it did);
- ``all-off``: everything above off (CUPTI's kinds, every hook passing through, the sampler, the
  operator recorder);
- ``uninstalled``: as ``all-off``, and the PyTorch hooks taken out altogether (``TorchHooks.uninstall``:
  the original functions back, the optimizer's global hooks removed) with the interpreter's switch
  interval back to its default: what is left of gpuscope is CUPTI attached, the sleeping sampler
  thread and the flush thread.

``--workload sgd4`` is the CPU benchmark's small training loop (bench/workloads/cpu_train.py), for
a machine without a GPU. ``--workload client:NAME`` is one iteration of the real-client program
``tests/workloads/clients/NAME.py`` as written (a Hugging Face model, say).

Also runs untraced (no agent): then only ``as-is`` exists.

    gpuscope profile --no-overhead-probe -o r python tests/device/where_cost.py --out where.json
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from typing import Any, Callable

import torch

DEV = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: a dry run of the script itself
sync = torch.cuda.synchronize if DEV == "cuda" else (lambda: None)

MODES = ["as-is", "full", "logged", "no-wrapper", "hooks-off", "cupti-off", "cupti-off-no-wrapper", "sampler-off",
         "ops-off", "callbacks-off", "graph-level", "all-off", "uninstalled"]


def mlp_step(layers: int = 8, width: int = 1024, batch: int = 256) -> Callable[[], None]:
    """``layers`` x (Linear(width) + ReLU) trained with SGD on one batch: the launch-bound MLP by default."""
    model = torch.nn.Sequential(*[m for _ in range(layers) for m in (torch.nn.Linear(width, width),
                                                                       torch.nn.ReLU())]).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(batch, width, device=DEV)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        opt.step()

    return step


def gpt_step(compiled: bool = False) -> Callable[[], None]:
    import os

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "workloads"))
    import torch.nn.functional as F  # noqa: N812, PLC0415
    from transformer import GPT  # noqa: PLC0415

    model = GPT(vocab=4096, dim=256, heads=8, layers=4, ctx=256).to(DEV)
    if compiled:
        model = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    idx = torch.randint(0, 4096, (8, 256), device=DEV)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        logits = model(idx)
        F.cross_entropy(logits.view(-1, logits.shape[-1]), idx.view(-1)).backward()
        opt.step()

    return step


def client_step(name: str) -> Callable[[], None]:
    """One iteration of the real-client program ``name`` as written, ending with its own wait."""
    import importlib.util  # noqa: PLC0415
    import os  # noqa: PLC0415

    folder = os.path.join(os.path.dirname(__file__), "..", "workloads", "clients")
    sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(f"client_{name}", os.path.join(folder, f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from harness import Setup, wait  # noqa: PLC0415

    program, setup = module.PROGRAM, Setup(torch.device(DEV), quick=DEV == "cpu")
    inner = program.build(program.as_written.name, setup)

    def step() -> None:
        wait(program, setup, inner())

    return step


def sgd4_step() -> Callable[[], None]:
    torch.set_num_threads(1)
    return mlp_step(layers=4, width=128, batch=32)


class Switches:
    """The settings of the running agent that a block changes, and how to put them back."""

    def __init__(self) -> None:
        from gpuscope.capture.process import agent as agent_mod  # noqa: PLC0415

        self.agent = agent_mod.current()
        self.hooks = self.agent.collector("torch") if self.agent else None
        self.cuda = self.agent.collector("cuda") if self.agent else None
        self.sampler = self.agent.collector("sampler") if self.agent else None
        self.ops = self.agent.collector("torch-ops") if self.agent else None
        self.ops_recording = bool(getattr(self.ops, "recording", False))  # as the run left it
        self.callbacks = self.agent.collector("cuda-callbacks") if self.agent else None
        self.uninstalled = False
        self.switch = sys.getswitchinterval()
        self.recorder = self.agent.ranges if self.agent else None
        self.anchor = self.recorder.anchor if self.recorder else None
        self.wrapper = torch.nn.Module.__call__
        self.original = getattr(self.wrapper, "__wrapped__", self.wrapper)

    def modes(self) -> list[str]:
        """The settings of :data:`MODES` this process can switch (untraced: as is only)."""
        hooks, cuda = self.hooks is not None, self.cuda is not None
        needs = {"full": hooks, "logged": hooks, "no-wrapper": hooks, "hooks-off": hooks, "cupti-off": cuda,
                 "cupti-off-no-wrapper": hooks and cuda, "sampler-off": self.sampler is not None,
                 "ops-off": self.ops is not None, "callbacks-off": self.callbacks is not None,
                 "graph-level": cuda and "graph" not in getattr(self.cuda, "enabled", []),
                 "all-off": hooks or cuda, "uninstalled": hooks}
        return [m for m in MODES if m == "as-is" or (self.agent is not None and needs[m])]

    def set(self, mode: str) -> None:
        if self.hooks is not None and mode != "uninstalled" and self.uninstalled:
            self.hooks.install(torch)
            self.hooks._disabled = False
            self.wrapper = torch.nn.Module.__call__
            sys.setswitchinterval(self.switch)
            self.uninstalled = False
        if mode == "uninstalled":
            self.set("all-off")
            if not self.uninstalled:
                self.hooks.uninstall()
                sys.setswitchinterval(0.005)
                self.uninstalled = True
            return
        cupti_on = "cupti-off" not in mode and mode != "all-off"
        if self.cuda is not None:
            self.cuda.set_collecting(cupti_on)
            if "graph" not in self.cuda.enabled:
                cupti, kind = self.cuda._cupti, self.cuda._cupti.ActivityKind.GRAPH_TRACE
                try:
                    (cupti.activity_enable if mode == "graph-level" else cupti.activity_disable)(kind)
                except Exception as exc:  # noqa: BLE001  (said once per switch; the block runs as is)
                    print(f"graph-level records not switched ({mode}): {exc}", file=sys.stderr)
        if self.sampler is not None:
            self.sampler.set_collecting(mode not in ("sampler-off", "all-off"))
        if self.ops is not None:
            self.ops.set_collecting(self.ops_recording and mode not in ("ops-off", "all-off"))
        if self.callbacks is not None:
            self.callbacks.set_enabled(mode not in ("callbacks-off", "all-off"))
        if self.hooks is not None:
            self.recorder.anchor = None if mode == "logged" else self.anchor
            self.hooks.force_full = mode == "full"
            self.hooks.set_collecting(mode not in ("hooks-off", "all-off"))
            self.hooks._refresh()
            torch.nn.Module.__call__ = self.original if mode.endswith("no-wrapper") else self.wrapper

    def flush_ns(self) -> int:
        return self.agent.flush_thread_ns if self.agent is not None else 0


def block(step: Callable[[], None], steps: int, sw: Switches) -> dict[str, float]:
    sync()
    f0 = sw.flush_ns()
    c0 = time.thread_time_ns()
    t0 = time.perf_counter_ns()
    for _ in range(steps):
        step()
        sync()
    t1 = time.perf_counter_ns()
    c1 = time.thread_time_ns()
    return {"wall_us": (t1 - t0) / steps / 1e3, "cpu_us": (c1 - c0) / steps / 1e3,
            "flush_us": (sw.flush_ns() - f0) / steps / 1e3}


def spy(args: argparse.Namespace, step: Callable[[], None], sw: Switches) -> dict[str, Any]:
    """Sample this process with py-spy (Python frames, then native ones too) while it runs as is;
    return the most frequent innermost frames and the functions on most stacks."""
    import collections  # noqa: PLC0415
    import os  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import tempfile  # noqa: PLC0415

    out: dict[str, Any] = {}
    sw.set("as-is")
    for native in (False, True):
        raw = tempfile.mktemp(suffix=".txt")
        cmd = [args.spy, "record", "--pid", str(os.getpid()), "--rate", "300" if native else "2000",
               "--duration", str(int(args.spy_seconds)), "--format", "raw", "--output", raw]
        # native stacks need the process paused at each sample (which slows it; shares still tell)
        cmd += ["--native"] if native else ["--nonblocking"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        end = time.monotonic() + args.spy_seconds + 3
        while time.monotonic() < end and proc.poll() is None:
            block(step, args.steps, sw)
        err = proc.communicate(timeout=60)[1].decode(errors="replace")[-400:]
        leaf: collections.Counter[str] = collections.Counter()
        incl: collections.Counter[str] = collections.Counter()
        by_file: collections.Counter[str] = collections.Counter()
        total = 0
        try:
            lines = open(raw).read().splitlines()
        except OSError:
            out["native" if native else "python"] = {"error": err}
            continue
        for line in lines:
            stack, _, n = line.rpartition(" ")
            if not n.isdigit():
                continue
            frames = [re.sub(r":\d+\)", ")", f) for f in stack.split(";")]
            if "where_cost.py" not in stack:  # other threads (the flush thread, samplers)
                incl["<other threads>"] += int(n)
                continue
            total += int(n)
            leaf[frames[-1]] += int(n)
            by_file[frames[-1].rpartition("(")[2].rstrip(")")] += int(n)
            for f in set(frames):
                incl[f] += int(n)
        out["native" if native else "python"] = {
            "samples_main": total, "stderr": err,
            "leaf": [(f, round(c / max(total, 1), 4)) for f, c in leaf.most_common(40)],
            "leaf_by_file": [(f, round(c / max(total, 1), 4)) for f, c in by_file.most_common(25)],
            "inclusive": [(f, round(c / max(total, 1), 4)) for f, c in incl.most_common(60)],
        }
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--workload", default="mlp", help="mlp, gpt, sgd4 or client:NAME")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--steps", type=int, default=30, help="steps per block")
    p.add_argument("--warmup", type=int, default=20, help="steps before the first block")
    p.add_argument("--spy", metavar="PY_SPY", help="also sample this process with this py-spy, as is")
    p.add_argument("--spy-seconds", type=float, default=8.0)
    args = p.parse_args()
    if args.workload.startswith("client:"):
        step = client_step(args.workload.partition(":")[2])
    else:
        step = {"mlp": mlp_step, "gpt": gpt_step, "sgd4": sgd4_step}[args.workload]()
    sw = Switches()
    modes = sw.modes()
    for _ in range(args.warmup):
        step()
    rounds: list[dict[str, dict[str, float]]] = []
    for r in range(args.rounds):
        order = modes if r % 2 == 0 else [modes[0], *reversed(modes[1:])]
        got = {}
        for mode in order:
            sw.set(mode)
            block(step, 3, sw)  # settle after the switch
            got[mode] = block(step, args.steps, sw)
        sw.set("as-is")
        rounds.append(got)
    summary = {}
    for mode in modes:
        walls = [rd[mode]["wall_us"] for rd in rounds]
        cpus = [rd[mode]["cpu_us"] for rd in rounds]
        ratio = [rd[mode]["wall_us"] / rd["as-is"]["wall_us"] for rd in rounds]
        summary[mode] = {
            "wall_us": round(statistics.median(walls), 1), "cpu_us": round(statistics.median(cpus), 1),
            "flush_us": round(statistics.median(rd[mode]["flush_us"] for rd in rounds), 1),
            "wall_over_as_is": round(statistics.median(ratio), 3),
            "range": [round(min(ratio), 3), round(max(ratio), 3)],
        }
    doc = {"workload": args.workload, "traced": sw.agent is not None, "modes": summary, "rounds": rounds}
    if args.spy:
        doc["py_spy"] = spy(args, step, sw)
    with open(args.out, "w") as fh:
        json.dump(doc, fh)
    for mode, s in summary.items():
        print(f"{args.workload} {mode:22s} wall {s['wall_us']:8.1f} us  cpu {s['cpu_us']:8.1f} us  "
              f"flush {s['flush_us']:6.1f} us  /as-is {s['wall_over_as_is']:.3f} {s['range']}")


if __name__ == "__main__":
    main()
