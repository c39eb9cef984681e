"""What bench/diagnosis.py compares: measured gains of candidate fixes against the diagnosis's findings.

Pure functions on plain data (the timing rows and the findings as dicts), so that the comparison
can be tested without a GPU and re-run on kept reports.

- A fix's **measured gain** is ``1 - fix / as written`` per sample (per iteration unless the fix
  changes the work of an iteration), taken within each round and summarized by the median over
  rounds (and its range): rounds are interleaved, so slow drifts of the machine cancel.
- The **best fix** is the one with the largest gain, among the fixes the diagnosis ranks with the
  others: a work-changing fix (a larger batch) is ranked apart unless a finding of its rules
  appears in the main ranking (``work_changing`` false).
- The **top finding** is the first finding that is neither advisory nor work-changing (nor
  one-time, where the fixes are measured per iteration).
- A fix's **estimate** is the sum of the shares of those findings whose rule the fix maps to (the
  diagnosis charges each idle piece to one rule, so shares of different rules add up).
- **Within ±30%**: ``|estimate / measured - 1| <= 0.3``; a gain under 5% counts as none, and then
  the estimate must be under 5% too.
- A program declared **nothing to fix** passes when no finding of the main ranking exceeds 5%
  (unless a candidate measured more than 5%: then it is judged as any other program).
"""

from __future__ import annotations

import statistics
from typing import Any

TOLERANCE = 0.30  # relative: estimate against measured gain
NOTHING = 0.05  # a gain or a share under this is nothing to fix


def work_changing(finding: Any) -> bool:
    """Whether a finding proposes changing the work of a step (a larger batch): ranked apart.

    Reads the ``work_changing`` attribute of a diagnosis Finding (False where it has none), or the
    key of a finding as a dict.
    """
    if isinstance(finding, dict):
        return bool(finding.get("work_changing", False))
    return bool(getattr(finding, "work_changing", False))


def finding_row(finding: Any) -> dict[str, Any]:
    """A diagnosis Finding as the plain data the comparison reads."""
    return {
        "rule": finding.rule,
        "title": finding.title,
        "share": round(float(finding.share), 4),
        "saving_ns": int(round(float(finding.saving_ns))),
        "one_time": bool(finding.one_time),
        "advisory": bool(finding.advisory),
        "work_changing": work_changing(finding),
        "location": str(finding.location),
        "evidence": list(finding.evidence),
    }


def main_ranking(findings: list[dict[str, Any]], one_time: bool = False) -> list[dict[str, Any]]:
    """The findings ranked with each other: not advisory, not work-changing, one-time only if ``one_time``."""
    return [f for f in findings if not f["advisory"] and not work_changing(f) and (one_time or not f["one_time"])]


def fix_gains(variants: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per candidate fix: its measured gain per sample against the variant as written.

    ``variants``: name -> {as_written, rules, work_changing, samples_per_iteration, round_s, ...};
    variants without ``round_s`` (not run) are left out. Returns dicts with the gain (median over
    rounds of the per-round gain), its range, and the median seconds per iteration of both.
    """
    ran = {k: v for k, v in variants.items() if v.get("round_s")}
    base = next((v for v in ran.values() if v.get("as_written")), None)
    if base is None:
        return []
    out = []
    for name, v in ran.items():
        if v is base:
            continue
        per_round = [1 - (f / v.get("samples_per_iteration", 1)) / (b / base.get("samples_per_iteration", 1))
                     for f, b in zip(v["round_s"], base["round_s"])]
        out.append({
            "name": name,
            "rules": list(v.get("rules", [])),
            "work_changing": bool(v.get("work_changing", False)),
            "gain": statistics.median(per_round),
            "gain_min": min(per_round),
            "gain_max": max(per_round),
            "median_s": statistics.median(v["round_s"]),
            "as_written_median_s": statistics.median(base["round_s"]),
            "spread": v.get("spread"),
        })
    return out


def estimate(rules: list[str], ranked: list[dict[str, Any]]) -> tuple[float, list[str]]:
    """The summed share of the findings (of ``ranked``) whose rule is in ``rules``, and those rules."""
    hits = [f for f in ranked if f["rule"] in rules]
    return sum(f["share"] for f in hits), sorted({f["rule"] for f in hits})


def within(est: float | None, measured: float | None, tolerance: float = TOLERANCE) -> bool | None:
    """Whether the estimate is within ``tolerance`` (relative) of the measured gain; None without both."""
    if est is None or measured is None:
        return None
    if measured < NOTHING:
        return est < NOTHING
    return abs(est / measured - 1) <= tolerance + 1e-9  # the bound itself counts as within


def compare(variants: dict[str, dict[str, Any]], findings: list[dict[str, Any]], nothing_to_fix: bool = False,
            one_time: bool = False) -> dict[str, Any]:
    """Compare the measured fixes with the findings; return the verdict and its parts (see the module doc)."""
    ranked = main_ranking(findings, one_time)
    apart_ranked = [f for f in findings if not f["advisory"] and work_changing(f)]
    fixes = fix_gains(variants)
    for fx in fixes:
        in_main = any(f["rule"] in fx["rules"] for f in ranked)
        fx["ranked_apart"] = fx["work_changing"] and not in_main
        fx["estimate"], fx["matched_rules"] = estimate(fx["rules"], apart_ranked if fx["ranked_apart"] else ranked)
        fx["within"] = within(fx["estimate"], fx["gain"])
    candidates = [fx for fx in fixes if not fx["ranked_apart"]]
    best = max(candidates, key=lambda fx: fx["gain"]) if candidates else None
    top = ranked[0] if ranked else None
    named = [fx for fx in candidates if top and top["rule"] in fx["rules"]]
    top_fix = max(named, key=lambda fx: fx["gain"]) if named else None
    over = [f for f in ranked if f["share"] > NOTHING]
    expect_nothing = nothing_to_fix and (best is None or best["gain"] <= NOTHING)
    doc: dict[str, Any] = {
        "fixes": fixes,
        "best_fix": best["name"] if best else None,
        "best_gain": best["gain"] if best else None,
        "top_rule": top["rule"] if top else None,
        "top_share": top["share"] if top else None,
        "top_title": top["title"] if top else None,
        "top_fix": top_fix["name"] if top_fix else None,
        "top_fix_gain": top_fix["gain"] if top_fix else None,
        "rank": next((i for i, f in enumerate(ranked, 1) if best and f["rule"] in best["rules"]), None),
        "estimate": best["estimate"] if best else None,
        "measured": best["gain"] if best else None,
        "ratio": best["estimate"] / best["gain"] if best and best["gain"] > 0 else None,
        "within": best["within"] if best else None,
        "expect_nothing": expect_nothing,
        "over_5": [{"rule": f["rule"], "share": f["share"]} for f in over],
    }
    if expect_nothing:
        doc["pass"] = not over
        doc["why"] = "no finding over 5%" if not over else f"{over[0]['rule']} at {over[0]['share']:.0%}"
    elif best is None:
        doc["pass"], doc["why"] = False, "no candidate fix was measured"
    elif top is None:
        doc["pass"], doc["why"] = False, "no finding"
    elif top["rule"] not in best["rules"]:
        doc["pass"] = False
        doc["why"] = f"top finding {top['rule']} does not name the best fix {best['name']}"
    else:
        doc["pass"] = bool(best["within"])
        doc["why"] = "top finding names the best fix" + ("" if best["within"] else ", estimate off by more than 30%")
    return doc


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def _ms(v: float | None) -> str:
    return "-" if v is None else (f"{v * 1e3:.3f} ms" if v < 1 else f"{v:.2f} s")


def _yes(v: bool | None) -> str:
    return "-" if v is None else ("yes" if v else "**no**")


def markdown(rows: list[dict[str, Any]], device: str, trace: str) -> str:
    """The tables for bench/RESULTS.md: one line per program, then every candidate fix."""
    lines = [
        f"Device: {device}. Reports traced with `-t {trace}`. Measured: 1 - fix / as written per sample, "
        "untraced, median over interleaved rounds (range in brackets); estimated: the summed share of the "
        "findings whose rule names the fix; top finding: the first that is not advisory, work-changing or "
        "(for per-iteration fixes) one-time.",
        "",
        "| program | what it is | best fix measured | top finding | estimate | measured | within ±30% | pass |",
        "| --- | --- | --- | --- | ---: | ---: | --- | --- |",
    ]
    for r in rows:
        c = r.get("comparison") or {}
        best = next((fx for fx in c.get("fixes", []) if fx["name"] == c.get("best_fix")), None)
        if best:
            fix = (f"`{best['name']}` {_pct(best['gain'])} ({_pct(best['gain_min'])} to {_pct(best['gain_max'])}); "
                   f"{_ms(best['as_written_median_s'])} → {_ms(best['median_s'])}")
        else:
            fix = "-"
        if c.get("expect_nothing"):
            fix = "nothing to fix" + (f"; {fix}" if best else "")
        top = f"`{c['top_rule']}` {_pct(c.get('top_share'))}" if c.get("top_rule") else "none"
        within_text = "-" if c.get("expect_nothing") else _yes(c.get("within"))
        passed = _yes(c.get("pass")) if c else "**not run**"
        lines.append(f"| {r['program']} | {r.get('description', '')} | {fix} | {top} | {_pct(c.get('estimate'))} | "
                     f"{_pct(c.get('measured'))} | {within_text} | {passed} |")
    lines += [
        "",
        "Every candidate fix (work-changing ones per sample; *apart*: ranked apart from the other findings):",
        "",
        "| program | fix | rules | measured | as written → fix | estimate | findings matched | within ±30% |",
        "| --- | --- | --- | ---: | --- | ---: | --- | --- |",
    ]
    for r in rows:
        for fx in (r.get("comparison") or {}).get("fixes", []):
            tag = " (per sample, apart)" if fx["ranked_apart"] else (" (per sample)" if fx["work_changing"] else "")
            lines.append(f"| {r['program']} | `{fx['name']}`{tag} | {', '.join(fx['rules'])} | {_pct(fx['gain'])} "
                         f"({_pct(fx['gain_min'])} to {_pct(fx['gain_max'])}) | {_ms(fx['as_written_median_s'])} → "
                         f"{_ms(fx['median_s'])} | {_pct(fx['estimate'])} | {', '.join(fx['matched_rules']) or '-'} | "
                         f"{_yes(fx['within'])} |")
    return "\n".join(lines) + "\n"
