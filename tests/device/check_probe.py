"""Set the overhead probe's steps (collection off) against the same program's steps run without any
profiler (tests/device/probe_truth.py), per program and round, and diagnose each report.

    python tests/device/check_probe.py DIR > probe_check.json

DIR holds NAME_untraced_ROUND.json and NAME_ROUND.gpuscope.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from gpuscope.analysis.diagnosis import diagnose
from gpuscope.analysis.steps.probe import probe_timings
from gpuscope.trace.report import Report

SKIP = 5  # the first steps of an untraced run are warm-up


def main() -> int:
    root = Path(sys.argv[1])
    rows = []
    for report in sorted(root.glob("*.gpuscope")):
        name, _, round_ = report.stem.rpartition("_")
        row: dict[str, object] = {"program": name, "round": round_}
        try:
            truth = json.loads((root / f"{name}_untraced_{round_}.json").read_text().strip().splitlines()[-1])
            steps = truth["durations_ns"][SKIP:]
            row["untraced_median_ns"] = statistics.median(steps) if steps else None
        except (OSError, ValueError, KeyError, IndexError) as exc:
            row["untraced_error"] = repr(exc)
        try:
            with Report.open(report) as r:
                timings = list(probe_timings(r).values())
                if timings:
                    t = timings[0]
                    row.update(off_median_ns=t.off_median, on_median_ns=t.on_median, off_steps=len(t.off_ns),
                               on_steps=len(t.on_ns), off_ns=list(t.off_ns), ratio=t.ratio, cost_share=t.cost_share)
                diag = diagnose(r)
                row["findings"] = [{"rule": f.rule, "share": round(f.share, 4), "work_changing": f.work_changing,
                                    "one_time": f.one_time, "advisory": f.advisory} for f in diag.findings[:6]]
                row["notes"] = [n for n in diag.notes if "measured" in n]
        except Exception as exc:  # noqa: BLE001  (one bad report must not hide the others)
            row["report_error"] = repr(exc)
        u, off = row.get("untraced_median_ns"), row.get("off_median_ns")
        if isinstance(u, (int, float)) and isinstance(off, (int, float)) and u:
            row["off_vs_untraced"] = off / u
        rows.append(row)
    print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
