"use strict";
// Sortable, filterable tables of the analyses: each cell is [raw value, text]; sort by raw value,
// filter by text, show text.
GS.MAX_ROWS = 1000;

GS.table = function (t, open) {
  const numeric = t.columns.map(c => c.unit !== "text");
  const box = GS.el("details", { class: "table", id: "table-" + t.name });
  if (open) box.open = true;
  box.append(GS.el("summary", { text: `${t.title} (${t.name}, ${t.rows.length} rows)` }));
  const filter = GS.el("input", { type: "search", class: "table-filter", placeholder: "Filter rows", "aria-label": "filter " + t.name });
  const count = GS.el("span", { class: "note" });
  const table = GS.el("table", { class: "data" });
  const head = GS.el("tr");
  const body = GS.el("tbody");
  let sortCol = -1, sortDir = 1;
  t.columns.forEach((c, i) => {
    const th = GS.el("th", { text: c.label, title: "sort by " + c.label });
    th.addEventListener("click", () => {
      sortDir = sortCol === i ? -sortDir : (numeric[i] ? -1 : 1);
      sortCol = i;
      head.querySelectorAll("th").forEach(h => h.classList.remove("sorted-asc", "sorted-desc"));
      th.classList.add(sortDir > 0 ? "sorted-asc" : "sorted-desc");
      draw();
    });
    head.append(th);
  });
  table.append(GS.el("thead", {}, head), body);
  function draw() {
    const q = filter.value.trim().toLowerCase();
    let rows = q ? t.rows.filter(r => r.some(c => String(c[1]).toLowerCase().includes(q))) : t.rows.slice();
    if (sortCol >= 0) {
      const i = sortCol;
      rows.sort((a, b) => {
        const x = a[i][0], y = b[i][0];
        if (x == null) return 1; if (y == null) return -1;
        return (typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y))) * sortDir;
      });
    }
    GS.clear(body);
    for (const r of rows.slice(0, GS.MAX_ROWS)) {
      const tr = GS.el("tr");
      r.forEach((c, i) => tr.append(GS.el("td", { class: numeric[i] ? "num" : "text", text: c[1] })));
      body.append(tr);
    }
    count.textContent = rows.length > GS.MAX_ROWS ? ` first ${GS.MAX_ROWS} of ${rows.length} rows shown; filter to narrow`
      : (q ? ` ${rows.length} of ${t.rows.length} rows` : "");
  }
  filter.addEventListener("input", draw);
  box.append(GS.el("div", {}, filter, count));
  for (const n of t.notes) box.append(GS.el("p", { class: "note", text: n }));
  box.append(table);
  draw();
  return box;
};
