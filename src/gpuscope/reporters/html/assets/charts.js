"use strict";
// Charts drawn by Chart.js (vendored): the step-time breakdown and the roofline.
GS.PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];
GS.breakdownChart = function (canvas, series) {
  const parts = [];
  for (const s of series) for (const p of s.parts) if (!parts.includes(p[0])) parts.push(p[0]);
  const labels = series.map(s => "process " + s.pid);
  const datasets = parts.map(part => ({
    label: part,
    backgroundColor: GS.PALETTE[parts.indexOf(part) % GS.PALETTE.length],
    data: series.map(s => { const p = s.parts.find(q => q[0] === part); return p ? p[2] / 1e6 : 0; }),
    texts: series.map(s => { const p = s.parts.find(q => q[0] === part); return p ? p[1] : ""; }),
  }));
  return new Chart(canvas, {
    type: "bar",
    data: { labels, datasets },
    options: {
      indexAxis: "y", responsive: true, maintainAspectRatio: false, animation: false,
      scales: { x: { stacked: true, title: { display: true, text: "ms per step" } }, y: { stacked: true } },
      plugins: { tooltip: { callbacks: { label: c => `${c.dataset.label}: ${c.dataset.texts[c.dataIndex]}` } } },
    },
  });
};

GS.BOUND_COLORS = { compute: "#d62728", memory: "#1f77b4", latency: "#7f7f7f", unknown: "#bcbd22" };

GS.rooflineChart = function (canvas, roof, which) {
  const points = roof[which];
  const bws = roof.roofs.filter(r => r.kind === "bandwidth");
  const peaks = roof.roofs.filter(r => r.kind === "flops");
  const top = Math.max(...peaks.map(p => p.value), ...points.map(p => p.y), 1);
  const slowest = bws.length ? Math.min(...bws.map(b => b.value)) : 0;
  const ridge = slowest ? top / slowest : 100;
  const xs = points.map(p => p.x).concat([ridge]);
  const x0 = Math.pow(10, Math.floor(Math.log10(Math.min(...xs) / 4)));
  const x1 = Math.pow(10, Math.ceil(Math.log10(Math.max(...xs) * 10)));
  const dram = (bws.find(b => b.key === "dram") || bws[0] || { value: 0 }).value;
  const datasets = [];
  for (const b of bws) datasets.push({ type: "line", label: `${b.label} ${b.text}`, data: [{ x: x0, y: b.value * x0 }, { x: top / b.value, y: top }],
    borderColor: "#222", borderWidth: b.key === "dram" ? 1.5 : 1, borderDash: b.key === "dram" ? [] : [5, 4], pointRadius: 0, roof: true });
  for (const p of peaks) datasets.push({ type: "line", label: `${p.label} ${p.text}`, data: [{ x: dram ? p.value / dram : x0, y: p.value }, { x: x1, y: p.value }],
    borderColor: "#555", borderWidth: 1, borderDash: p.key.startsWith("tensor") ? [] : [2, 3], pointRadius: 0, roof: true });
  const total = points.reduce((a, p) => a + p.time_ns, 0) || 1;
  for (const bound of Object.keys(GS.BOUND_COLORS)) {
    const mine = points.filter(p => p.bound === bound);
    if (!mine.length) continue;
    datasets.push({ type: "scatter", label: bound + " bound", data: mine, backgroundColor: GS.BOUND_COLORS[bound] + "99",
      borderColor: "#000", borderWidth: 0.5, pointRadius: mine.map(p => 3 + 14 * Math.sqrt(p.time_ns / total)) });
  }
  return new Chart(canvas, {
    data: { datasets },
    options: {
      responsive: true, maintainAspectRatio: false, animation: false, parsing: { xAxisKey: "x", yAxisKey: "y" },
      scales: { x: { type: "logarithmic", min: x0, max: x1, ticks: { callback: GS.logTick },
                     title: { display: true, text: "Arithmetic intensity (FLOP/byte)" } },
                y: { type: "logarithmic", max: top * 3, ticks: { callback: GS.logTick },
                     title: { display: true, text: "Performance (FLOP/s)" } } },
      plugins: {
        legend: { position: "right" },
        tooltip: {
          filter: c => !c.dataset.roof,
          callbacks: {
            title: items => items.length ? items[0].raw.name : "",
            label: c => { const p = c.raw; return [p.layer && p.layer !== p.name ? "layer: " + p.layer : null,
              "performance: " + p.flops_text, "intensity: " + p.intensity_text, "bound: " + p.bound,
              "time: " + p.time_text + " in " + p.kernels + " launches", "efficiency: " + p.efficiency_text].filter(Boolean); },
          },
        },
      },
    },
  });
};
