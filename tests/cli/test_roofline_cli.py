"""``gpuscope roofline`` and ``gpuscope kernels`` as a user runs them, in a subprocess.

ncu is stood in for by a small script (this machine has no GPU): it answers ``--query-metrics``,
records the command line it was given, and writes either the sample CSV or the permission error
into the ``--log-file`` it was asked for.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from roofline_builder import install_torch_ops_contract, roofline_report

from .conftest import Gpuscope, base_env

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

FAKE_NCU = """#!{python}
import json, os, shutil, sys
args = sys.argv[1:]
if args == ["--query-metrics"]:
    print("Device GH100 (HOPPER)")
    print("Metric Name                       Metric Type  Metric Unit  Metric Description")
    for name in ("gpu__time_duration", "dram__bytes_read", "sm__ops_path_tensor_src_bf16_dst_fp32"):
        print(name + "    Counter    byte    what it counts")
    sys.exit(0)
json.dump({{"args": args, "cwd": os.getcwd()}}, open(os.environ["FAKE_NCU_RECORD"], "w"))
log = args[args.index("--log-file") + 1]
if os.environ.get("FAKE_NCU_MODE") == "perm":
    open(log, "w").write("==PROF== Connected to process 1\\n==ERROR== ERR_NVGPUCTRPERM - The user does not have "
                         "permission to access NVIDIA GPU Performance Counters on the target device 0.\\n")
    sys.exit(1)
shutil.copy({sample!r}, log)
"""


@pytest.fixture
def report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The roofline test report, made by a program ``train.py`` run in tmp_path."""
    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))  # the builder caches ceilings there
    install_torch_ops_contract()
    roofline_report(tmp_path / "train.gpuscope", command=[sys.executable, "train.py", "--steps", "3"],
                    cwd=str(tmp_path)).close()
    return tmp_path / "train.gpuscope"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    # wide enough for every column: fitting tables to a terminal is tested apart
    return base_env({"GPUSCOPE_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "400", **extra})


def _fake_ncu(tmp_path: Path) -> Path:
    path = tmp_path / "bin" / "ncu"
    path.parent.mkdir()
    path.write_text(FAKE_NCU.format(python=sys.executable, sample=str(FIXTURES / "ncu_raw_sample.csv")))
    path.chmod(0o755)
    return path


def test_missing_ncu_is_one_line_and_a_failure(gs: Gpuscope, report: Path, tmp_path: Path) -> None:
    env = _env(tmp_path, PATH=os.path.dirname(sys.executable))
    env.pop("GPUSCOPE_NCU", None)
    res = gs.run("kernels", str(report), "--ncu", env=env)
    assert res.returncode == 3, res.describe()
    assert len(res.errors) == 1 and "ncu" in res.errors[0] and "--import" in res.errors[0], res.describe()
    assert "Traceback" not in res.stderr


def test_counters_not_permitted_is_one_line_with_the_fix(gs: Gpuscope, report: Path, tmp_path: Path) -> None:
    ncu = _fake_ncu(tmp_path)
    res = gs.run("kernels", str(report), "--ncu", "--", sys.executable, "train.py",
                 env=_env(tmp_path, GPUSCOPE_NCU=str(ncu), FAKE_NCU_MODE="perm", FAKE_NCU_RECORD=str(tmp_path / "args.json")))
    assert res.returncode == 3, res.describe()
    assert len(res.errors) == 1 and "ERR_NVGPUCTRPERM" in res.errors[0]
    assert "NVreg_RestrictProfilingToAdminUsers=0" in res.errors[0] and "Traceback" not in res.stderr


def test_ncu_runs_the_given_program_and_stores_metrics(gs: Gpuscope, report: Path, tmp_path: Path) -> None:
    ncu = _fake_ncu(tmp_path)
    record = tmp_path / "args.json"
    res = gs.run("kernels", str(report), "--ncu", "--top", "2", "--", sys.executable, "train.py", "--steps", "3",
                 env=_env(tmp_path, GPUSCOPE_NCU=str(ncu), FAKE_NCU_RECORD=str(record)))
    assert res.returncode == 0, res.describe()
    seen = json.loads(record.read_text())
    assert seen["args"][-4:] == [sys.executable, "train.py", "--steps", "3"] and seen["cwd"] == str(tmp_path)
    metrics = seen["args"][seen["args"].index("--metrics") + 1].split(",")
    assert metrics == ["gpu__time_duration.sum", "dram__bytes_read.sum", "sm__ops_path_tensor_src_bf16_dst_fp32.sum"]
    assert "--launch-count" in seen["args"]
    assert (tmp_path / "train.ncu.csv").exists()
    assert "Kernel Metrics (Nsight Compute)" in res.stdout and "bf16 100%" in res.stdout
    assert any("stored metrics of 5 launches of 4 kernels" in line for line in res.own_lines), res.describe()
    # the metrics stay in the report: a later command reads them without ncu
    again = gs.run("kernels", str(report), "-f", "json", env=_env(tmp_path))
    rows = json.loads(again.stdout)["kernel_metrics"]["rows"]
    assert {r["Name"] for r in rows} >= {"nvjet_sm90_tst_128x256_64x4_bz_TNT", "cublasLt::splitKreduce_kernel"}


def test_import_of_an_ncu_csv(gs: Gpuscope, report: Path, tmp_path: Path) -> None:
    res = gs.run("kernels", str(report), "--import", str(FIXTURES / "ncu_raw_sample.csv"), env=_env(tmp_path))
    assert res.returncode == 0, res.describe()
    assert any("not in the report" in line for line in res.own_lines)
    bad = tmp_path / "bad.csv"
    bad.write_text("not,a,profile\n")
    res = gs.run("kernels", str(report), "--import", str(bad), env=_env(tmp_path))
    assert res.returncode == 2 and len(res.errors) == 1 and "Nsight Compute CSV" in res.errors[0]


def test_roofline_tables_and_chart(gs: Gpuscope, report: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    res = gs.run("roofline", str(report), "-o", "chart.svg", env=_env(tmp_path))
    assert res.returncode == 0, res.describe()
    assert "Ceilings of Test GPU" in res.stdout and "Roofline Summary" in res.stdout and "Roofline per Layer" in res.stdout
    assert (tmp_path / "chart.svg").read_text().count('id="ceiling-') == 5
    assert res.own_lines[-1].startswith("gpuscope: wrote chart.svg")
    again = gs.run("roofline", str(report), "-o", "chart.svg", env=_env(tmp_path))
    assert again.returncode == 2 and "--force-overwrite" in again.errors[0]
    layers = gs.run("roofline", str(report), "--by", "layer", "-o", "layers.html", "-f", "json", env=_env(tmp_path))
    assert layers.returncode == 0 and "<svg" in (tmp_path / "layers.html").read_text()
    assert json.loads(layers.stdout)["roofline_sum"]["rows"][0]["Bound"] == "compute"


def test_roofline_needs_a_report_or_calibrate(gs: Gpuscope, tmp_path: Path) -> None:
    res = gs.run("roofline", env=_env(tmp_path))
    assert res.returncode == 2 and "--calibrate" in res.errors[0]


def test_stats_roofline_sum(gs: Gpuscope, report: Path, tmp_path: Path) -> None:
    res = gs.run("stats", str(report), "-r", "roofline_sum", "-f", "csv", env=_env(tmp_path))
    assert res.returncode == 0, res.describe()
    assert res.stdout.splitlines()[0].startswith("Time (%),Total Time (ns),Instances,FLOPs (FLOP)")


def test_cpu_calibration_is_cached(gs: Gpuscope, tmp_path: Path) -> None:
    res = gs.run("roofline", "--calibrate", "--device", "cpu", "--repeats", "2", env=_env(tmp_path))
    assert res.returncode == 0, res.describe()
    cached = list((tmp_path / "cache" / "ceilings").glob("CPU*.json"))
    assert len(cached) == 1 and json.loads(cached[0].read_text())["sources"]["fp32"] == "measured"
    assert "GFLOP/s" in res.stdout or "TFLOP/s" in res.stdout
    assert "median of 2 repeats" in res.stdout


def test_calibration_keeps_a_higher_cached_ceiling_and_says_so(gs: Gpuscope, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A cached FP32 far above what this machine measures (an idle morning) survives a new run, which
    says it kept it; --replace takes the run's value."""
    from gpuscope.analysis.roofline.ceilings import Ceilings, cache_path, cpu_name

    monkeypatch.setenv("GPUSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    path = cache_path(cpu_name())
    path.parent.mkdir(parents=True)
    seeded = Ceilings(cpu_name(), dram_bytes_per_s=1.0, flops={"fp32": 1e16, "fp64": 1.0}, measured_at="morning",
                      sources={"dram": "measured", "fp32": "measured", "fp64": "measured"},
                      details={"spread": {"fp32": 0.01}})
    path.write_text(seeded.to_json())
    res = gs.run("roofline", "--calibrate", "--device", "cpu", "--repeats", "1", "-f", "json", env=_env(tmp_path))
    assert res.returncode == 0, res.describe()
    doc = json.loads(path.read_text())
    assert doc["flops"]["fp32"] == 1e16 and doc["flops"]["fp64"] > 1.0 and doc["dram_bytes_per_s"] > 1.0
    assert doc["details"]["measured_at_by_key"]["fp32"] == "morning"
    rows = {r["Ceiling"]: r for r in json.loads(res.stdout)["calibration"]["rows"]}
    assert rows["FP32"]["Kept"] == "cached" and rows["FP64"]["Kept"] == "this run"
    assert any("kept the cached FP32" in line for line in res.own_lines), res.describe()
    res = gs.run("roofline", "--calibrate", "--device", "cpu", "--repeats", "1", "--replace", env=_env(tmp_path))
    assert res.returncode == 0, res.describe()
    assert json.loads(path.read_text())["flops"]["fp32"] < 1e16


def test_calibration_options_need_calibrate(gs: Gpuscope, tmp_path: Path) -> None:
    res = gs.run("roofline", "x.gpuscope", "--repeats", "2", env=_env(tmp_path))
    assert res.returncode == 2 and "--calibrate" in res.errors[0]
    res = gs.run("roofline", "--calibrate", "--device", "cpu", "--repeats", "0", env=_env(tmp_path))
    assert res.returncode == 2 and "at least 1" in res.errors[0] and "Traceback" not in res.stderr


CPU_TRAIN = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    model(torch.randn(64, 256)).square().mean().backward()
    opt.step()
    opt.zero_grad()
"""


def test_roofline_of_a_program_profiled_on_the_cpu(gs: Gpuscope, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    gs.script("train.py", CPU_TRAIN)
    res = gs.profile("-t", "torch,torch-ops", "-o", "cpu", "train.py", env=_env(tmp_path))
    assert res.returncode == 0, res.describe()
    res = gs.run("roofline", "cpu.gpuscope", "-f", "json", env=_env(tmp_path))
    assert res.returncode == 0, res.describe()
    doc = json.loads(res.stdout)
    rows = {r["Name"]: r for r in doc["roofline_sum"]["rows"]}
    # 2 Linear layers x 3 steps forward (addmm), and their backward products (mm)
    assert rows["aten::addmm"]["Instances"] == 6
    assert rows["aten::addmm"]["FLOPs (FLOP)"] == 3 * (2 * 64 * 512 * 256 + 64 * 512 + 2 * 64 * 256 * 512 + 64 * 256)
    assert rows["aten::addmm"]["Tensor Cores"] == "n/a"
    assert any("timed on the CPU" in n for n in doc["roofline_sum"]["notes"])
    layers = {r["Name"] for r in doc["roofline_layer_sum"]["rows"]}
    assert {"Sequential.0", "Sequential.2"} <= layers


def test_ncu_never_runs_what_the_report_names(gs: Gpuscope, report: Path, tmp_path: Path) -> None:
    """A report is data: one edited to name a command is never run; the user gives the program."""
    import duckdb

    con = duckdb.connect(str(report))
    con.execute("UPDATE meta SET value = ? WHERE key = 'command'",
                [json.dumps(["bash", "-c", "touch PWNED; printf '\x1b]0;x\x07'"])])
    con.close()
    ncu = _fake_ncu(tmp_path)
    res = gs.run("kernels", str(report), "--ncu", env=_env(tmp_path, GPUSCOPE_NCU=str(ncu),
                                                            FAKE_NCU_RECORD=str(tmp_path / "args.json")))
    assert res.returncode == 2, res.describe()
    assert len(res.errors) == 1 and "never the one a report names" in res.errors[0], res.describe()
    assert "touch PWNED" in res.errors[0] and "\x1b" not in res.stderr  # shown, escaped, not run
    assert not (tmp_path / "PWNED").exists() and not (tmp_path / "args.json").exists()
    res = gs.run("kernels", str(report), "--", "python", "x.py", env=_env(tmp_path))
    assert res.returncode == 2 and "only run with --ncu" in res.errors[0], res.describe()


def test_ncu_csv_is_written_as_every_output_is(gs: Gpuscope, report: Path, tmp_path: Path) -> None:
    """ncu's CSV never goes through a planted link nor over an existing file without --force-overwrite,
    and ncu itself writes it in a private directory, not beside the report."""
    ncu = _fake_ncu(tmp_path)
    record = tmp_path / "args.json"
    env = _env(tmp_path, GPUSCOPE_NCU=str(ncu), FAKE_NCU_RECORD=str(record))
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    csv = tmp_path / "train.ncu.csv"
    csv.symlink_to(victim)
    program = ["--", sys.executable, "train.py"]
    res = gs.run("kernels", str(report), "--ncu", *program, env=env)
    assert res.returncode == 2 and "symbolic link" in res.errors[0] and "--force-overwrite" in res.errors[0], \
        res.describe()
    assert not record.exists()  # refused before the program ran
    res = gs.run("kernels", str(report), "--ncu", "--force-overwrite", *program, env=env)
    assert res.returncode == 0, res.describe()
    assert victim.read_text() == "precious\n" and not csv.is_symlink()
    assert csv.read_text() == (FIXTURES / "ncu_raw_sample.csv").read_text()
    args = json.loads(record.read_text())["args"]
    log = Path(args[args.index("--log-file") + 1])
    assert log.parent != tmp_path and not log.exists()  # ncu's own file was private and is gone
    record.unlink()
    res = gs.run("kernels", str(report), "--ncu", *program, env=env)  # exists now: a plain file
    assert res.returncode == 2 and "exists" in res.errors[0] and "--force-overwrite" in res.errors[0], res.describe()
    assert not record.exists()
    res = gs.run("kernels", str(report), "--ncu", "-o", "mine.csv", *program, env=env)
    assert res.returncode == 0 and (tmp_path / "mine.csv").read_text() == csv.read_text(), res.describe()
    res = gs.run("kernels", str(report), "-o", "x.csv", env=env)
    assert res.returncode == 2 and "only used with --ncu" in res.errors[0], res.describe()
