"""Write fix timings of ``tests/device/gap_truth.py`` into ``tests/fixtures/programs.measured.json``, the
measured gains the recorded programs are checked against (tests/unit/test_programs_recorded.py).

    python3 bench/measured_from_gaps.py sync_not_bottleneck gaps/sync_not_bottleneck.no_item.json
    python3 bench/measured_from_gaps.py mlp_item_nonzero A.json B.json C.json   # fixes timed in separate processes

Each gap_truth document times the program as written and some fixes, interleaved in one process. The
first document's rounds of the program as written are kept. A fix timed in another document (some fixes
cannot share a process: CUDA-graph variants beside eager ones crashed) keeps its gain of each round
against that document's own as-written round: its time is that gain applied to the first document's
round of the same index. So every fix's per-round gains are exactly those it measured.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MEASURED = ROOT / "tests" / "fixtures" / "programs.measured.json"


def _program(name: str) -> Any:
    sys.path.insert(0, str(ROOT / "tests" / "workloads"))
    spec = importlib.util.spec_from_file_location(f"wl_{name}", ROOT / "tests" / "workloads" / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.PROGRAM


def _variant(v: Any, rounds: list[float], as_written: bool) -> dict[str, Any]:
    med = statistics.median(rounds)
    return {**v.as_dict(), "as_written": as_written, "round_s": rounds, "median_s": med, "min_s": min(rounds),
            "max_s": max(rounds), "spread": (max(rounds) - min(rounds)) / med}


def entry(name: str, docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The program's entry of programs.measured.json from gap_truth documents (the first one's as-written rounds)."""
    program = _program(name)
    base = [r["s_per_iteration"] for r in docs[0]["variants"][program.as_written.name]["rounds"]]
    variants: dict[str, Any] = {program.as_written.name: _variant(program.as_written, base, True)}
    for doc in docs:
        own = [r["s_per_iteration"] for r in doc["variants"][program.as_written.name]["rounds"]]
        for vname, v in doc["variants"].items():
            if vname == program.as_written.name or vname in variants:
                continue
            mine = [r["s_per_iteration"] for r in v["rounds"]]
            rounds = [t / o * b for t, o, b in zip(mine, own, base)]
            variants[vname] = _variant(program.variant(vname), rounds, False)
    n = [d["rounds"] for d in docs]
    return {"description": program.description, "nothing_to_fix": program.nothing_to_fix, "one_time": False,
            "measured": f"{docs[0]['device']}: {' + '.join(map(str, n))} interleaved rounds of "
                        f"{', '.join(str(d['iterations']) for d in docs)} iterations (tests/device/gap_truth.py)",
            "variants": variants}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("program")
    p.add_argument("gap_json", nargs="+")
    args = p.parse_args()
    docs = [json.loads(Path(f).read_text()) for f in args.gap_json]
    measured = json.loads(MEASURED.read_text())
    measured["programs"][args.program] = entry(args.program, docs)
    MEASURED.write_text(json.dumps(measured, indent=1) + "\n")
    for k, v in measured["programs"][args.program]["variants"].items():
        print(f"{args.program} {k}: {v['median_s'] * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
