"""The explorer page's address lane: the arena's blocks over time, for a log of
``fit="contiguous"`` (``minidtr.explorer.address_blocks`` gives its data; a byte-fit log
has none and the page has no lane).

A second canvas under the timeline, on the same clock (it zooms with it): y is the
address, from 0 (bottom) to the budget (top); each value's block is a rectangle from the
alloc or remat that placed it to the eviction, free or banishment that took it out,
coloured by op, over a pale background that is the free space. A red edge ends a block
evicted by the budget, a blue edge starts one rebuilt by a remat. Clicking a block selects
its alloc or remat (the details and the events around it, as anywhere on the page) and
the details then say where the value lay. This script runs in the page's scope, after its
own (``explorer_page.SCRIPT``), and builds its nodes with ``el`` like the rest: nothing
from the log is parsed as HTML.
"""

LANE_STYLE = """
#lanebox { position: relative; margin-top: 6px; }
#lane { width: 100%; height: 236px; display: block; cursor: pointer;
  border: 1px solid #ddd; border-radius: 4px; }
#lanehover { position: absolute; right: 12px; top: 6px; font-size: 12px; color: #333;
  background: rgba(255,255,255,.85); padding: 1px 4px; pointer-events: none; }
p.address { border-top: 1px solid #eee; padding-top: 4px; }
"""

LANE_SCRIPT = r"""
// ---- the address lane (explorer_lane.py) ----
const lane = (() => {
  const B = D.blocks;
  if (!B) return null;
  const nb = B.start.length, top = Math.max(1, B.top);
  const S = Int32Array.from(B.start), E = Int32Array.from(B.end);
  const A = Float64Array.from(B.address), Z = Float64Array.from(B.size);
  const t0 = new Float64Array(nb), t1 = new Float64Array(nb);
  const blockOf = new Int32Array(N).fill(-1);  // the block each row placed or took out
  const PALETTE = ["#9ec5e8", "#f4c69b", "#a8d8a8", "#d9b8e3", "#f2e394",
    "#b8d8d8", "#e8b4b4", "#c9c9a3"];
  const groups = PALETTE.map(() => []);
  const evicted = [], rebuilt = [];
  for (let k = 0; k < nb; k++) {
    t0[k] = S[k] < 0 ? 0 : T[S[k]];
    t1[k] = E[k] < 0 ? tEnd : T[E[k]];
    if (S[k] >= 0) blockOf[S[k]] = k;
    if (E[k] >= 0) blockOf[E[k]] = k;
    groups[C.op[S[k] >= 0 ? S[k] : E[k]] % PALETTE.length].push(k);
    if (E[k] >= 0 && K[E[k]] === 2) evicted.push(k);
    if (S[k] >= 0 && K[S[k]] === 3) rebuilt.push(k);
  }
  const L = {top: 10, h: 200};
  L.bottom = L.top + L.h;
  const yA = a => L.bottom - a / top * L.h;
  const cv = el("canvas", {id: "lane"}), hover = el("div", {id: "lanehover"});
  document.getElementById("chartbox").after(el("div", {id: "lanebox"}, cv, hover),
    el("div", {class: "help"}, "Address lane: the arena from address 0 (bottom) to "
      + bytes(top) + " (top) on the same clock; each block is a value from its alloc or remat"
      + " to its eviction or free, coloured by op; the pale background is free space; a red"
      + " edge ends a block evicted by the budget, a blue edge starts one rebuilt by a remat."
      + " Click a block to select its value."));
  const g = cv.getContext("2d");

  function box(k) {  // the block's rectangle in CSS pixels, at least one pixel each way
    const x0 = xOf(t0[k]), y0 = yA(A[k] + Z[k]);
    return [x0, y0, Math.max(1, xOf(t1[k]) - x0), Math.max(1, yA(A[k]) - y0)];
  }
  function visible(k) { return t1[k] >= view.a && t0[k] <= view.b; }
  function drawLane() {
    const dpr = window.devicePixelRatio || 1, w = cv.clientWidth, h = cv.clientHeight;
    if (cv.width !== Math.round(w * dpr) || cv.height !== Math.round(h * dpr)) {
      cv.width = Math.round(w * dpr); cv.height = Math.round(h * dpr);
    }
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    const W = Math.max(1, Math.floor(width()));
    g.font = "11px system-ui, sans-serif"; g.fillStyle = "#555";
    g.textAlign = "right"; g.textBaseline = "middle";
    for (const v of byteTicks(top)) g.fillText(bytes(v), G.left - 6, yA(v));
    g.textAlign = "left"; g.textBaseline = "top";
    g.fillText("address", 4, L.bottom + 6);
    g.fillStyle = "#f1f3f5";  // the free space: what no block covers
    g.fillRect(G.left, L.top, W, L.h);
    g.save();
    g.beginPath(); g.rect(G.left, L.top, W, L.h); g.clip();
    PALETTE.forEach((colour, c) => {
      g.fillStyle = colour; g.beginPath();
      for (const k of groups[c]) {
        if (!visible(k)) continue;
        const r = box(k);
        if (r[3] >= 3) r[3] -= 0.6;  // a hairline of background between stacked blocks
        g.rect(...r);
      }
      g.fill();
    });
    for (const [list, colour, end] of [[evicted, "#c0392b", true], [rebuilt, "#1f5fbf", false]]) {
      g.fillStyle = colour; g.beginPath();
      for (const k of list) {
        if (!visible(k)) continue;
        const [x, y, bw, bh] = box(k);
        g.rect(end ? x + bw - 1.5 : x, y, 1.5, bh);
      }
      g.fill();
    }
    const k = selected >= 0 ? blockOf[selected] : -1;
    if (selected >= 0 && T[selected] >= view.a && T[selected] <= view.b) {
      const x = Math.round(xOf(T[selected])) + 0.5;
      g.strokeStyle = "#111"; g.lineWidth = 1;
      g.beginPath(); g.moveTo(x, L.top); g.lineTo(x, L.bottom); g.stroke();
    }
    if (k >= 0) { g.strokeStyle = "#111"; g.lineWidth = 2; g.strokeRect(...box(k)); }
    g.restore();
  }

  function blockAt(x, y) {  // the block under (x, y), else the nearest within 3 px
    let best = -1, bestD = 3, bestH = Infinity;
    for (let k = 0; k < nb; k++) {
      const [bx, by, bw, bh] = box(k);
      const d = Math.max(0, bx - x, x - bx - bw) + Math.max(0, by - y, y - by - bh);
      if (d < bestD || (d === bestD && bh < bestH)) { best = k; bestD = d; bestH = bh; }
    }
    return best;
  }
  function rowOf(k) { return S[k] >= 0 ? S[k] : E[k]; }
  function placed(k) {
    const i = rowOf(k), from = S[k] < 0 ? "before the log began" : clock(t0[k]) + " (" + KIND_NAME[K[S[k]]] + ")";
    const to = E[k] < 0 ? "the end of the log" : clock(t1[k]) + " (" + KIND_NAME[K[E[k]]] + ")";
    return "#" + C.id[i] + " " + opName(i) + " lay at address " + num(A[k]) + " to " + num(A[k] + Z[k])
      + " (" + bytes(Z[k]) + ", its " + bytes(C.nbytes[i]) + " rounded up to the alignment), from "
      + from + " to " + to + ".";
  }

  cv.addEventListener("click", e => {
    const k = blockAt(e.offsetX, e.offsetY);
    if (k >= 0) select(rowOf(k), false);
  });
  cv.addEventListener("mousemove", e => {
    const k = blockAt(e.offsetX, e.offsetY);
    hover.textContent = k >= 0 ? "#" + C.id[rowOf(k)] + " " + opName(rowOf(k)) + " at " + num(A[k]) : "";
  });
  cv.addEventListener("mouseleave", () => { hover.textContent = ""; });
  cv.addEventListener("wheel", e => {
    e.preventDefault();
    zoom(e.deltaY > 0 ? 1.25 : 0.8, tOf(e.offsetX));
  }, {passive: false});
  hooks.draw.push(drawLane);
  hooks.select.push(i => {
    const k = blockOf[i], lines = [];
    if (k >= 0) lines.push(placed(k));
    const e = K[i] === 2 ? D.evictions[i] || {} : {};
    if (typeof e.free_bytes === "number" && typeof e.largest_free === "number") {
      lines.push("Evicted to free a block: the arena had " + bytes(e.free_bytes) + " free, its largest"
        + " free block " + bytes(e.largest_free) + (e.extra === true ? "; the bytes alone already"
        + " fitted the budget (an extra eviction of the contiguous rule)." : "."));
    }
    if (lines.length) document.getElementById("details").append(el("p", {class: "address"}, lines.join(" ")));
  });
  drawLane();
  return {
    blocks: nb, top, draw: drawLane, blockAt, rows: k => [S[k], E[k]], yOf: yA,
    marks: [evicted.length, rebuilt.length],
    centre: k => { const [x, y, w, h] = box(k); return [x + w / 2, y + h / 2]; },
  };
})();
window.explorer.lane = lane;
"""
