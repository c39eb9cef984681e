"use strict";
// The page of gpuscope view BASE NEW: the two runs' timelines, one above the other, aligned on a
// step (the n-th after warm-up in each, as gpuscope diff matches steps): both show the same span
// of time from that step's start, and zooming or panning one moves the other alike. Below, the
// comparison from /api/diff as tables.
(function () {
  const data = JSON.parse(document.getElementById("gpuscope-data").textContent);
  const $ = id => document.getElementById(id);
  $("title").textContent = data.title;
  document.title = data.title;

  const note = $("tl-note");
  const timelines = data.timelines.map((meta, k) => {
    $("label-" + k).textContent = (k ? "New: " : "Base: ") + data.labels[k];
    const panels = { details: $("tl-details-" + k), summary: $("tl-details-" + k), note, searchResult: note };
    return new GS.Timeline($("tl-view-" + k), $("tl-canvas-" + k), meta, new GS.ServerSource(k), panels);
  });
  GS.timelines = timelines;
  GS.timeline = timelines[0];

  // Each side's anchor: the start of the aligned step (0 before one is chosen: the runs' starts).
  const anchors = [0, 0], warmup = [0, 0];
  let following = false;
  timelines.forEach((tl, k) => {
    tl.onChange = () => {
      if (following) return;
      following = true;
      const other = timelines[1 - k];
      other.t0 = anchors[1 - k] + (tl.t0 - anchors[k]);
      other.t1 = anchors[1 - k] + (tl.t1 - anchors[k]);
      other.changed();
      following = false;
    };
  });

  // The steps of each run's first process, in order.
  const steps = data.timelines.map(meta => {
    const all = meta.steps || [];
    return all.length ? all.filter(s => s.pid === all[0].pid) : [];
  });

  GS.showStep = function (n) {
    const picked = [0, 1].map(k => steps[k][warmup[k] + n - 1]);
    if (picked.some(s => !s)) {
      $("diff-step-note").textContent = `no step ${n} after warm-up in ${picked[0] ? "the new run" : "the base run"}`;
      return false;
    }
    anchors[0] = picked[0].start; anchors[1] = picked[1].start;
    const d = picked.map(s => s.end - s.start), span = Math.max(...d);
    $("diff-step-note").textContent = `step ${picked[0].step} of the base run (${GS.ns(d[0])}) beside step ${picked[1].step} of the new run (${GS.ns(d[1])})`;
    timelines[0].setView(anchors[0] - 0.02 * span, anchors[0] + 1.02 * span);
    return true;
  };
  $("diff-step").addEventListener("change", e => GS.showStep(Math.max(1, Number(e.target.value) || 1)));
  $("diff-whole").addEventListener("click", () => {
    anchors[0] = anchors[1] = 0;
    $("diff-step-note").textContent = "both runs from their start";
    timelines[0].setView(0, Math.max(timelines[0].span, timelines[1].span));
  });
  if (!steps[0].length || !steps[1].length) note.textContent = "A run without steps: the timelines are aligned at their starts.";

  function comparison(c) {
    const head = GS.clear($("diff-head"));
    if (c.error) { head.append(GS.el("p", { class: "warning", text: "The comparison failed: " + c.error })); return; }
    for (const line of c.head) head.append(GS.el("p", { text: line }));
    for (const w of c.warnings) head.append(GS.el("p", { class: "warning", text: "Warning: " + w }));
    const attr = GS.clear($("diff-attribution"));
    attr.append(GS.el("li", { class: "attribution", text: "Attribution: " + c.attribution.join("; ") }));
    const lines = GS.clear($("diff-lines"));
    for (const l of c.lines) lines.append(GS.el("li", { text: l }));
    const box = GS.clear($("diff-tables"));
    c.tables.forEach((t, i) => box.append(GS.table(t, i < 2)));
    if (!c.tables.length) box.append(GS.el("p", { class: "note", text: "Nothing to compare per step: no step parts, layers, program lines, kernels or operators." }));
    warmup[0] = c.sides[0].warmup_steps || 0; warmup[1] = c.sides[1].warmup_steps || 0;
    if (steps[0].length && steps[1].length) GS.showStep(1);
    GS.compared = true;
  }
  fetch("/api/diff").then(r => r.json()).then(comparison)
    .catch(e => { GS.clear($("diff-head")).append(GS.el("p", { class: "warning", text: "could not load: " + e.message })); });
})();
