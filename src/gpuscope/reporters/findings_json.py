"""The diagnosis as JSON: breakdown per process and step (integer ns), findings, skipped rules."""

from __future__ import annotations

import json
from typing import Any

from ..analysis.diagnosis import Diagnosis
from ..analysis.diagnosis.breakdown import PARTS
from ..analysis.diagnosis.cpu_diagnosis import CpuDiagnosis


def as_dict(diag: Diagnosis) -> dict[str, Any]:
    """Return the diagnosis as plain data."""
    cpu = isinstance(diag, CpuDiagnosis)
    parts = diag.parts if isinstance(diag, CpuDiagnosis) else PARTS
    processes = []
    for p in diag.processes:
        mean = p.mean_parts()
        processes.append({
            "pid": p.pid,
            "has_steps": p.has_steps,
            "steady_steps": len(p.steady),
            "warmup_steps": int(p.steps["warmup"].sum()),
            "mean_ns": {k: int(round(v)) for k, v in mean.items()},
            "steps": [
                {"step": r["step"], "start_ns": int(r["start_ns"]), "duration_ns": int(r["duration_ns"]),
                 "warmup": bool(r["warmup"]), **{k: int(r[k]) for k in parts}}
                for r in p.steps.to_dict("records")
            ],
            **({"startup": diag.startup.get(p.pid)} if cpu else {}),  # type: ignore[union-attr]
        })
    return {
        **({"analysis": "cpu"} if cpu else {}),  # a report without GPU operations: the CPU side's parts
        "step_source": diag.step_source,
        "parts": list(parts),
        "processes": processes,
        **({"host": _host(diag)} if diag.host else {}),  # the host side of a report with GPU work, where recorded
        "findings": [f.as_dict() for f in diag.findings],
        "skipped": [{"rule": s.rule, "reason": s.reason} for s in diag.skipped],
        "notes": diag.notes,
    }


def _host(diag: Diagnosis) -> dict[str, Any]:
    """The host side's parts per process: means over its steady steps (integer ns)."""
    return {"step_source": diag.host_source, "parts": list(diag.host[0].parts),
            "processes": [{"pid": b.pid, "steady_steps": len(b.steady),
                           "mean_ns": {k: int(round(v)) for k, v in b.mean_parts().items()}} for b in diag.host]}


def render(diag: Diagnosis) -> str:
    """Return the diagnosis as a JSON document."""
    return json.dumps(as_dict(diag), indent=2, default=str) + "\n"
