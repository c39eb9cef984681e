"use strict";
// Helpers shared by the page's scripts. Every name from a report reaches the page through el()'s
// textContent or a canvas's fillText: text, never markup.
const GS = window.GS = {};

GS.el = function (tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k === "text") node.textContent = v;
    else if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) if (c != null) node.append(c instanceof Node ? c : String(c));
  return node;
};

// A duration for axis ticks and labels (as the text reports write it: three significant digits).
GS.ns = function (ns) {
  const a = Math.abs(ns), trim = s => s.includes(".") ? s.replace(/0+$/, "").replace(/\.$/, "") : s;
  if (a < 1e3) return ns.toFixed(0) + " ns";
  if (a < 1e6) return trim((ns / 1e3).toPrecision(3)) + " µs";
  if (a < 1e9) return trim((ns / 1e6).toPrecision(3)) + " ms";
  return (ns / 1e9).toFixed(3) + " s";
};

// A number with an SI prefix, for the ticks of a logarithmic axis: 5e14 -> "500 T", 0.01 -> "0.01".
GS.si = function (v) {
  const trim = s => String(Number(s));
  for (const [scale, prefix] of [[1e18, "E"], [1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]])
    if (Math.abs(v) >= scale) return trim((v / scale).toPrecision(3)) + " " + prefix;
  return trim(v.toPrecision(3));
};

// Tick labels of a logarithmic axis: powers of ten only (the ticks between them stay, unlabelled, so
// that long labels never overlap), with SI prefixes.
GS.logTick = function (value) {
  const e = Math.log10(value);
  return Math.abs(e - Math.round(e)) < 1e-9 ? GS.si(value) : "";
};

// A stable colour per name.
GS.color = function (name, alpha) {
  let h = 2166136261;
  for (let i = 0; i < name.length; i++) { h ^= name.charCodeAt(i); h = Math.imul(h, 16777619); }
  const hue = ((h >>> 0) % 360);
  return `hsla(${hue}, 55%, ${52 + ((h >>> 9) % 14)}%, ${alpha == null ? 1 : alpha})`;
};

GS.clear = function (node) { while (node.firstChild) node.removeChild(node.firstChild); return node; };
