"use strict";
// The page: reads its data (one JSON element) and builds each section. In a file every section's
// data is inline; from gpuscope view the analyses arrive from /api/content and the timeline's
// windows from /api/window.
(function () {
  const data = JSON.parse(document.getElementById("gpuscope-data").textContent);
  const $ = id => document.getElementById(id);
  $("title").textContent = data.title;
  document.title = data.title;

  function run(info) {
    const dl = GS.clear($("run-facts"));
    for (const [k, v] of info.facts) dl.append(GS.el("dt", { text: k }), GS.el("dd", { text: v }));
    const ul = GS.clear($("run-notes"));
    for (const w of info.warnings) ul.append(GS.el("li", { class: "warning", text: "Warning: " + w }));
    for (const n of info.not_recorded) ul.append(GS.el("li", { class: "note", text: "Not recorded: " + n }));
    for (const n of info.detail || []) ul.append(GS.el("li", { class: "note", text: n }));
  }

  function diagnosis(d) {
    $("breakdown-source").textContent = "Steps: " + d.step_source;
    if (d.series.length) GS.breakdownChart($("breakdown-chart"), d.series);
    else $("breakdown-chart").parentNode.remove();
    GS.clear($("breakdown-table")).append(GS.table(d.breakdown, true));
    const ol = GS.clear($("findings-list"));
    if (!d.findings.length) ol.append(GS.el("li", { class: "note", text: "No findings." }));
    for (const f of d.findings) {
      const li = GS.el("li", { class: "finding" });
      li.append(GS.el("div", { class: "finding-title", text: f.title }),
        GS.el("div", { class: "finding-meta", text: `saves ${f.saving_text} (${(100 * f.share).toFixed(1)}%${f.one_time ? ", once" : " of the step"}) · ${f.rule}` }));
      const ev = GS.el("ul");
      for (const e of f.evidence) ev.append(GS.el("li", { text: e }));
      li.append(ev, GS.el("div", { class: "finding-where" }, "Where: ", GS.el("span", { text: f.location })));
      if (f.target && GS.timeline) li.lastChild.append(" ", GS.el("button", { type: "button", class: "link", text: "show in timeline",
        onclick: () => { GS.timeline.showSpan(f.target.start, f.target.end); $("timeline").scrollIntoView(); } }));
      li.append(GS.el("div", { class: "finding-fix", text: "Fix: " + f.fix }));
      ol.append(li);
    }
    const sk = GS.clear($("skipped-list"));
    for (const s of d.skipped) sk.append(GS.el("li", { text: `${s.rule}: ${s.reason}` }));
    for (const n of d.notes) sk.append(GS.el("li", { class: "note", text: n }));
  }

  // The fixes gpuscope try measured (gpuscope report --try): its texts, as the terminal gave them.
  function tried(t) {
    $("tried").hidden = false; $("nav-tried").hidden = false;
    const dl = GS.clear($("tried-facts"));
    for (const [k, v] of t.facts) dl.append(GS.el("dt", { text: k }), GS.el("dd", { text: v }));
    GS.clear($("tried-table")).append(GS.table(t.fixes, true));
    const not = GS.clear($("tried-not"));
    if (t.not_tried.length) {
      const ul = GS.el("ul");
      for (const n of t.not_tried) ul.append(GS.el("li", { text: n }));
      not.append(GS.el("p", { text: t.not_tried_title }), ul);
    }
    const lines = GS.clear($("tried-lines"));
    for (const n of t.lines) lines.append(GS.el("li", { class: n.startsWith("Unconfirmed") ? "warning" : "note", text: n }));
  }

  function roofline(r) {
    let chart = null;
    const draw = which => {
      if (chart) chart.destroy();
      const pts = r[which];
      $("roofline-note").textContent = r.left_out ? r.left_out : pts.length ? `${r.device}: ${pts.length} points; hover a point for its numbers.`
        : `${r.device}: no ${which} with FLOPs to place (record with --trace torch-shapes or torch-ops).`;
      $("roofline-chart").parentNode.style.display = pts.length ? "" : "none";
      chart = pts.length ? GS.rooflineChart($("roofline-chart"), r, which) : null;
    };
    document.querySelectorAll("input[name=roof-by]").forEach(i => i.addEventListener("change", () => draw(i.value)));
    draw("kernels");
  }

  function tables(list) {
    const box = GS.clear($("tables-list"));
    list.forEach((t, i) => box.append(GS.table(t, i === 0)));
  }

  function content(c) {
    if (c.lazy) {  // a large report whose analyses were never computed: on request
      const go = GS.el("button", { type: "button", id: "compute-analyses", text: "Compute them now" });
      go.addEventListener("click", () => {
        go.disabled = true; go.textContent = "Computing (minutes on a report this large)…";
        fetch("/api/content?compute=1").then(r => r.json()).then(content)
          .catch(e => { go.textContent = "failed: " + e.message; });
      });
      GS.clear($("run-facts")).append(GS.el("p", { class: "note", text: c.lazy }), go);
      return;
    }
    if (c.too_large) {
      for (const id of ["run-facts", "findings-list", "tables-list"]) GS.clear($(id)).append(GS.el("p", { class: "note", text: c.too_large }));
      if (c.run) run(c.run);
      return;
    }
    run(c.run); diagnosis(c.diagnosis); if (c.tried) tried(c.tried); roofline(c.roofline); tables(c.tables);
    if (c.steps && !tl.steps_found) {  // found with the analyses, where the index left them out
      GS.timeline.meta.steps = c.steps; GS.timeline.draw();
      $("tl-note").textContent = $("tl-note").textContent.replace(STEPS_LATER, "");
    }
  }

  const tl = data.timeline;
  const panels = { details: $("tl-details"), summary: $("tl-summary"), note: $("tl-note"), searchResult: $("tl-search-result") };
  const source = data.mode === "server" ? new GS.ServerSource() : new GS.StaticSource(tl);
  if (data.mode !== "server") {
    const bucketed = new Set(tl.static.lanes.filter(l => l.kind === "buckets").map(l => l.lane));
    const rows = tl.tracks.filter(t => t.lanes.some(l => bucketed.has(l))).map(t => `${t.group}: ${t.label}`);
    const named = rows.length > 12 ? rows.slice(0, 12).join("; ") + `; and ${rows.length - 12} more` : rows.join("; ");
    $("tl-note").textContent = bucketed.size ? `${bucketed.size} of ${tl.lanes.length} lanes are drawn at a fixed level of detail in this file (one bucket per 1/${tl.static.px} of the run), in these rows: ${named}. gpuscope view shows every slice.` : "";
  }
  const STEPS_LATER = " Steps are marked once the analyses of this large report are done.";
  if (!tl.steps_found) $("tl-note").textContent += data.mode === "server" ? STEPS_LATER
    : " Steps are not marked: the report has too many GPU operations to look for them here.";
  const probed = new Set((tl.probe_steps || []).map(s => s.step)).size;
  if (probed) $("tl-note").textContent += ` Grey bands: the ${probed} steps of the overhead probe, run with collection off to time the program without the profiler (nothing recorded in them).`;
  GS.timeline = new GS.Timeline($("tl-view"), $("tl-canvas"), tl, source, panels);
  // From the server, the other sections are asked for once the timeline is first drawn: the view
  // on screen comes first, then the tables (their building would hold up its drawing).
  const firstDrawn = new Promise(resolve => { GS.timeline.onFirst = resolve; });
  $("tl-search").addEventListener("keydown", e => { if (e.key === "Enter") GS.timeline.find(e.target.value.trim()); });
  $("tl-reset").addEventListener("click", () => GS.timeline.setView(0, GS.timeline.span));

  if (data.content) content(data.content);
  else firstDrawn.then(() => fetch("/api/content")).then(r => r.json()).then(content)
    .catch(e => { $("run-facts").textContent = "could not load: " + e.message; });
})();
