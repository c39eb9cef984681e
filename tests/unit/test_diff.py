"""``gpuscope diff``: step time with bootstrap intervals, what explains a change, and the CI gate.

The runs are built with tests/report_builder.py: a training loop of ``steps`` steps marked with
``gpuscope.step()``, each step a forward range of ``Net.block`` (a GEMM) and ``Net.head`` (a small
kernel) and host time around them; the step durations are drawn from a seeded normal distribution,
so each test knows the truth it plants.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from import_helpers import gpuscope_cli
from report_builder import ReportBuilder, add_stack, add_sync_site

from gpuscope.analysis.diff.compare import diff
from gpuscope.analysis.diff.data import run_data
from gpuscope.analysis.diff.stats import compare
from gpuscope.reporters.diff import render_json, render_markdown, render_text
from gpuscope.trace.report import Report

MS = 1_000_000


def build_run(path: Path, seed: int, *, steps: int = 20, step_ms: float = 100.0, noise: float = 0.02,
              extra_ms: float = 0.0, device: str = "NVIDIA H100 80GB HBM3", gemm: str = "gemm_kernel",
              syncs_per_step: int = 0) -> Path:
    """A report of ``steps`` steps of about ``step_ms`` (relative noise ``noise``); ``extra_ms`` adds a
    kernel of that length per step inside Net.block (a planted regression)."""
    rng = np.random.default_rng(seed)
    b = ReportBuilder(path)
    b.writer.con.execute("INSERT INTO device (pid, id, name) VALUES (100, 0, ?)", [device])
    stack = add_stack(b, [("train.py", 10, "<module>"), ("train.py", 88, "train_step")]) if syncs_per_step else 0
    t = 1 * MS
    for _ in range(steps):
        length = int(max(step_ms * (1 + noise * rng.standard_normal()), 10) * MS) + int(extra_ms * MS)
        start = t
        block_end = start + 2 * MS + int(extra_ms * MS)
        b.range("Net", start, start + 5 * MS + int(extra_ms * MS), 1, category="forward")
        b.range("Net.block", start + MS, block_end, 1, category="forward")
        b.kernel(gemm, start + MS + 200_000, start + MS + 1_200_000, tid=1, launch=start + MS + 100_000)
        if extra_ms:
            b.kernel("slow_kernel", start + MS + 1_300_000, start + MS + 1_300_000 + int(extra_ms * MS), tid=1,
                     launch=start + MS + 150_000)
        b.range("Net.head", block_end + MS, block_end + 2 * MS, 1, category="forward")
        b.kernel("head_kernel", block_end + MS + 100_000, block_end + MS + 300_000, tid=1, launch=block_end + MS + 50_000)
        for k in range(syncs_per_step):
            at = block_end + 3 * MS + k * 10_000
            add_sync_site(b, at, at + 5_000, stack)
        t = start + length
        b.mark("step", t, 1, source="gpuscope")
    b.open(command=["python", "train.py"]).close()
    return path


def runs(tmp_path: Path, name: str, seeds: range, **kw: object) -> list[Path]:
    return [build_run(tmp_path / f"{name}{s}.gpuscope", s, **kw) for s in seeds]


def data(paths: list[Path]) -> list:
    out = []
    for p in paths:
        with Report.open(p) as r:
            out.append(run_data(r, p.name))
    return out


def test_bootstrap_interval_covers_the_truth() -> None:
    rng = np.random.default_rng(3)
    base = [rng.normal(100, 5, 40)]
    same = compare(base, [rng.normal(100, 5, 40)])
    assert same.enough and not same.significant and same.low < 0 < same.high
    slower = compare(base, [rng.normal(110, 5, 40)])
    assert slower.significant and slower.verdict == "slower" and slower.low < 0.10 < slower.high
    few = compare([np.array([1.0, 2.0, 3.0])], [np.array([2.0, 3.0, 4.0])])
    assert few.verdict == "too few steps to tell" and few.low is None


def test_same_program_passes(tmp_path: Path) -> None:
    result = diff(data(runs(tmp_path, "a", range(1, 2))), data(runs(tmp_path, "b", range(2, 3))))
    assert result.step.steps == (20, 20)
    failed, reason = result.gate(5)
    assert not failed and "within 5%" in reason
    assert result.warnings == []


def test_planted_30ms_regression_fails_and_is_attributed(tmp_path: Path) -> None:
    base = data(runs(tmp_path, "a", range(1, 2)))
    new = data(runs(tmp_path, "b", range(2, 3), extra_ms=30))
    result = diff(base, new)
    assert result.step.significant and 0.25 < result.step.change < 0.35
    failed, reason = result.gate(5)
    assert failed and "slower than the 5% allowed" in reason and "\n" not in reason
    layers = {i.key: i for i in result.items["layer"]}
    block = layers["Net.block forward"]
    assert block.delta_ns == pytest.approx(30 * MS) and block.share == pytest.approx(1.0, abs=0.1)
    kernels = {i.key.split(" grid")[0]: i for i in result.items["kernel"]}
    assert kernels["slow_kernel"].change.base == 0 and kernels["gemm_kernel"].change.change == pytest.approx(0)
    attribution = result.attribution()
    assert attribution[0].startswith("step +") and "slower" in attribution[0]
    assert any(re.match(r"\d+% from Net.block forward", a) for a in attribution), attribution


def test_planted_regression_is_named_by_the_part_of_the_step_it_changed(tmp_path: Path) -> None:
    """The planted kernel keeps the GPU busy 30 ms more a step (its bound is not known: no roofline
    in these reports); the GPU's idle time, the host's Python around the kernels, stays."""
    result = diff(data(runs(tmp_path, "a", range(1, 2))), data(runs(tmp_path, "b", range(2, 3), extra_ms=30)))
    parts = {i.key: i for i in result.items["part"]}
    busy = parts["GPU busy: bound not known"]
    assert busy.delta_ns == pytest.approx(30 * MS, rel=0.02) and busy.change.significant
    assert busy.share == pytest.approx(1.0, abs=0.1)
    assert not parts["GPU idle: CPU work (Python, framework)"].change.significant
    main = result.main_change("part")
    assert main is busy
    assert result.attribution()[1].startswith("main change: GPU busy: bound not known 1.2 ms -> 31.2 ms per step")
    same = diff(data(runs(tmp_path, "c", range(1, 2))), data(runs(tmp_path, "d", range(2, 3))))
    assert same.main_change("part") is None and not any(a.startswith("main change") for a in same.attribution())


@pytest.fixture(scope="module")
def noisy_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], list[Path]]:
    """Eight runs per side of noisy steps (6% spread), the new ones 3% slower."""
    d = tmp_path_factory.mktemp("noisy")
    return (runs(d, "n", range(10, 18), noise=0.06), runs(d, "m", range(20, 28), step_ms=103.0, noise=0.06))


def test_small_regression_on_noisy_steps_needs_repeated_runs(noisy_runs: tuple[list[Path], list[Path]]) -> None:
    base, new = data(noisy_runs[0]), data(noisy_runs[1])
    one = diff(base[:1], new[:1])
    assert not one.step.significant
    failed, reason = one.gate(1)
    assert not failed and "not significant" in reason
    pooled = diff(base, new)
    assert pooled.step.steps == (160, 160)
    assert pooled.step.significant and pooled.step.low < 0.03 < pooled.step.high
    failed, reason = pooled.gate(1)
    assert failed


def test_too_few_steps(tmp_path: Path) -> None:
    result = diff(data(runs(tmp_path, "a", range(1, 2), steps=3)), data(runs(tmp_path, "b", range(2, 3), steps=3)))
    assert result.step.verdict == "too few steps to tell"
    failed, reason = result.gate(1)
    assert not failed and reason.startswith("too few steps to tell")


def test_more_syncs_are_named_with_their_line(tmp_path: Path) -> None:
    base = data(runs(tmp_path, "a", range(1, 2)))
    new = data(runs(tmp_path, "b", range(2, 3), syncs_per_step=30))
    result = diff(base, new)
    assert result.syncs is not None and (result.syncs.base, result.syncs.new) == (0, 30)
    assert any(line.startswith("30 more syncs per step (cudaStreamSynchronize at train.py:88)")
               for line in result.attribution())


BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f"


def test_outputs_show_names_as_text_only(tmp_path: Path) -> None:
    odd = "gemm|<b>bold</b>\x1b[31m\u202eevil\u202c\u2066x\u2069\u200f"
    base = data(runs(tmp_path, "a", range(1, 2), gemm=odd))
    new = data(runs(tmp_path, "b", range(2, 3), gemm=odd, extra_ms=30))
    result = diff(base, new)
    text = render_text(result, 200)
    assert "\x1b" not in text and not set(BIDI) & set(text)
    assert "gemm|<b>bold</b>\\x1b[31m\\u202eevil\\u202c\\u2066x\\u2069\\u200f" in text
    md = render_markdown(result)
    assert "\x1b" not in md and not set(BIDI) & set(md)
    assert "gemm\\|\\<b\\>bold\\</b\\>\\\\x1b\\[31m\\\\u202eevil" in md and "| Net.block forward |" in md
    doc = json.loads(render_json(result))
    assert doc["step_time"]["significant"] and doc["step_time"]["verdict"] == "slower"
    assert {k["name"].split(" grid")[0] for k in doc["kernel"]} == {odd, "slow_kernel", "head_kernel"}
    assert doc["layer"][0]["name"] == "Net.block forward"


def test_text_output_fits_columns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """At 80 columns every line fits: long kernel names are cut in the middle of the name (the launch
    configuration kept where there is room), paragraphs wrap, and a column left out is named."""
    long = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>, at::detail::Array<char*, 3> >"
    base = data(runs(tmp_path, "a", range(1, 2), gemm=long))
    new = data(runs(tmp_path, "b", range(2, 3), gemm=long, extra_ms=30))
    result = diff(base, new)
    wide = render_text(result, 400)
    assert max(len(line) for line in wide.splitlines()) > 120  # the width it had before it was fitted
    for width in (80, 60):
        text = render_text(result, width)
        assert max(len(line) for line in text.splitlines()) <= width, text
        assert "Net.block forward" in text and "void at::native::vector" in text and "…" in text
        kernel = next(line for line in text.splitlines() if "void at::native::vector" in line)
        assert "+0.0%" in kernel  # the change column stays longest
    narrow = render_text(result, 60)
    assert "Left out where a table did not fit 60 columns: Base, New, Share (--format json" in " ".join(narrow.split())
    assert "+0.0% .. +0.0%" in narrow  # the interval stays while the base and share go
    monkeypatch.setenv("COLUMNS", "80")
    cli = gpuscope_cli("diff", str(tmp_path / "a1.gpuscope"), str(tmp_path / "b2.gpuscope"), cwd=tmp_path)
    assert cli.returncode == 0 and max(len(line) for line in cli.stdout.splitlines()) <= 80, cli.stdout


def test_cli_gate_and_pooled_runs(tmp_path: Path, noisy_runs: tuple[list[Path], list[Path]]) -> None:
    a = runs(tmp_path, "a", range(1, 2))
    b = runs(tmp_path, "b", range(2, 3), extra_ms=30)
    same = gpuscope_cli("diff", a[0].name, runs(tmp_path, "c", range(3, 4))[0].name, "--fail-if-slower", "5",
                        cwd=tmp_path)
    assert same.returncode == 0, same.stderr
    assert same.stderr.strip().splitlines()[-1].startswith("gpuscope: pass: step time")
    slow = gpuscope_cli("diff", a[0].name, b[0].name, "--fail-if-slower", "5", "-f", "markdown", cwd=tmp_path)
    assert slow.returncode == 1, slow.stderr
    assert slow.stderr.strip().splitlines() == [slow.stderr.strip().splitlines()[0]]
    assert slow.stderr.startswith("gpuscope: FAIL: step time +") and "## gpuscope diff" in slow.stdout
    base, new = [str(p) for p in noisy_runs[0]], [str(p) for p in noisy_runs[1]]
    alone = gpuscope_cli("diff", base[0], new[0], "--fail-if-slower", "1", "-f", "json", cwd=tmp_path)
    assert alone.returncode == 0 and "not significant" in alone.stderr
    pooled = gpuscope_cli("diff", "--base", *base, "--new", *new, "--fail-if-slower", "1", "-f", "json",
                          cwd=tmp_path)
    assert pooled.returncode == 1, pooled.stderr
    assert json.loads(pooled.stdout)["step_time"]["steps"] == [160, 160]


def test_cli_warns_on_different_devices_and_bad_input(tmp_path: Path) -> None:
    a = build_run(tmp_path / "a.gpuscope", 1)
    b = build_run(tmp_path / "b.gpuscope", 2, device="NVIDIA A100-SXM4-80GB")
    res = gpuscope_cli("diff", a.name, b.name, cwd=tmp_path)
    assert res.returncode == 0
    warnings = [line for line in res.stderr.splitlines() if line.startswith("gpuscope: warning:")]
    assert len(warnings) == 1 and "different devices" in warnings[0]
    assert "Step time" in res.stdout
    (tmp_path / "junk.gpuscope").write_bytes(b"not a report")
    bad = gpuscope_cli("diff", a.name, "junk.gpuscope", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.startswith("gpuscope: error: junk.gpuscope")
    lone = gpuscope_cli("diff", a.name, cwd=tmp_path)
    assert lone.returncode == 2 and "give a base and a new report" in lone.stderr


def test_the_shared_filter_escapes_every_bidirectional_control() -> None:
    from gpuscope import safe_text

    for ch in BIDI:
        for shown in (safe_text.terminal(ch), safe_text.markdown(ch), safe_text.csv_cell(ch), safe_text.html(ch)):
            assert ch not in shown and f"u{ord(ch):04x}" in shown


def test_a_kernel_that_ran_on_one_side_only_is_said_gone_or_new() -> None:
    from gpuscope.analysis.diff.compare import DiffResult, Item
    from gpuscope.analysis.diff.stats import Change

    faster = Change(10 * MS, 8 * MS, -0.2, -0.25, -0.15, (20, 20))
    gone = Item("kernel", "ncclKernel_SendRecv_RING_LL", Change(2 * MS, 0.0, -1.0, -1.0, -1.0, (20, 20)), 1.0)
    lines = DiffResult([], [], faster, -2 * MS, (0.0, 0.0), {"kernel": [gone]}).attribution()
    assert lines[-1] == "kernel ncclKernel_SendRecv_RING_LL gone (2 ms per step before)", lines
    slower = Change(8 * MS, 10 * MS, 0.25, 0.2, 0.3, (20, 20))
    new = Item("kernel", "fused_kernel", Change(0.0, 2 * MS, None, None, None, (20, 20)), 1.0)
    lines = DiffResult([], [], slower, 2 * MS, (0.0, 0.0), {"kernel": [new]}).attribution()
    assert lines[-1] == "kernel fused_kernel new (2 ms per step)", lines
    few = Item("kernel", "fused_kernel", Change(0.0, 2 * MS, None, None, None, (3, 3)), 1.0)
    assert not any("fused_kernel" in line for line in
                   DiffResult([], [], slower, 2 * MS, (0.0, 0.0), {"kernel": [few]}).attribution())
