"""Whether two source trees give byte-for-byte the same ``gpuscope analyze`` output.

Each recorded fixture (``tests/fixtures/*.gpuscope.gz``, unzipped into a scratch directory) and
each report named with ``--report`` is analyzed by the gpuscope of ``--previous DIR/src`` and by
the current one, each a fresh process with no output kept beside the report; the outputs (``-f
json`` by default, ``--format`` repeatable) are compared byte for byte. Exit status 1 lists the
reports whose outputs differ.

    PYTHONPATH=src python bench/analyze_same.py --previous DIR [--current DIR] [--report BIG.gpuscope] [--format json]

``--current DIR`` takes ``DIR/src`` instead of this checkout's (a ``git archive`` of a commit, so
that edits made in the checkout meanwhile do not reach it).
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def analyze(report: Path, src: Path, fmt: str, cache: Path) -> bytes:
    """The output of ``gpuscope analyze -f FMT report`` with the gpuscope of ``src``, derived anew
    (the kept outputs beside the report and in ``cache`` removed first)."""
    shutil.rmtree(report.with_name(report.name + ".cache"), ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(src), "GPUSCOPE_CACHE_DIR": str(cache)}
    proc = subprocess.run([sys.executable, "-m", "gpuscope", "analyze", "-f", fmt, str(report)],
                          capture_output=True, env=env, check=False)
    return proc.stdout + f"\n-- exit {proc.returncode}\n".encode() + proc.stderr


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--previous", type=Path, required=True, help="a tree holding the previous src/")
    p.add_argument("--current", type=Path, help="a tree holding the current src/ (default: this checkout)")
    p.add_argument("--report", type=Path, action="append", default=[], help="a further report to compare")
    p.add_argument("--format", action="append", choices=("json", "table", "markdown"), help="default: json")
    p.add_argument("--no-fixtures", action="store_true", help="only the reports of --report")
    args = p.parse_args()
    formats = args.format or ["json"]
    differ: list[str] = []
    with tempfile.TemporaryDirectory(prefix="analyze-same-") as tmp:
        work = Path(tmp)
        reports = []
        if not args.no_fixtures:
            for gz in sorted((ROOT / "tests" / "fixtures").glob("*.gpuscope.gz")):
                out = work / gz.name[: -len(".gz")]
                with gzip.open(gz, "rb") as src, open(out, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                reports.append(out)
        reports += [r.resolve() for r in args.report]
        for report in reports:
            for fmt in formats:
                before = analyze(report, args.previous.resolve() / "src", fmt, work / "cache")
                after = analyze(report, (args.current.resolve() if args.current else ROOT) / "src", fmt, work / "cache")
                same = before == after
                if not same:
                    differ.append(f"{report.name} ({fmt})")
                print(f"{'same' if same else 'DIFFERENT'}  {report.name} -f {fmt}  ({len(after)} bytes)", flush=True)
    print(f"{len(reports) * len(formats) - len(differ)} of {len(reports) * len(formats)} outputs the same")
    if differ:
        print("different: " + ", ".join(differ))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
