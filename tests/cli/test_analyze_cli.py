"""``gpuscope analyze`` as a user runs it: on a recorded GPU report in every format, on a report
of a run without a GPU, and on files that are not reports; and the diagnosis lines at the end of
``gpuscope profile``."""

from __future__ import annotations

import json
import shutil

from conftest import unpack_fixture

from .conftest import Gpuscope


def _fixture(gs: Gpuscope, name: str) -> str:
    shutil.move(str(unpack_fixture(name, gs.cwd)), gs.cwd / "r.gpuscope")
    return "r.gpuscope"


def test_analyze_a_recorded_report(gs: Gpuscope) -> None:
    report = _fixture(gs, "mlp_default")
    res = gs.run("analyze", report)
    assert res.returncode == 0, res.describe()
    out = res.stdout
    assert out.startswith("Step-Time Breakdown (step_breakdown)")
    assert out.index("[launch_bound]") < out.index("[hot_line]") < out.index("[no_tensor_cores]")
    assert "Not checked" in out and res.stderr == ""


def test_analyze_json_and_markdown(gs: Gpuscope) -> None:
    report = _fixture(gs, "mlp_default")
    res = gs.run("analyze", "-f", "json", report)
    assert res.returncode == 0, res.describe()
    doc = json.loads(res.stdout)
    assert [f["rule"] for f in doc["findings"]][:2] == ["launch_bound", "hot_line"]
    md = gs.run("analyze", "--format", "markdown", "--output", "diag.md", report)
    assert md.returncode == 0 and md.stdout == "", md.describe()
    assert md.stderr.strip() == "gpuscope: wrote diag.md"
    text = (gs.cwd / "diag.md").read_text()
    assert text.startswith("## Step-time breakdown") and "1. **Launch-bound" in text


def test_min_share_leaves_out_small_findings(gs: Gpuscope) -> None:
    report = _fixture(gs, "mlp_default")
    res = gs.run("analyze", "-f", "json", "--min-share", "35", report)
    assert res.returncode == 0, res.describe()
    assert [f["rule"] for f in json.loads(res.stdout)["findings"]] == ["launch_bound"]


def test_analyze_a_file_that_is_not_a_report(gs: Gpuscope) -> None:
    (gs.cwd / "junk.gpuscope").write_bytes(b"not a database" * 100)
    res = gs.run("analyze", "junk.gpuscope")
    assert res.returncode != 0
    assert len(res.errors) == 1 and "junk.gpuscope" in res.errors[0]
    assert "Traceback" not in res.stderr


def test_a_run_without_gpu_work(gs: Gpuscope) -> None:
    """A CPU-only program: the profile ends with the CPU breakdown and its hot line, and analyze
    diagnoses the CPU side and lists the GPU rules as not checked."""
    gs.script("cpu.py", "total = sum(i * i for i in range(400_000))\nprint(total)\n")
    res = gs.profile("-t", "cpu,host", "-o", "c", "cpu.py")
    assert res.returncode == 0, res.describe()
    assert "CPU step time" in res.stderr and "diagnosis failed" not in res.stderr
    assert "gpuscope analyze " in res.stderr and res.stderr.rstrip().endswith("c.gpuscope")
    out = gs.run("analyze", "c.gpuscope")
    assert out.returncode == 0, out.describe()
    assert "CPU Step-Time Breakdown" in out.stdout and "[hot_line]" in out.stdout
    assert "where: cpu.py:1" in out.stdout
    # the GPU rules in one line, not one name each (20 names of noise on a CPU-only report)
    not_checked = out.stdout[out.stdout.index("\nNot checked\n"):].splitlines()[2:]
    gpu = [i for i, line in enumerate(not_checked) if line.startswith("  GPU rules: ")]
    assert len(gpu) == 1 and not_checked[gpu[0]].startswith(
        "  GPU rules: not checked, no GPU operations recorded"), out.stdout
    assert len(not_checked) <= 4  # the GPU rules' line (wrapped at most once) and a CPU rule or two
    assert "host_sync" not in out.stdout and "launch_bound" not in out.stdout
    doc = json.loads(gs.run("analyze", "-f", "json", "c.gpuscope").stdout)
    assert "host_sync" in json.dumps(doc)  # the data still names each rule

def test_analyze_a_report_recorded_without_a_gpu(gs: Gpuscope) -> None:
    """The CPU side of a DataLoader-starved training loop: the CPU breakdown, the DataLoader first."""
    report = _fixture(gs, "cpu_dataloader_starved")
    res = gs.run("analyze", report)
    assert res.returncode == 0, res.describe()
    out = res.stdout
    assert out.startswith("CPU Step-Time Breakdown (no GPU operations) (cpu_step_breakdown)")
    assert "Data loading (waiting for batches)" in out and "[data_loader]" in out
    assert "[startup]" not in out and "start-up before the first step" in out  # a note, not a finding
    doc = json.loads(gs.run("analyze", "-f", "json", report).stdout)
    assert doc["analysis"] == "cpu" and doc["findings"][0]["rule"] == "data_loader"
    assert doc["step_source"] == "PyTorch's marks at the end of optimizer.step()"
