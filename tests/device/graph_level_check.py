"""How gpuscope's default records CUDA graphs, checked on a GPU (capture/cupti/graph_level.py).

    python3 tests/device/graph_level_check.py [--out DIR]

Profiles two client programs under the default collectors and checks what the first graph with
nodes decided: ``nanogpt_reduce_overhead`` (torch.compile's CUDA-graph trees, first graph over 64
nodes) must run to its end with its graphs as ``graph_launch`` rows and no kernel row of a graph, and
dynamo's counters as untraced; ``jax_mlp`` (XLA graphs of a few nodes) must keep every kernel.
Prints one JSON line per program and exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = ROOT / "tests" / "workloads" / "clients"
CASES = {"nanogpt_reduce_overhead": True, "jax_mlp": False}  # program -> graphs recorded whole expected


def facts(report: str) -> dict[str, Any]:
    """What the report says of its graphs."""
    import gpuscope

    with gpuscope.load(report) as r:
        rows = r.sql("SELECT detail FROM collector WHERE name = 'graph-level'")
        level = json.loads(rows[0][0]) if rows else {}
        graphed, plain = r.sql("SELECT count(*) FILTER (WHERE coalesce(graph_id, 0) <> 0), "
                               "count(*) FILTER (WHERE coalesce(graph_id, 0) = 0) FROM kernel")[0]
        launches = r.sql("SELECT count(*) FROM graph_launch")[0][0]
        exit_code = r.meta.get("exit_code")
    return {"level": level, "graph_kernels": graphed, "other_kernels": plain, "graph_launches": launches,
            "exit_code": exit_code}


def run(program: str, out: Path) -> dict[str, Any]:
    """Untraced, then under ``gpuscope profile``, each timing itself."""
    script = str(CLIENTS / f"{program}.py")
    plain, traced = out / f"{program}.untraced.json", out / f"{program}.traced.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, script, "--timing-out", str(plain)], env=env, check=False,
                   capture_output=True, timeout=600)
    report = out / program
    proc = subprocess.run([sys.executable, "-m", "gpuscope", "profile", "--force-overwrite", "-o", str(report),
                           sys.executable, script, "--timing-out", str(traced)], env=env, check=False,
                          capture_output=True, text=True, timeout=900)
    got = facts(str(report) + ".gpuscope") if os.path.exists(str(report) + ".gpuscope") else {}
    times = {k: json.loads(p.read_text()) if p.exists() else {} for k, p in (("untraced", plain), ("traced", traced))}
    got.update(program=program, rc=proc.returncode,
               ms_untraced=1e3 * (times["untraced"].get("steady_s_per_iteration") or 0),
               ms_traced=1e3 * (times["traced"].get("steady_s_per_iteration") or 0),
               compile_untraced=times["untraced"].get("compile"), compile_traced=times["traced"].get("compile"))
    return got


def verdict(got: dict[str, Any], whole: bool) -> list[str]:
    """What failed (empty: passed)."""
    bad = []
    if got.get("rc") != 0 or got.get("exit_code") != 0:
        bad.append(f"exit {got.get('rc')}/{got.get('exit_code')}")
    switched = bool(got.get("level", {}).get("switched"))
    if switched != whole:
        bad.append(f"graphs recorded whole: {switched}, expected {whole}")
    if whole and (got.get("graph_kernels") or not got.get("graph_launches")):
        bad.append(f"{got.get('graph_kernels')} kernel rows of graphs, {got.get('graph_launches')} graph launch rows")
    if not whole and not got.get("graph_kernels"):
        bad.append("no kernel of a graph recorded")
    if got.get("compile_untraced") != got.get("compile_traced"):
        bad.append(f"dynamo counters {got.get('compile_untraced')} untraced, {got.get('compile_traced')} traced")
    return bad


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="where reports and timings go (default: a temporary folder)")
    args = p.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="graph-level-"))
    out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for program, whole in CASES.items():
        got = run(program, out)
        got["failed"] = verdict(got, whole)
        failed += bool(got["failed"])
        print(json.dumps(got, sort_keys=True), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
