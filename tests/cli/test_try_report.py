"""``gpuscope report REPORT --try RESULT.json``: the page's section of the fixes ``gpuscope try`` measured,
from a real try of the CPU DataLoader program (one round, a fix that crashes it, a program argument that
is markup) and from a result of three rounds made by the measurement's own data classes (intervals,
names that are markup, a finding that needs a code change); a file that is no try result is one line
and exit 2, a failure of the section's own code exit 3; the section on screen in a browser."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest

from gpuscope.analysis.diagnosis.finding import Finding
from gpuscope.cli import main
from gpuscope.experiment import fixes, measure, result_file
from gpuscope.experiment.fixes import Fix, Planned
from gpuscope.experiment.runs import Budget, Outcome, Program
from gpuscope.reporters.html import try_section
from gpuscope.reporters.try_text import render_json, render_text

from .html_pages import IMG_NAME, SCRIPT_NAME, Gpuscope, Page, page_data, training_run  # noqa: F401

CPU = Path(__file__).resolve().parents[1] / "workloads" / "cpu"
MS = 1_000_000


def _pct(v: float) -> str:
    return f"{v * 100:.0f}%"


def _rows(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The section's fixes by name: each column's text."""
    table = data["content"]["tried"]["fixes"]
    labels = [c["label"] for c in table["columns"]]
    return {row[0][1]: {label: cell[1] for label, cell in zip(labels, row)} for row in table["rows"]}


@pytest.fixture(scope="module")
def real_try(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, Any]]:
    """``gpuscope try --json`` of the DataLoader program (an argument of it is markup, which the program
    ignores), profiled first and its report kept: channels_last crashes it, the workers measure once."""
    here = tmp_path_factory.mktemp("program")
    out = tmp_path_factory.mktemp("out")
    shutil.copy(CPU / "try_dataloader.py", here)
    r = Gpuscope(here).run("try", "-o", str(out / "loader.gpuscope"), "--rounds", "1", "--steps", "12", "--warmup",
                           "2", "--json", "--fix", "channels_last", "--fix", "dataloader_workers", "--",
                           "try_dataloader.py", SCRIPT_NAME, timeout=300)
    assert r.returncode == 0, r.describe()
    (out / "result.json").write_text(r.stdout)
    return out / "loader.gpuscope", out / "result.json", json.loads(r.stdout)


def test_the_page_shows_what_a_real_try_measured(real_try: tuple[Path, Path, dict[str, Any]]) -> None:
    report, result, tried = real_try
    before = report.read_bytes()
    r = Gpuscope(report.parent).run("report", report.name, "--try", result.name, "-o", "page.html")
    assert r.returncode == 0 and r.errors == [], r.describe()
    assert not r.lines_mentioning("warning"), r.describe()  # the result is of this report's program
    assert report.read_bytes() == before  # the report is only read
    html = (report.parent / "page.html").read_text()
    data = page_data(html)
    rows = _rows(data)
    crashed, workers = (next(f for f in tried["fixes"] if f["name"] == n) for n in ("channels_last", "dataloader_workers"))
    assert crashed["status"] == "crashed" and workers["status"] == "measured", tried
    view = "RuntimeError: view size is not compatible with input tensor's size and stride"
    assert rows["channels_last"]["Status"].startswith("CRASHED the program (exited with code 1, round 1): " + view)
    assert rows["channels_last"]["Measured gain"] == "-"
    w = rows["dataloader_workers"]
    assert w["Estimated gain"] == _pct(workers["estimated_gain"])
    assert w["Measured gain"] == f"{_pct(workers['measured_gain']['median'])} (1 round: no interval)"
    assert w["Answers"] == "answers data_loader: The loop waits for its DataLoader"
    assert w["Status"] == f"measured -> {workers['verdict']}" and workers["verdict"]
    assert w["Numbers"].startswith("first 5 losses agree")
    facts = dict(data["content"]["tried"]["facts"])
    assert facts["Program"].endswith("try_dataloader.py " + shlex.quote(SCRIPT_NAME))  # as a shell would take it
    assert "1 round, the program as written and each fix interleaved" in facts["How steps were timed"]
    assert "steps timed after 2 of warm-up" in facts["How steps were timed"]
    assert facts["The program as written"].endswith("per step (optimizer steps)")
    # the argument is in the page's data, escaped there, and nowhere as markup
    assert SCRIPT_NAME not in html and "\\u003cscript\\u003ewindow.__pwned" in html
    assert data["content"]["diagnosis"]["findings"]  # the rest of the page is still there


class RoundRuns:
    """Stands in for the runs of the measurement: each variant's step per round (ms), and the variants that fail."""

    def __init__(self, step_ms: dict[str, list[float]], failing: dict[str, str]) -> None:
        self.step_ms, self.failing = step_ms, failing

    def __call__(self, program: Program, variant: str, round_: int, fix_list: list[Fix], settings: list[Any],
                 budget: Budget, workdir: Path, losses: int = 5, warmup: int = 0) -> Outcome:
        if variant in self.failing:
            return Outcome(variant, round_, 1, 1.0, error=self.failing[variant])
        steps = [int(self.step_ms[variant][round_ - 1] * MS)] * (budget.steps - 1)
        return Outcome(variant, round_, 0, 1.0, steps, "torch", "steps",
                       results={"applied": {p["patch"]: "done" for p in settings}, "losses": [1.0, 0.9]})


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[measure.TryResult, Path, Path]:
    """A result of three rounds from the measurement's own classes, written as ``gpuscope try --json``
    writes it, and a report of the program it names (``python train.py``)."""
    launch = Finding("launch_bound", "Launch-bound " + IMG_NAME, 4e6, 0.3, [], "train.py:9", "compile it")
    edit = Finding("host_sync", "Host waits " + SCRIPT_NAME, 1e6, 0.1, [], "train.py:12 " + SCRIPT_NAME, "drop .item()")
    plan = fixes.plan([launch, edit], 3, None)
    odd = Fix(SCRIPT_NAME, IMG_NAME, ("launch_bound",), patch="compile")
    tried = [p for p in plan.tried if p.fix.name == "compile"]
    tried += [Planned(odd, launch, {}), Planned(fixes.fix_named("channels_last"), None, {})]
    runs = RoundRuns({"as_written": [40, 42, 41], "compile": [20, 26, 23], SCRIPT_NAME: [38, 39, 40]},
                     {"channels_last": "RuntimeError: view size is not compatible " + SCRIPT_NAME})
    monkeypatch.setattr(measure, "run", runs)
    result = measure.measure(Program(["python", "train.py"], str(tmp_path), {}), tried, 3, Budget(8, 60), 2, 0.1)
    result.needs_edit = plan.needs_edit
    path = tmp_path / "result.json"
    path.write_text(render_json(result))
    return result, path, training_run(tmp_path / "train.gpuscope")


def test_the_page_shows_each_fix_with_its_interval_and_names_as_text(made: tuple[measure.TryResult, Path, Path]) -> None:
    result, path, report = made
    r = Gpuscope(report.parent).run("report", report.name, "--try", path.name)
    assert r.returncode == 0 and not r.errors and not r.lines_mentioning("warning"), r.describe()
    html = (report.parent / "train.html").read_text()
    data = page_data(html)
    rows = _rows(data)
    plain = json.loads(path.read_text())
    assert list(rows) == [f["name"] for f in plain["fixes"]] == ["compile", SCRIPT_NAME, "channels_last"]
    text = render_text(result).splitlines()
    for f in plain["fixes"]:
        row = rows[f["name"]]
        if f["status"] != "measured":
            continue
        g = f["measured_gain"]
        assert g["rounds"] == 3 and g["low"] < g["median"] < g["high"], g  # rounds that differ: an interval
        assert row["Measured gain"] == (f"{_pct(g['median'])} (95% interval {_pct(g['low'])} to {_pct(g['high'])}, "
                                        f"3 rounds)")
        assert row["Estimated gain"] == _pct(f["estimated_gain"]) == "30%"
        # the words of gpuscope try's own output
        said = f"  estimated gain {row['Estimated gain']}, measured {row['Measured gain']} -> {f['verdict']}"
        assert said in text, text
        assert row["Step as written"] == "41 ms" and row["Step with the fix"] != "-"
    assert rows[SCRIPT_NAME]["What it changes"] == IMG_NAME
    assert rows[SCRIPT_NAME]["Answers"] == "answers launch_bound: Launch-bound " + IMG_NAME
    assert rows["channels_last"]["Status"] == ("CRASHED the program (exited with code 1, round 1): RuntimeError: view "
                                               "size is not compatible " + SCRIPT_NAME)
    tried = data["content"]["tried"]
    assert tried["not_tried"] == ["host_sync (10% estimated): Host waits " + SCRIPT_NAME + "; at train.py:12 "
                                  + SCRIPT_NAME]
    assert any(line.startswith("Unconfirmed: ") and "channels_last" in line for line in tried["lines"])
    # every name is in the data element, escaped, and nowhere as markup
    assert SCRIPT_NAME not in html and IMG_NAME not in html and "<img" not in html
    assert html.count("\\u003cscript\\u003ewindow.__pwned") >= 4


def test_a_result_of_another_program_is_shown_with_a_warning(made: tuple[measure.TryResult, Path, Path],
                                                             tmp_path: Path) -> None:
    _, path, _ = made
    other = training_run(tmp_path / "other.gpuscope")
    import duckdb

    con = duckdb.connect(str(other))
    con.execute("UPDATE meta SET value = ? WHERE key = 'command'", [json.dumps(["python", "eval.py"])])
    con.close()
    r = Gpuscope(tmp_path).run("report", other.name, "--try", path.name)
    assert r.returncode == 0, r.describe()
    assert r.lines_mentioning("warning") == [f"gpuscope: warning: {path.name} tried python train.py, not this "
                                             "report's program (python eval.py); showing it anyway"], r.describe()


def test_reading_the_result_back_gives_what_try_printed(made: tuple[measure.TryResult, Path, Path]) -> None:
    result, path, _ = made
    back = result_file.read(path)
    assert render_text(back) == render_text(result)
    assert try_section.try_data(back, "r.json") == try_section.try_data(result, "r.json")


def _write(name: str, content: str | bytes) -> Any:
    def make(d: Path) -> str:
        (d / name).write_bytes(content if isinstance(content, bytes) else content.encode())
        return name
    return make


def _changed(change: Any) -> Any:
    def make(d: Path) -> str:
        data = json.loads((d / "result.json").read_text())
        change(data)
        (d / "bad.json").write_text(json.dumps(data))
        return "bad.json"
    return make


def _the_report(d: Path) -> str:
    return "train.gpuscope"


@pytest.mark.parametrize(("make", "said"), [
    (_the_report, "train.gpuscope is not a result of gpuscope try --json: it is not UTF-8 text"),
    (_write("findings.json", '{"findings": [], "skipped": []}'),
     "findings.json is not a result of gpuscope try --json: it has no command and fixes"),
    (_write("list.json", "[1, 2]"), "list.json is not a result of gpuscope try --json: the file is a list, not an object"),
    (_write("cut.json", '{"command": ["python"'), "cut.json is not a result of gpuscope try --json: it is not JSON"),
    (_write("deep.json", "[" * 100_000 + "]" * 100_000), "deep.json is not a result of gpuscope try --json: "),
    (_changed(lambda d: d["fixes"][0].update(status="<b>great</b>")),
     "bad.json is not a result of gpuscope try --json: fixes[0].status is '<b>great</b>', not one of measured"),
    (_changed(lambda d: d["fixes"][0]["measured_gain"].update(median=None)),
     "bad.json is not a result of gpuscope try --json: fixes[0].measured_gain.median is null, not a finite number"),
    (_write("nan.json", '{"command": ["python"], "fixes": [], "step_ns": NaN}'), "NaN is not a number JSON allows"),
    (_write("huge.json", '{"command": ["python"], "cwd": "/", "rounds": 1, "fixes": [], '
                         '"budget": {"steps": 1e400, "time_s": 1}}'), "budget.steps is a number out of range"),
    (lambda d: "nowhere.json", "nowhere.json: no such file"),
], ids=["a-report", "findings", "a-list", "cut", "nested", "status", "no-median", "nan", "huge", "missing"])
def test_a_file_that_is_no_try_result_is_one_line_and_exit_2(made: tuple[measure.TryResult, Path, Path],
                                                              make: Any, said: str) -> None:
    _, _, report = made
    name = make(report.parent)
    r = Gpuscope(report.parent).run("report", report.name, "--try", name)
    assert r.returncode == 2 and len(r.stderr_lines) == 1, r.describe()
    assert r.stderr_lines[0].startswith("gpuscope: error: ") and said in r.stderr_lines[0], r.describe()
    assert not (report.parent / "train.html").exists()


def test_a_failure_of_the_sections_own_code_is_gpuscopes_own(made: tuple[measure.TryResult, Path, Path],
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    _, path, report = made
    monkeypatch.delenv("GPUSCOPE_DEBUG", raising=False)

    def broken(*args: object) -> None:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(try_section, "try_data", broken)
    assert main(["report", str(report), "--try", str(path), "-o", str(report.parent / "x.html")]) == 3
    err = capsys.readouterr().err.splitlines()
    assert err == ["gpuscope: internal error: ZeroDivisionError: division by zero; please report it; "
                   "GPUSCOPE_DEBUG=1 shows the traceback"], err


@pytest.mark.slow
def test_the_section_is_on_screen_and_its_names_stay_text(browser: Any, made: tuple[measure.TryResult, Path, Path]) -> None:
    _, path, report = made
    r = Gpuscope(report.parent).run("report", report.name, "--try", path.name)
    assert r.returncode == 0, r.describe()
    p = Page(browser, "try-section")
    try:
        p.page.goto(report.with_suffix(".html").as_uri())
        p.page.wait_for_selector("#tried-table tbody tr", timeout=30_000)
        assert p.page.locator("#tried").is_visible() and p.page.locator("#nav-tried").is_visible()
        names = p.page.locator("#tried-table tbody tr td:first-child").all_text_contents()
        assert names == ["compile", SCRIPT_NAME, "channels_last"]
        assert p.page.evaluate("window.__pwned") is None
        p.shot("tried")
        assert not p.errors, p.errors
    finally:
        p.close()
