"""The explorer page's HTML, style and script (``minidtr.explorer`` fills in the data).

Everything is inline: the page opens from a file with no network. ``window.explorer``
exposes the selection and the geometry of the marks, for the browser tests.
"""

from .explorer_lane import LANE_SCRIPT, LANE_STYLE

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 0 16px 24px; color: #222; }
h1 { font-size: 18px; margin: 12px 0 2px; }
h2 { font-size: 16px; margin: 4px 0 6px; }
#meta, .help, .muted { color: #555; font-size: 13px; }
#chartbox { position: relative; margin-top: 8px; }
#chart { width: 100%; height: 330px; display: block; cursor: crosshair;
  border: 1px solid #ddd; border-radius: 4px; }
#hover { position: absolute; right: 12px; top: 6px; font-size: 12px; color: #333;
  background: rgba(255,255,255,.85); padding: 1px 4px; pointer-events: none; }
#controls { margin: 6px 0; display: flex; gap: 6px; flex-wrap: wrap; align-items: center; }
button { font: inherit; font-size: 13px; padding: 2px 8px; }
#main { display: grid; grid-template-columns: minmax(0, 4fr) minmax(0, 3fr); gap: 16px;
  margin-top: 8px; align-items: start; }
#details, #nearby { border: 1px solid #ddd; border-radius: 4px; padding: 8px 10px;
  overflow-x: auto; }
#nearby table { font-size: 12px; }
#nearby td, #nearby th { padding: 1px 4px; }
table { border-collapse: collapse; font-size: 13px; }
td, th { padding: 2px 6px; text-align: right; white-space: nowrap; }
th { border-bottom: 1px solid #ccc; }
td.l, th.l { text-align: left; }
tr.victim td { background: #fde2e1; font-weight: 600; }
tr.runner td { background: #fff3d6; }
#nearby tr { cursor: pointer; }
#nearby tr:hover td { background: #eef3fb; }
#nearby tr.sel td { background: #dfe9f8; font-weight: 600; }
.k-evict { color: #c0392b; } .k-remat { color: #1f5fbf; } .k-dead { color: #888; }
.k-alloc { color: #222; } .k-free { color: #888; } .k-banish { color: #7a4b00; }
ul.tree { list-style: none; padding-left: 18px; margin: 4px 0; }
ul.tree li { margin: 2px 0; }
ul.tree li > span { cursor: pointer; padding: 0 3px; border-radius: 3px; }
ul.tree li > span:hover { background: #eef3fb; }
ul.tree li > span.sel { background: #dfe9f8; font-weight: 600; }
pre { font-size: 12px; overflow-x: auto; }
code { font-size: 13px; }
"""

SCRIPT = r"""
"use strict";
const started = performance.now();
const D = JSON.parse(document.getElementById("data").textContent);
const C = D.columns, N = C.t.length;
const T = Float64Array.from(C.t), M = Float64Array.from(C.mem), WS = Float64Array.from(C.ws);
const KIND = {alloc: 0, dead: 1, evict: 2, remat: 3, free: 4, banish: 5};
const K = Int8Array.from(C.kind, k => KIND[k]);
const evictIdx = [], rematIdx = [];
for (let i = 0; i < N; i++) {
  if (K[i] === 2) evictIdx.push(i); else if (K[i] === 3) rematIdx.push(i);
}
const orphan = new Uint8Array(N);
for (const i of rematIdx) {
  const r = D.remats[i];
  if (r && String(r.trigger || "").startsWith("orphans of ")) orphan[i] = 1;
}
const budget = typeof D.header.budget === "number" ? D.header.budget : null;
const START = D.start;  // the clock of the log's first event: T counts from it
const steps = D.steps;
const tEnd = Math.max(N ? T[N - 1] : 0, steps.length ? steps[steps.length - 1][1] : 0, 1);
let memTop = 1;
for (let i = 0; i < N; i++) if (M[i] + WS[i] > memTop) memTop = M[i] + WS[i];
if (budget !== null && budget > memTop) memTop = budget;
memTop *= 1.06;
const formula = D.header.score || "";
const neighbourhood = (formula.match(/c\([^)]*\)/) || ["neighbourhood"])[0];

const view = {a: 0, b: tEnd};
let selected = -1;
const hooks = {draw: [], select: []};  // what the address lane (explorer_lane.py) adds
const canvas = document.getElementById("chart");
const ctx = canvas.getContext("2d");
const G = {left: 74, right: 14, top: 12, chart: 230, lane: 16, gap: 5};
G.bottom = G.top + G.chart;
G.evictY = G.bottom + 10;
G.rematY = G.evictY + G.lane + G.gap;
G.axisY = G.rematY + G.lane + 14;

function bytes(n) {
  n = Number(n);
  const units = ["B", "KiB", "MiB", "GiB"];
  let u = 0;
  while (Math.abs(n) >= 1024 && u < units.length - 1) { n /= 1024; u++; }
  return u === 0 ? n.toFixed(0) + " B" : n.toFixed(1) + " " + units[u];
}
function num(x) { return Math.round(Number(x)).toLocaleString("en-US"); }
function sci(x) {
  if (typeof x !== "number") return "-";
  if (!isFinite(x)) return String(x);
  return Math.abs(x) >= 1e4 || (Math.abs(x) < 1e-2 && x !== 0) ? x.toExponential(2) : String(+x.toPrecision(4));
}
function short(x) {
  const a = Math.abs(x);
  if (a >= 1e9) return +(x / 1e9).toPrecision(3) + "G";
  if (a >= 1e6) return +(x / 1e6).toPrecision(3) + "M";
  if (a >= 1e3) return +(x / 1e3).toPrecision(3) + "k";
  return String(+x.toPrecision(3));
}
function lowerBound(arr, x) {  // first index with arr[i] >= x
  let lo = 0, hi = arr.length;
  while (lo < hi) { const mid = (lo + hi) >> 1; if (arr[mid] < x) lo = mid + 1; else hi = mid; }
  return lo;
}
function stepOf(t) {
  let k = -1;
  for (let lo = 0, hi = steps.length - 1; lo <= hi;) {
    const mid = (lo + hi) >> 1;
    if (steps[mid][1] <= t) { k = mid; lo = mid + 1; } else hi = mid - 1;
  }
  return k < 0 ? null : steps[k][0];
}
function width() { return canvas.clientWidth - G.left - G.right; }
function xOf(t) { return G.left + (t - view.a) / (view.b - view.a) * width(); }
function tOf(x) { return view.a + (x - G.left) / width() * (view.b - view.a); }
function yOf(m) { return G.bottom - m / memTop * G.chart; }
function niceTicks(lo, hi, n) {
  const span = hi - lo, raw = span / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map(f => f * mag).find(s => span / s <= n) || 10 * mag;
  const first = Math.ceil(lo / step) * step, out = [];
  // a step finer than the floats near lo can tell apart (a clock of 1e22 zoomed in) is one tick
  if (!(step > 0) || !isFinite(first) || first + step === first) return isFinite(lo) ? [lo] : [];
  for (let k = 0, v = first; v <= hi && k <= 2 * n + 2; k++, v = first + k * step) out.push(v);
  return out;
}
function byteTicks(hi) {
  let unit = 1;
  while (hi / unit >= 1024 && unit < 1024 ** 3) unit *= 1024;
  return niceTicks(0, hi / unit, 4).map(v => v * unit);
}

function draw() {
  const dpr = window.devicePixelRatio || 1;
  const cssW = canvas.clientWidth, cssH = canvas.clientHeight;
  if (canvas.width !== Math.round(cssW * dpr) || canvas.height !== Math.round(cssH * dpr)) {
    canvas.width = Math.round(cssW * dpr); canvas.height = Math.round(cssH * dpr);
  }
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, cssW, cssH);
  const W = Math.max(1, Math.floor(width()));
  const span = view.b - view.a;
  // one min-max bar per pixel column: memory is a step function of the events
  const lo = new Float64Array(W).fill(NaN), hi = new Float64Array(W).fill(NaN);
  const ev = new Uint32Array(W), re = new Uint32Array(W), orph = new Uint8Array(W);
  let i = lowerBound(T, view.a);
  let cur = i > 0 ? M[i - 1] : 0;
  const lastCol = Math.min(W - 1, Math.floor((tEnd - view.a) / span * W));
  for (let c = 0; c <= lastCol; c++) {
    const colEnd = view.a + (c + 1) / W * span;
    let mn = cur, mx = cur;
    while (i < N && (T[i] < colEnd || (c === W - 1 && T[i] <= view.b))) {
      const m = M[i];  // a kernel's workspace stood on top of it while the kernel ran
      if (m < mn) mn = m; if (m + WS[i] > mx) mx = m + WS[i];
      cur = m;
      if (K[i] === 2) ev[c]++; else if (K[i] === 3) { re[c]++; if (orphan[i]) orph[c] = 1; }
      i++;
    }
    lo[c] = mn; hi[c] = mx;
  }
  // axes
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillStyle = "#555"; ctx.strokeStyle = "#eee"; ctx.lineWidth = 1;
  ctx.textAlign = "right"; ctx.textBaseline = "middle";
  for (const v of byteTicks(memTop)) {
    const y = Math.round(yOf(v)) + 0.5;
    ctx.beginPath(); ctx.moveTo(G.left, y); ctx.lineTo(G.left + W, y); ctx.stroke();
    ctx.fillText(bytes(v), G.left - 6, y);
  }
  ctx.textAlign = "center"; ctx.textBaseline = "top";
  for (const v of niceTicks(view.a + START, view.b + START, Math.max(2, Math.floor(W / 110)))) {
    const x = xOf(v - START);
    ctx.fillText(short(v), x, G.axisY - 8);
  }
  ctx.textAlign = "right";
  const units = {flops: "estimated ns, cost=flops", time: "measured ns, cost=time"};
  const unit = Object.hasOwn(units, D.header.cost) ? units[D.header.cost] : "cost units";
  ctx.fillText("clock (" + unit + ")", G.left + W, G.axisY + 6);
  ctx.textAlign = "left"; ctx.textBaseline = "middle";
  ctx.fillStyle = "#c0392b"; ctx.fillText("evict", 4, G.evictY + G.lane / 2);
  ctx.fillStyle = "#1f5fbf"; ctx.fillText("remat", 4, G.rematY + G.lane / 2);
  // memory: filled area and min-max bars
  ctx.fillStyle = "#cfd8e3";
  for (let c = 0; c <= lastCol; c++) ctx.fillRect(G.left + c, yOf(hi[c]), 1, G.bottom - yOf(hi[c]));
  ctx.fillStyle = "#34495e";
  for (let c = 0; c <= lastCol; c++) {
    const y1 = yOf(hi[c]), y0 = yOf(lo[c]);
    ctx.fillRect(G.left + c, y1, 1, Math.max(1.2, y0 - y1));
  }
  // budget
  let labelsEnd = G.left + W;  // step labels stop short of the budget's label when it is near the top
  if (budget !== null) {
    const y = Math.round(yOf(budget)) + 0.5;
    const text = "budget " + bytes(budget);
    if (y - 16 < G.top + 14) labelsEnd = G.left + W - 4 - ctx.measureText(text).width - 6;
    ctx.strokeStyle = "#e67e22"; ctx.lineWidth = 1.5; ctx.setLineDash([6, 4]);
    ctx.beginPath(); ctx.moveTo(G.left, y); ctx.lineTo(G.left + W, y); ctx.stroke();
    ctx.setLineDash([]);
    ctx.fillStyle = "#e67e22"; ctx.textAlign = "right"; ctx.textBaseline = "bottom";
    ctx.fillText(text, G.left + W - 4, y - 2);
  }
  // step boundaries
  ctx.strokeStyle = "#8e44ad"; ctx.lineWidth = 1; ctx.setLineDash([3, 3]);
  ctx.fillStyle = "#8e44ad"; ctx.textAlign = "left"; ctx.textBaseline = "top";
  let lastEnd = -1e9;  // a label is drawn only clear of the last one drawn
  for (const [k, t] of steps) {
    if (t < view.a || t > view.b) continue;
    const x = Math.round(xOf(t)) + 0.5;
    ctx.beginPath(); ctx.moveTo(x, G.top); ctx.lineTo(x, G.rematY + G.lane); ctx.stroke();
    const label = "step " + k, end = x + 3 + ctx.measureText(label).width;
    if (x + 3 > lastEnd + 6 && end <= labelsEnd) { ctx.fillText(label, x + 3, G.top + 1); lastEnd = end; }
  }
  ctx.setLineDash([]);
  // lanes
  ctx.fillStyle = "#f6f6f6";
  ctx.fillRect(G.left, G.evictY, W, G.lane); ctx.fillRect(G.left, G.rematY, W, G.lane);
  for (let c = 0; c <= lastCol; c++) {
    if (ev[c]) {
      ctx.fillStyle = "rgba(192,57,43," + Math.min(1, 0.35 + 0.25 * ev[c]) + ")";
      ctx.fillRect(G.left + c, G.evictY, 1, G.lane);
    }
    if (re[c]) {
      ctx.fillStyle = orph[c] ? "#8e44ad" : "rgba(31,95,191," + Math.min(1, 0.35 + 0.25 * re[c]) + ")";
      ctx.fillRect(G.left + c, G.rematY, 1, G.lane);
    }
  }
  // selection
  if (selected >= 0 && T[selected] >= view.a && T[selected] <= view.b) {
    const x = Math.round(xOf(T[selected])) + 0.5;
    ctx.strokeStyle = "#111"; ctx.lineWidth = 1;
    ctx.beginPath(); ctx.moveTo(x, G.top); ctx.lineTo(x, G.rematY + G.lane); ctx.stroke();
    ctx.fillStyle = "#111";
    ctx.beginPath(); ctx.arc(x, yOf(M[selected]), 3.5, 0, 2 * Math.PI); ctx.fill();
  }
  for (const f of hooks.draw) f();
}

let pending = false;
function redraw() {
  if (pending) return;
  pending = true;
  requestAnimationFrame(() => { pending = false; draw(); });
}

function nearest(list, t, px) {  // the event of ``list`` nearest to clock t, within px pixels
  if (!list.length) return -1;
  let lo = 0, hi = list.length;
  while (lo < hi) { const mid = (lo + hi) >> 1; if (T[list[mid]] < t) lo = mid + 1; else hi = mid; }
  let best = -1, dist = Infinity;
  for (const k of [lo - 1, lo]) {
    if (k < 0 || k >= list.length) continue;
    const d = Math.abs(xOf(T[list[k]]) - xOf(t));
    if (d < dist) { dist = d; best = list[k]; }
  }
  return dist <= px ? best : -1;
}

function pick(x, y) {
  const t = tOf(x);
  if (y >= G.evictY - 2 && y < G.rematY - 1) return nearest(evictIdx, t, 6);
  if (y >= G.rematY - 1 && y <= G.rematY + G.lane + 3) return nearest(rematIdx, t, 6);
  const e = nearest(evictIdx, t, 6), r = nearest(rematIdx, t, 6);
  if (e < 0) return r; if (r < 0) return e;
  return Math.abs(T[e] - t) <= Math.abs(T[r] - t) ? e : r;
}

// Every node built from the log's data is made with el(): strings become text nodes and
// attributes are set one by one, so nothing in a log is ever parsed as HTML.
function el(tag, attrs, ...kids) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value !== null && value !== undefined && value !== false) node.setAttribute(name, String(value));
  }
  for (const kid of kids.flat(Infinity)) {
    if (kid !== null && kid !== undefined && kid !== false) node.append(kid instanceof Node ? kid : String(kid));
  }
  return node;
}
function opName(i) { return String(D.ops[C.op[i]]); }
function describe(i) {
  return "#" + C.id[i] + " " + opName(i) + " (" + bytes(C.nbytes[i]) + ")";
}
function madeRoomFor(row) {
  return C.kind[row] === "remat" ? "recomputing #" + C.id[row] + " " + opName(row) : opName(row);
}
function clock(t) { return "clock " + num(t + START); }
function when(i) {
  const k = stepOf(T[i]);
  return clock(T[i]) + (k === null ? "" : " (step " + k + ")") + ", memory after " + bytes(M[i])
    + (WS[i] ? " (" + bytes(M[i] + WS[i]) + " while its kernel ran, with a workspace of " + bytes(WS[i]) + ")" : "");
}

function candidateTable(cands, hasC, hasN) {
  const head = el("tr", null, el("th", {class: "l"}), el("th", {class: "l"}, "storage"),
    el("th", {class: "l"}, "op"), hasC && el("th", null, "c"), hasN && el("th", null, neighbourhood),
    el("th", null, "m"), el("th", null, "s"), el("th", null, "score"));
  const rows = cands.map((c, r) => el("tr", {class: r === 0 ? "victim" : r === 1 ? "runner" : null},
    el("td", {class: "l"}, r === 0 ? "evicted" : r === 1 ? "runner-up" : "#" + (r + 1)),
    el("td", {class: "l"}, "#" + c.id), el("td", {class: "l"}, c.op),
    hasC && el("td", null, num(c.cost ?? 0)), hasN && el("td", null, num(c.neighbourhood ?? 0)),
    el("td", null, c.nbytes === undefined ? "-" : bytes(c.nbytes)),
    el("td", null, c.staleness === undefined ? "-" : num(c.staleness)), el("td", null, sci(c.score))));
  return el("table", {class: "candidates"}, head, rows);
}

function evictionDetails(i) {
  const e = D.evictions[i] || {};
  const out = [el("h2", {class: "k-evict"}, "Eviction of " + describe(i)),
    el("p", null, "At " + when(i) + ". Forced by the " + (e.reason === undefined ? "budget" : e.reason),
      Number.isInteger(e.for) ? [", to make room for ", el("b", null, madeRoomFor(e.for))] : "", ".")];
  const cands = e.candidates || [];
  if (cands.length) {
    const hasN = cands.some(c => "neighbourhood" in c), hasC = cands.some(c => "cost" in c);
    out.push(el("p", null, "Score = ", el("code", null, formula || "?"), "; the lowest score is evicted. ",
      hasC ? [el("i", null, "c"), ": cost to recompute it; "] : "",
      hasN ? [el("i", null, neighbourhood), ": cost of the evicted neighbourhood its eviction would join; "] : "",
      el("i", null, "m"), ": bytes; ", el("i", null, "s"), ": staleness, clock since its last access."));
    out.push(candidateTable(cands, hasC, hasN));
  }
  if (e.runner_up) {
    const [rid, rscore] = e.runner_up;
    const scored = typeof rscore === "number";  // the log's null: an infinite or NaN score
    const ratio = scored && e.score > 0 ? " = " + (rscore / e.score).toFixed(2) + "× the victim's" : "";
    out.push(el("p", null, "Runner-up: #" + rid + (scored ? " scored " + sci(rscore) + ratio : " with no finite score")
      + " (victim " + sci(e.score) + ")."));
  } else if (typeof e.score === "number") {
    out.push(el("p", null, "Score " + sci(e.score) + "; no runner-up (the only candidate)."));
  }
  return out;
}

function triggerText(cascade) {
  const t = String(cascade.trigger);
  if (t.startsWith("orphans of ")) return ["rebuilding the orphans of dead " + t.slice(11) + " before it is freed"];
  if (t === "read") return ["a read of a value"];
  return ["the op ", el("b", null, t)];
}

const TREE_DEPTH = 64;  // deeper replays are listed flat: a browser cannot lay out thousands of nested lists
function cascadeTree(cascade, i) {
  const nodes = cascade.nodes, kids = nodes.map(() => []), roots = [];
  nodes.forEach((n, k) => (n.up === null || n.up === undefined ? roots : kids[n.up]).push(k));
  const sel = nodes.findIndex(n => n.events.includes(i));
  function item(k) {
    const n = nodes[k];
    const what = opName(n.events[0]) + " → " + n.events.map(j => "#" + C.id[j]).join(", ")
      + " (" + bytes(n.events.reduce((s, j) => s + C.nbytes[j], 0)) + "), cost " + num(n.cost || 0);
    return el("li", null, el("span", {"data-event": n.events[0], class: k === sel ? "sel" : null}, what));
  }
  // depth first with a stack of its own: a chain thousands of replays deep overflowed the call stack
  const top = el("ul", {class: "tree"}), stack = roots.slice().reverse().map(k => [k, top, 1]);
  let flat = false;
  while (stack.length) {
    const [k, list, depth] = stack.pop(), li = item(k);
    list.append(li);
    if (!kids[k].length) continue;
    let under = list;
    if (depth < TREE_DEPTH) li.append(under = el("ul", {class: "tree"})); else flat = true;
    for (let c = kids[k].length - 1; c >= 0; c--) stack.push([kids[k][c], under, depth + 1]);
  }
  const note = flat ? el("p", {class: "muted"}, "Past " + TREE_DEPTH + " levels the replays are listed"
    + " flat, each after the one that needed it.") : null;
  return {roots, tree: el("div", {class: "cascade"}, el("ul", {class: "tree"},
    el("li", null, el("span", null, triggerText(cascade)), top)), note)};
}

function rematDetails(i) {
  const r = D.remats[i] || {};
  const out = [el("h2", {class: "k-remat"}, "Rematerialization of " + describe(i)),
    el("p", null, "At " + when(i) + "; recomputing it cost " + num(r.cost ?? 0) + ".")];
  const cascade = r.cascade !== undefined && Object.hasOwn(D.cascades, r.cascade) ? D.cascades[r.cascade] : null;
  if (!cascade) return [...out, el("p", {class: "muted"}, "This log does not link remats into cascades.")];
  const nodes = cascade.nodes, {roots, tree} = cascadeTree(cascade, i);
  const total = nodes.reduce((s, n) => s + (n.cost || 0), 0);
  const needed = roots.map(k => "#" + C.id[nodes[k].events[nodes[k].events.length - 1]]).join(", ");
  out.push(el("p", null, "Cascade " + r.cascade + ": ", triggerText(cascade), " needed " + needed
    + (roots.length > 1 ? ", all evicted" : ", evicted") + ". Rebuilding took " + nodes.length
    + " replay" + (nodes.length > 1 ? "s" : "") + " costing " + num(total) + "; "
    + cascade.evictions + " budget eviction" + (cascade.evictions === 1 ? "" : "s")
    + " made room meanwhile. The tree reads top down: each replay (op → the storages it"
    + " rebuilt) needed the replays under it first, to rebuild its own evicted inputs."), tree);
  return out;
}

function plainDetails(i) {
  const k = ["alloc", "dead", "evict", "remat", "free", "banish"][K[i]];
  const text = {
    alloc: "Allocated: the op ran and its output became resident.",
    dead: "Evicted because the program dropped its last reference (eager deallocation): nothing to recompute.",
    free: "Freed: its metadata was garbage collected.",
    banish: "Banished: freed for good; its children became constants.",
  }[k];
  const title = {alloc: "Allocation", dead: "Eviction", free: "Free", banish: "Banishment"}[k];
  return [el("h2", {class: "k-" + k}, title + " of " + describe(i)), el("p", null, "At " + when(i) + ". " + text)];
}

const KIND_NAME = ["alloc", "evict (dead)", "evict (budget)", "remat", "free", "banish"];
const KIND_CLASS = ["alloc", "dead", "evict", "remat", "free", "banish"];
function nearby(i) {
  const a = Math.max(0, i - 10), b = Math.min(N, i + 11), rows = [];
  for (let j = a; j < b; j++) {
    rows.push(el("tr", {"data-event": j, class: j === i ? "sel" : null}, el("td", null, num(T[j] + START)),
      el("td", {class: "l k-" + KIND_CLASS[K[j]]}, KIND_NAME[K[j]]),
      el("td", {class: "l"}, "#" + C.id[j] + " " + opName(j)), el("td", null, bytes(M[j]))));
  }
  return [el("h2", null, "Events around it"), el("table", null, el("tr", null, el("th", null, "clock"),
    el("th", {class: "l"}, "event"), el("th", {class: "l"}, "storage"), el("th", null, "memory")), rows)];
}

function select(i, recenter = true) {
  if (!(i >= 0 && i < N)) return;
  selected = i;
  const details = document.getElementById("details");
  details.replaceChildren(...(K[i] === 2 ? evictionDetails(i) : K[i] === 3 ? rematDetails(i) : plainDetails(i)));
  details.dataset.kind = KIND_CLASS[K[i]];
  document.getElementById("nearby").replaceChildren(...nearby(i));
  for (const f of hooks.select) f(i);
  if (recenter && (T[i] < view.a || T[i] > view.b)) {
    const half = (view.b - view.a) / 2;
    view.a = Math.max(0, T[i] - half); view.b = view.a + 2 * half;
  }
  redraw();
}

function step(list, direction) {
  if (!list.length) return;
  const t = selected >= 0 ? selected : -1;
  let lo = 0, hi = list.length;
  while (lo < hi) { const mid = (lo + hi) >> 1; if (list[mid] < t) lo = mid + 1; else hi = mid; }
  let k = direction > 0 ? (list[lo] === t ? lo + 1 : lo) : lo - 1;
  k = Math.max(0, Math.min(list.length - 1, k));
  select(list[k]);
}

function zoom(factor, aroundT) {
  const span = Math.min(tEnd, Math.max((view.b - view.a) * factor, Math.max(tEnd * 1e-7, 1)));
  const f = (aroundT - view.a) / (view.b - view.a);
  view.a = aroundT - f * span; view.b = view.a + span;
  if (view.a < 0) { view.b -= view.a; view.a = 0; }
  if (view.b > tEnd) { view.a -= view.b - tEnd; view.b = tEnd; view.a = Math.max(0, view.a); }
  redraw();
}

let drag = null;
canvas.addEventListener("mousedown", e => { drag = {x: e.offsetX, a: view.a, b: view.b, moved: false}; });
window.addEventListener("mouseup", () => { setTimeout(() => { drag = null; }, 0); });
canvas.addEventListener("mousemove", e => {
  const t = tOf(e.offsetX);
  const k = stepOf(t);
  const j = Math.max(0, lowerBound(T, t) - 1);
  document.getElementById("hover").textContent = t >= 0 && t <= tEnd && N
    ? clock(t) + (k === null ? "" : ", step " + k) + ", memory " + bytes(M[j]) : "";
  if (drag && e.buttons) {
    const dx = e.offsetX - drag.x;
    if (Math.abs(dx) > 3) drag.moved = true;
    if (drag.moved) {
      const shift = -dx / width() * (drag.b - drag.a);
      let a = Math.max(0, drag.a + shift), b = a + (drag.b - drag.a);
      if (b > tEnd) { b = tEnd; a = Math.max(0, b - (drag.b - drag.a)); }
      view.a = a; view.b = b; redraw();
    }
  }
});
canvas.addEventListener("click", e => {
  if (drag && drag.moved) return;
  const i = pick(e.offsetX, e.offsetY);
  if (i >= 0) select(i, false);
});
canvas.addEventListener("wheel", e => {
  e.preventDefault();
  zoom(e.deltaY > 0 ? 1.25 : 0.8, tOf(e.offsetX));
}, {passive: false});
canvas.addEventListener("dblclick", () => { view.a = 0; view.b = tEnd; redraw(); });
document.addEventListener("click", e => {
  const target = e.target.closest("[data-event]");
  if (target && !canvas.contains(target)) select(+target.dataset.event);
});
document.addEventListener("keydown", e => {
  if (selected < 0) return;
  const list = K[selected] === 3 ? rematIdx : evictIdx;
  if (e.key === "ArrowRight") step(list, 1); else if (e.key === "ArrowLeft") step(list, -1);
});
document.getElementById("reset").onclick = () => { view.a = 0; view.b = tEnd; redraw(); };
document.getElementById("prev-evict").onclick = () => step(evictIdx, -1);
document.getElementById("next-evict").onclick = () => step(evictIdx, 1);
document.getElementById("prev-remat").onclick = () => step(rematIdx, -1);
document.getElementById("next-remat").onclick = () => step(rematIdx, 1);
window.addEventListener("resize", redraw);

const h = D.header;
document.getElementById("meta").replaceChildren(el("span", null, num(N) + " events: " + num(evictIdx.length)
  + " budget evictions, " + num(D.replays) + " remats"
  + (D.replays !== rematIdx.length ? " (refilling " + num(rematIdx.length) + " storages)" : "")
  + ", " + steps.length + (steps.length === 1 ? " step" : " steps") + " marked. "
  + (budget !== null ? "Budget " + bytes(budget) + ". " : "No budget in the log. "),
  h.heuristic ? ["Heuristic " + h.heuristic + ", score ", el("code", null, formula), ". "] : "",
  "The clock counts " + D.unit + "; every clock on this page is the runtime's, as in the log"
  + " and in minidtr explain (this log runs from clock " + num(START) + " to " + num(START + tEnd) + ")."));
document.getElementById("summary").textContent = D.summary;
draw();
window.explorer = {
  select, draw, zoom, evictions: evictIdx, remats: rematIdx, events: N,
  get selected() { return selected; },
  xOf: i => xOf(T[i]), laneY: kind => (kind === "remat" ? G.rematY : G.evictY) + G.lane / 2,
  ready: true, readyMs: performance.now(), scriptMs: performance.now() - started,
};
"""

PAGE = (
    """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title><!--TITLE--> - minidtr explorer</title>
<style>"""
    + STYLE
    + LANE_STYLE
    + """</style></head>
<body>
<h1><!--TITLE--></h1>
<div id="meta"></div>
<div id="chartbox"><canvas id="chart"></canvas><div id="hover"></div></div>
<div id="controls">
<button id="reset">whole run</button>
<button id="prev-evict">&larr; eviction</button><button id="next-evict">eviction &rarr;</button>
<button id="prev-remat">&larr; remat</button><button id="next-remat">remat &rarr;</button>
<span class="help">Click a red (eviction) or blue (remat; purple: orphan rebuild) mark.
Wheel: zoom; drag: pan; double-click: whole run; arrow keys: previous / next of the same kind.
Dashed purple lines: step boundaries.</span>
</div>
<div id="main">
<section id="details"><p class="muted">Click an eviction or a remat on the timeline.</p></section>
<section id="nearby"></section>
</div>
<details><summary>minidtr explain</summary><pre id="summary"></pre></details>
<script type="application/json" id="data">/*DATA*/</script>
<script>"""
    + SCRIPT
    + LANE_SCRIPT
    + """</script>
</body></html>
"""
)
