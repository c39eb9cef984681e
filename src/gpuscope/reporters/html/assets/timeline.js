"use strict";
// The timeline: one canvas that draws only the rows and the time span on screen. Its data comes
// from a source: the file's own (StaticSource: slices, or per-pixel buckets over the whole run) or
// the gpuscope view server (ServerSource: the window on screen, asked for at each zoom and pan).
// Times are ns from the timeline's start. Each answered zoom or pan is timed with performance
// marks: "tl-update" from the change to its drawing, "tl-first-view" from navigation to the first.

GS.StaticSource = class {
  constructor(tl) { this.tl = tl; this.names = tl.names; }
  window() { return Promise.resolve({ ...this.tl.static, counters: this.tl.counters }); }
  // A GPU operation's details come with the file (content.file_details); other slices have none here.
  details(lane, i, h) {
    const d = this.tl.details, per = d && d.lanes[lane], at = per ? per.fields[i] : -1;
    if (at == null || at < 0) return Promise.resolve(null);
    const fields = [["Start", GS.ns(h.start)], ["Duration", GS.ns(h.end - h.start)]];
    for (const [k, v] of d.fields[at]) {
      if (k !== "Correlation") fields.push([k, v]);
      else if (per.correlation[i] != null) fields.push([k, String(per.correlation[i])]);
    }
    return Promise.resolve({ track: h.track.group + " / " + h.track.label, fields, launch: null });
  }
  summary() { return Promise.resolve(null); }
  search(q, lanes) {
    const needle = q.toLowerCase(), wanted = new Set();
    this.names.forEach((n, i) => { if (n.toLowerCase().includes(needle)) wanted.add(i); });
    const matches = []; let total = 0;
    for (const w of this.tl.static.lanes) {
      if (w.kind !== "slices") continue;
      for (let k = 0; k < w.name.length; k++) if (wanted.has(w.name[k])) {
        total++; if (matches.length < 5000) matches.push([w.lane, w.first + k, w.start[k], w.end[k]]);
      }
    }
    matches.sort((a, b) => a[2] - b[2]);
    return Promise.resolve({ total, matches: matches.slice(0, 200) });
  }
};

GS.ServerSource = class {
  constructor(side) { this.side = side; } // side: which report of gpuscope view BASE NEW (0, 1), or none
  async get(path, params) {
    if (this.side != null) params = { ...params, side: this.side };
    const r = await fetch(path + "?" + new URLSearchParams(params));
    if (!r.ok) throw new Error(`${path}: HTTP ${r.status}`);
    return r.json();
  }
  async window(t0, t1, px, signal) {
    const params = { t0: Math.floor(t0), t1: Math.ceil(t1), px, bin: 1 };
    if (this.side != null) params.side = this.side;
    const r = await fetch("/api/window?" + new URLSearchParams(params), { signal });
    if (!r.ok) throw new Error(`/api/window: HTTP ${r.status}`);
    const buf = await r.arrayBuffer(), at = performance.now(), w = GS.decodeWindow(buf);
    performance.measure("tl-decode", { start: at, end: performance.now() });
    return w;
  }
  details(lane, i) { return this.get("/api/slice", { lane, i }); }
  summary(t0, t1) { return this.get("/api/summary", { t0: Math.floor(t0), t1: Math.ceil(t1) }); }
  search(q) { return this.get("/api/search", { q }); }
};

// A window in the server's binary form (reporters/html/window_bin.py): a u32 length, 4 bytes, that
// much JSON (each lane's length as n), then each lane's arrays, each at a multiple of 8 bytes.
GS.decodeWindow = function (buf) {
  const n = new DataView(buf).getUint32(0, true);
  const w = JSON.parse(new TextDecoder().decode(new Uint8Array(buf, 8, n)));
  let at = 8 + n + (8 - (8 + n) % 8) % 8;
  const take = (T, len) => {
    const a = new T(buf, at, len); at += a.byteLength + (8 - a.byteLength % 8) % 8;
    return Array.from(a);
  };
  for (const l of w.lanes) {
    if (l.kind === "slices") { l.start = take(Float64Array, l.n); l.end = take(Float64Array, l.n); }
    else { l.busy = take(Uint16Array, l.n).map(v => v / 1000); l.count = take(Uint32Array, l.n); }
    l.name = take(Int32Array, l.n);
    delete l.n;
  }
  return w;
};

const LANE_H = 15, GROUP_H = 18, COUNTER_H = 30, AXIS_H = 22, LABEL_W = 210, MAX_H = 620;
// A newer view cancels the window in flight, unless views have been cancelling one another for
// this long (a drag, a long wheel zoom): then the one in flight is drawn, so the screen keeps up.
const KEEP_MS = 150;

GS.Timeline = class {
  constructor(view, canvas, meta, source, panels) {
    Object.assign(this, { view, canvas, meta, source, panels });
    this.ctx = canvas.getContext("2d");
    this.names = new Map();
    (meta.names || []).forEach((n, i) => this.names.set(i, n));
    this.span = Math.max(meta.end_ns - meta.start_ns, 1);
    this.t0 = 0; this.t1 = this.span; this.scrollY = 0;
    this.uid = GS.Timeline.count = (GS.Timeline.count || 0) + 1; // its performance marks are its own
    this.data = null; this.seq = 0; this.inFlight = false; this.wanted = false; this.first = true;
    this.pending = null; this.cancelling = null; this.colors = new Map();
    this.stats = { drawnSlices: 0, drawnBuckets: 0, updates: 0, requests: 0, cancelled: 0 };
    this.selected = null; this.selection = null; this.search = null;
    this.layout();
    this.bind();
    new ResizeObserver(() => { this.resize(); this.draw(); }).observe(view);
    this.resize();
    this.changed();
  }

  layout() {
    this.rows = []; let y = 0, group = null;
    for (const t of this.meta.tracks) {
      if (t.group !== group) { group = t.group; this.rows.push({ group, y, h: GROUP_H }); y += GROUP_H; }
      const h = t.kind === "counter" ? COUNTER_H : Math.max(1, t.lanes.length) * LANE_H + 3;
      this.rows.push({ track: t, y, h }); y += h;
    }
    this.contentH = y;
  }

  resize() {
    const dpr = window.devicePixelRatio || 1;
    this.w = this.view.clientWidth || 800;
    this.h = Math.min(this.contentH + AXIS_H, MAX_H);
    this.canvas.width = this.w * dpr; this.canvas.height = this.h * dpr;
    this.canvas.style.height = this.h + "px";
    this.ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    this.plotW = Math.max(this.w - LABEL_W, 10);
  }

  x(t) { return LABEL_W + (t - this.t0) * this.plotW / (this.t1 - this.t0); }
  time(x) { return this.t0 + (x - LABEL_W) * (this.t1 - this.t0) / this.plotW; }

  setView(t0, t1) {
    const minSpan = 100, maxSpan = this.span * 1.2;
    let s = Math.min(Math.max(t1 - t0, minSpan), maxSpan), c = (t0 + t1) / 2;
    c = Math.min(Math.max(c, -this.span * 0.1 + s / 2), this.span * 1.1 - s / 2);
    this.t0 = c - s / 2; this.t1 = c + s / 2;
    this.changed();
  }
  zoom(f, at) { const t = at == null ? (this.t0 + this.t1) / 2 : at; this.setView(t - (t - this.t0) * f, t + (this.t1 - t) * f); }
  pan(frac) { const d = (this.t1 - this.t0) * frac; this.setView(this.t0 + d, this.t1 + d); }
  showSpan(t0, t1) { const m = (t1 - t0) * 0.05; this.setView(t0 - m, t1 + m); }

  changed() {
    this.seq++;
    performance.mark(this.mark(this.seq));
    this.request(); // asked first: the previous answer is redrawn at the new scale while the server works
    this.draw();
    if (this.onChange) this.onChange(this); // another timeline that follows this one
  }

  mark(seq) { return `tl-change-${this.uid}-${seq}`; }

  request() {
    if (this.inFlight) {
      const now = performance.now();
      if (this.cancelling == null) this.cancelling = now;
      if (now - this.cancelling >= KEEP_MS) { this.wanted = true; return; } // asked again once it is drawn
      this.pending.abort(); this.stats.cancelled++; // its answer would be drawn only to be replaced
    }
    const ctl = this.pending = new AbortController();
    this.inFlight = true; this.wanted = false;
    const seq = this.seq, t0 = this.t0, t1 = this.t1, px = Math.round(this.plotW);
    this.stats.requests++;
    const sent = performance.now();
    this.source.window(t0, t1, px, ctl.signal).then(w => {
      if (ctl.signal.aborted) return;
      this.cancelling = null;
      const got = performance.now();
      for (const [k, v] of Object.entries(w.names || {})) this.names.set(Number(k), v);
      w.byLane = new Map(w.lanes.map(l => [l.lane, l]));
      w.byTrack = new Map((w.counters || []).map(c => [c.track, c]));
      this.data = w;
      this.draw();
      this.stats.updates++;
      performance.measure("tl-update", this.mark(seq));
      // where an update's time went: asked and answered (decoded), then drawn
      performance.measure("tl-fetch", { start: sent, end: got });
      performance.measure("tl-draw", { start: got, end: performance.now() });
      if (this.first) {
        this.first = false; performance.measure("tl-first-view", { start: 0, end: performance.now() });
        if (this.onFirst) this.onFirst();
      }
      for (let s = 1; s <= seq; s++) performance.clearMarks(this.mark(s));
    }).catch(e => {
      if (ctl.signal.aborted) return; // superseded: a newer window is asked for
      this.panels.note.textContent = "timeline: " + e.message; if (this.onFirst) this.onFirst();
    }).finally(() => {
      if (this.pending !== ctl) return;
      this.pending = null; this.inFlight = false;
      if (this.wanted || seq !== this.seq) this.request();
    });
  }

  // The colour of a name (by position), made once: setting a canvas's fillStyle parses its text.
  color(i) {
    let c = this.colors.get(i);
    if (c === undefined) { c = GS.color(this.name(i) || "?"); this.colors.set(i, c); }
    return c;
  }

  name(i) { return i >= 0 ? (this.names.get(i) ?? "?") : ""; }

  draw() {
    const c = this.ctx, W = this.w, H = this.h;
    c.clearRect(0, 0, W, H);
    c.font = "11px system-ui, sans-serif"; c.textBaseline = "middle";
    let slices = 0, buckets = 0;
    const top = AXIS_H - this.scrollY;
    for (const r of this.rows) {
      const y = top + r.y;
      if (y + r.h < AXIS_H || y > H) continue;
      if (r.group) {
        c.fillStyle = "#eef1f4"; c.fillRect(0, y, W, r.h); c.fillStyle = "#1d232a";
        c.font = "bold 11px system-ui, sans-serif"; c.fillText(r.group, 4, y + r.h / 2, W - 8); c.font = "11px system-ui, sans-serif";
        continue;
      }
      c.strokeStyle = "#e6e9ec"; c.beginPath(); c.moveTo(0, y + r.h - 0.5); c.lineTo(W, y + r.h - 0.5); c.stroke();
      c.save(); c.beginPath(); c.rect(LABEL_W, y, this.plotW, r.h); c.clip();
      if (this.data) {
        if (r.track.kind === "counter") this.drawCounter(r, y);
        else for (const id of r.track.lanes) {
          const w = this.data.byLane.get(id); if (!w) continue;
          const ly = y + 1 + this.meta.lanes[id].depth * LANE_H;
          if (w.kind === "slices") slices += this.drawSlices(w, ly); else buckets += this.drawBuckets(w, ly);
        }
      }
      c.restore();
      c.fillStyle = "#fff"; c.fillRect(0, y, LABEL_W - 2, r.h - 1);
      c.fillStyle = "#333"; c.fillText(r.track.label, 8, y + Math.min(r.h, LANE_H + 2) / 2, LABEL_W - 14);
    }
    this.drawAxis();
    this.stats.drawnSlices = slices; this.stats.drawnBuckets = buckets;
  }

  drawSlices(w, y) {
    const c = this.ctx, k = this.plotW / (this.t1 - this.t0);
    let lo = 0, hi = w.end.length;
    while (lo < hi) { const m = (lo + hi) >> 1; if (w.end[m] < this.t0) lo = m + 1; else hi = m; }
    let n = 0, lastX = -1;
    for (let i = lo; i < w.start.length && w.start[i] <= this.t1; i++) {
      const x0 = LABEL_W + (w.start[i] - this.t0) * k, x1 = LABEL_W + (w.end[i] - this.t0) * k;
      if (x1 < lastX + 0.5 && x1 - x0 < 0.5) continue; // many slices in one pixel: drawn once
      const sel = this.selected && this.selected.lane === w.lane && this.selected.i === w.first + i;
      c.fillStyle = sel ? "#ff9800" : this.color(w.name[i]);
      const xa = Math.max(x0, LABEL_W - 1), width = Math.max(1, Math.min(x1, this.w) - xa);
      c.fillRect(xa, y, width, LANE_H - 2);
      if (width > 28) { c.fillStyle = "#111"; c.fillText(this.name(w.name[i]), xa + 2, y + LANE_H / 2 - 1, width - 4); }
      lastX = Math.max(x1, x0 + 1); n++;
    }
    return n;
  }

  // Where a lane's buckets lie: their own grid (from the server: t0, step), else the window's pixels.
  grid(w) {
    const d = this.data;
    return w.step ? [w.t0, w.step] : [d.t0, (d.t1 - d.t0) / d.px];
  }

  drawBuckets(w, y) {
    const c = this.ctx, [wt0, step] = this.grid(w), k = this.plotW / (this.t1 - this.t0);
    const i0 = Math.max(0, Math.floor((this.t0 - wt0) / step)), i1 = Math.min(w.busy.length, Math.ceil((this.t1 - wt0) / step));
    let n = 0, last = null;
    for (let i = i0; i < i1; i++) {
      if (!w.count[i] && !w.busy[i]) continue;
      const x0 = LABEL_W + (wt0 + i * step - this.t0) * k, color = this.color(w.name[i]);
      if (color !== last) { c.fillStyle = color; last = color; }
      c.globalAlpha = 0.3 + 0.7 * w.busy[i];
      const h = Math.max(2, (LANE_H - 2) * Math.max(w.busy[i], 0.15));
      c.fillRect(x0, y + (LANE_H - 2 - h), Math.max(1, step * k), h);
      n++;
    }
    c.globalAlpha = 1;
    return n;
  }

  drawCounter(r, y) {
    const s = this.data.byTrack.get(r.track.id); if (!s || !s.t.length) return;
    const c = this.ctx, vals = (s.hi || s.v).filter(v => v != null), max = Math.max(...vals, 0) || 1;
    const yy = v => y + r.h - 3 - (r.h - 6) * (v / max);
    c.strokeStyle = "#3a7bd5"; c.fillStyle = "rgba(58,123,213,0.15)"; c.beginPath();
    let started = false;
    for (let i = 0; i < s.t.length; i++) {
      if (s.v[i] == null) continue;
      const x0 = this.x(s.t[i]), x1 = i + 1 < s.t.length ? this.x(s.t[i + 1]) : this.x(this.t1);
      if (!started) { c.moveTo(x0, yy(s.v[i])); started = true; } else c.lineTo(x0, yy(s.v[i]));
      c.lineTo(x1, yy(s.v[i]));
    }
    c.stroke();
    c.fillStyle = "#555"; c.fillText("max " + max.toPrecision(3), LABEL_W + 4, y + 8);
  }

  drawAxis() {
    const c = this.ctx;
    c.fillStyle = "#f6f8fa"; c.fillRect(0, 0, this.w, AXIS_H);
    const span = this.t1 - this.t0, raw = span / (this.plotW / 110), p = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map(m => m * p).find(s => s >= raw);
    c.fillStyle = "#333"; c.strokeStyle = "#ccd"; c.font = "10px system-ui, sans-serif";
    for (let t = Math.ceil(this.t0 / step) * step; t <= this.t1; t += step) {
      const x = this.x(t); c.beginPath(); c.moveTo(x, AXIS_H - 6); c.lineTo(x, this.h); c.stroke();
      c.fillText(GS.ns(t), x + 2, 7);
    }
    // the overhead probe's steps ran with collection off: a grey band where nothing was recorded, not a gap
    const probe = (this.meta.probe_steps || []).filter(s => s.end >= this.t0 && s.start <= this.t1);
    for (const s of probe) {
      const a = Math.max(this.x(s.start), LABEL_W), b = Math.min(this.x(s.end), this.w);
      if (b <= a) continue;
      c.fillStyle = "rgba(140,140,140,0.16)"; c.fillRect(a, AXIS_H - 8, b - a, this.h - AXIS_H + 8);
      c.strokeStyle = "rgba(110,110,110,0.55)";
      c.beginPath(); c.moveTo(a, AXIS_H - 8); c.lineTo(a, this.h); c.stroke();
      const label = `step ${s.step}: ${s.what}`;
      if (c.measureText(label).width + 4 < b - a) { c.fillStyle = "#666"; c.fillText(label, a + 2, AXIS_H - 5); }
    }
    const steps = (this.meta.steps || []).filter(s => s.end >= this.t0 && s.start <= this.t1);
    const dense = steps.length * 6 > this.plotW; // too many to draw apart: marks on the axis only
    let labels = 0;
    for (const s of steps) {
      const x = this.x(s.start); c.strokeStyle = "rgba(120,60,200,0.45)";
      c.beginPath(); c.moveTo(x, AXIS_H - 8); c.lineTo(x, dense ? AXIS_H : this.h); c.stroke();
      if (!dense && labels++ < 100 && this.x(s.end) - x > 40) { c.fillStyle = "#6a3cc8"; c.fillText("step " + s.step, x + 2, AXIS_H - 5); }
    }
    if (this.selection) {
      const a = this.x(Math.min(...this.selection)), b = this.x(Math.max(...this.selection));
      c.fillStyle = "rgba(31,111,235,0.15)"; c.fillRect(a, AXIS_H, b - a, this.h - AXIS_H);
    }
    c.fillStyle = "#f6f8fa"; c.fillRect(0, 0, LABEL_W, AXIS_H);
    c.fillStyle = "#333"; c.fillText(GS.ns(span) + " shown", 6, AXIS_H / 2);
  }

  hit(x, y) {
    const cy = y - AXIS_H + this.scrollY;
    const r = this.rows.find(r => r.track && cy >= r.y && cy < r.y + r.h);
    if (!r || r.track.kind === "counter" || !this.data || x < LABEL_W) return null;
    const lane = r.track.lanes[Math.floor((cy - r.y - 1) / LANE_H)];
    const w = lane == null ? null : this.data.byLane.get(lane);
    if (!w) return null;
    const t = this.time(x), tol = 2 * (this.t1 - this.t0) / this.plotW;
    if (w.kind === "buckets") {
      const [wt0, step] = this.grid(w), i = Math.floor((t - wt0) / step);
      if (i < 0 || i >= w.busy.length || (!w.count[i] && !w.busy[i])) return null;
      return { bucket: true, lane, t0: wt0 + i * step, t1: wt0 + (i + 1) * step,
               busy: w.busy[i], count: w.count[i], name: this.name(w.name[i]), track: r.track };
    }
    let best = -1, dist = Infinity;
    for (let k = 0; k < w.start.length; k++) {
      if (w.start[k] > t + tol) break;
      const d = t < w.start[k] ? w.start[k] - t : t > w.end[k] ? t - w.end[k] : 0;
      if (d <= tol && d < dist) { dist = d; best = k; }
    }
    if (best < 0) return null;
    return { lane, i: w.first + best, start: w.start[best], end: w.end[best], name: this.name(w.name[best]), track: r.track };
  }

  select(h) {
    const p = GS.clear(this.panels.details);
    if (!h) { p.append(GS.el("p", { class: "note", text: "Nothing there." })); return Promise.resolve(); }
    if (h.bucket) {
      this.selected = null;
      p.append(GS.el("h3", { text: `${h.count} slices, busy ${(100 * h.busy).toFixed(1)}%` }),
        GS.el("p", { text: "mostly " + (h.name || "-") }),
        GS.el("p", { class: "note", text: `${GS.ns(h.t0)} to ${GS.ns(h.t1)} on ${h.track.label}` }),
        GS.el("button", { type: "button", class: "link", text: "zoom in", onclick: () => this.showSpan(h.t0, h.t1) }));
      this.draw(); return Promise.resolve();
    }
    this.selected = { lane: h.lane, i: h.i };
    this.draw();
    p.append(GS.el("h3", { class: "slice-name", text: h.name }));
    return this.source.details(h.lane, h.i, h).then(d => {
      const rows = d ? d.fields : [["Track", h.track.group + " / " + h.track.label], ["Start", GS.ns(h.start)], ["Duration", GS.ns(h.end - h.start)],
        ["More", "launch, range path and Python line: open the report with gpuscope view"]];
      if (d) rows.unshift(["Track", d.track]);
      const tb = GS.el("table", { class: "data details" });
      for (const [k, v] of rows) tb.append(GS.el("tr", {}, GS.el("th", { text: k }), GS.el("td", { class: "text", text: v })));
      p.append(tb);
      if (d && d.launch) p.append(GS.el("p", { class: "note", text: `launched by ${d.launch.name} on thread ${d.launch.tid}` }));
    }).catch(e => p.append(GS.el("p", { class: "note", text: e.message })));
  }

  summarize(t0, t1) {
    const p = GS.clear(this.panels.summary);
    p.append(GS.el("h3", { text: `${GS.ns(t0)} to ${GS.ns(t1)} (${GS.ns(t1 - t0)})` }));
    return this.source.summary(t0, t1).then(s => {
      if (!s) { p.append(GS.el("p", { class: "note", text: "A span's summary comes from the report: open it with gpuscope view." })); return; }
      const list = (title, rows, fmt) => {
        if (!rows.length) return;
        const tb = GS.el("table", { class: "data" }, GS.el("tr", {}, GS.el("th", { text: title }), GS.el("th", { text: "" })));
        for (const r of rows) tb.append(GS.el("tr", {}, GS.el("td", { class: "text", text: r[0] }), GS.el("td", { text: fmt(r) })));
        p.append(tb);
      };
      list("GPU stream busy", s.busy, r => r[1]);
      list("Top kernels", s.kernels, r => `${r[1]} (${r[2]})`);
      list("Top ranges", s.ranges, r => `${r[1]} (${r[2]})`);
    }).catch(e => p.append(GS.el("p", { class: "note", text: e.message })));
  }

  find(q) {
    const out = this.panels.searchResult;
    if (!q) { out.textContent = ""; return Promise.resolve(); }
    const go = () => {
      const s = this.search;
      if (!s.matches.length) { out.textContent = "no match"; return; }
      const m = s.matches[s.at % s.matches.length];
      out.textContent = `match ${s.at % s.matches.length + 1} of ${s.total}` + (s.total > s.matches.length ? ` (first ${s.matches.length} listed)` : "");
      const span = Math.max((m[3] - m[2]) * 30, 20000);
      this.setView((m[2] + m[3]) / 2 - span / 2, (m[2] + m[3]) / 2 + span / 2);
      this.selected = { lane: m[0], i: m[1] };
      this.draw();
    };
    if (this.search && this.search.q === q) { this.search.at++; go(); return Promise.resolve(); }
    return this.source.search(q).then(s => { this.search = { q, at: 0, ...s }; go(); });
  }

  bind() {
    const v = this.view, cv = this.canvas;
    v.addEventListener("keydown", e => {
      const k = e.key.toLowerCase();
      if (k === "w") this.zoom(0.8, this.mouseT); else if (k === "s") this.zoom(1.25, this.mouseT);
      else if (k === "a") this.pan(-0.2); else if (k === "d") this.pan(0.2); else return;
      e.preventDefault();
    });
    cv.addEventListener("wheel", e => {
      if (e.ctrlKey || e.metaKey) { this.zoom(Math.exp(e.deltaY * 0.002), this.time(e.offsetX)); e.preventDefault(); }
      else if (e.shiftKey) { this.pan(e.deltaY / 1000); e.preventDefault(); }
      else if (this.contentH + AXIS_H > this.h) {
        const max = this.contentH + AXIS_H - this.h, y = Math.min(Math.max(this.scrollY + e.deltaY, 0), max);
        if (y !== this.scrollY) { this.scrollY = y; this.draw(); e.preventDefault(); }
      }
    }, { passive: false });
    let down = null;
    cv.addEventListener("mousemove", e => {
      this.mouseT = e.offsetX > LABEL_W ? this.time(e.offsetX) : null;
      if (!down) return;
      if (down.shift) { this.selection = [down.t, this.time(e.offsetX)]; this.draw(); }
      else if (Math.abs(e.offsetX - down.x) > 2) {
        const d = (down.x - e.offsetX) * (down.t1 - down.t0) / this.plotW;
        this.t0 = down.t0 + d; this.t1 = down.t1 + d; this.changed(); down.moved = true;
      }
    });
    cv.addEventListener("mousedown", e => { v.focus(); down = { x: e.offsetX, t: this.time(e.offsetX), t0: this.t0, t1: this.t1, shift: e.shiftKey }; });
    window.addEventListener("mouseup", e => {
      if (!down) return;
      const d = down; down = null;
      if (d.shift && this.selection && Math.abs(this.x(this.selection[1]) - this.x(this.selection[0])) > 2) {
        this.summarize(Math.min(...this.selection), Math.max(...this.selection));
      } else if (!d.moved && e.target === cv) this.select(this.hit(e.offsetX, e.offsetY));
    });
  }
};
