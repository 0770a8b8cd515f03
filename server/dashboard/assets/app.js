// Sluice dashboard: polls /admin/v1/stats and /admin/v1/top every 2 s and
// draws with hand-made SVG. No request leaves this origin.
"use strict";

const POLL_MS = 2000;
const HISTORY = 150; // points kept: 5 minutes at 2 s
const DEGRADED = new Set(["failed_open", "failed_closed", "local_allowed", "local_denied"]);
const history = { rates: [], latency: [] };
let prev = null;

function classOf(outcome) {
  if (outcome === "allowed" || outcome === "shadow_denied") return "allowed";
  if (outcome === "denied") return "denied";
  if (DEGRADED.has(outcome)) return "degraded";
  return null;
}

async function getJSON(url) {
  // Resolved against location.origin, not the page's URL: opened as
  // user:token@host, the page's URL holds credentials, and fetch refuses a
  // URL that does (the browser still sends the cached Basic credentials).
  const r = await fetch(new URL(url, location.origin), { credentials: "same-origin", cache: "no-store" });
  if (!r.ok) throw new Error(url + ": HTTP " + r.status);
  return r.json();
}

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function fmtRate(x) { return x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2); }
function fmtDur(s) {
  if (!isFinite(s)) return "–";
  if (s < 1e-3) return (s * 1e6).toFixed(0) + " µs";
  if (s < 1) return (s * 1e3).toFixed(1) + " ms";
  return s.toFixed(2) + " s";
}

// quantile estimates a quantile from cumulative bucket deltas, linear in a bucket.
function quantile(q, bounds, counts) {
  const total = counts.length ? counts[counts.length - 1] : 0;
  if (!total) return NaN;
  const rank = q * total;
  let lo = 0, below = 0;
  for (let i = 0; i < bounds.length; i++) {
    if (counts[i] >= rank) {
      const inBucket = counts[i] - below;
      return lo + (bounds[i] - lo) * (inBucket ? (rank - below) / inBucket : 1);
    }
    lo = bounds[i]; below = counts[i];
  }
  return bounds[bounds.length - 1];
}

function drawChart(svg, series, colors, fmt) {
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const W = 600, H = 180, pad = 4;
  let ymax = 0;
  for (const s of series) for (const v of s) if (isFinite(v)) ymax = Math.max(ymax, v);
  ymax = ymax > 0 ? ymax * 1.15 : 1;
  const n = Math.max(...series.map(s => s.length), 2);
  series.forEach((s, k) => {
    const pts = [];
    s.forEach((v, i) => {
      if (!isFinite(v)) return;
      const x = pad + (W - 2 * pad) * (i + (HISTORY - n)) / (HISTORY - 1);
      const y = H - pad - (H - 2 * pad) * v / ymax;
      pts.push(x.toFixed(1) + "," + y.toFixed(1));
    });
    if (pts.length) svg.appendChild(svgEl("polyline", { points: pts.join(" "), fill: "none", stroke: colors[k], "stroke-width": 2, "vector-effect": "non-scaling-stroke" }));
  });
  const label = document.getElementById(svg.id + "-max");
  if (label) label.textContent = "scale: up to " + fmt(ymax / 1.15);
}

function svgEl(tag, attrs) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

function push(arr, v) { arr.push(v); if (arr.length > HISTORY) arr.shift(); }

function renderStats(st) {
  document.getElementById("scope").textContent = st.instances.length > 1
    ? "fleet of " + st.instances.length + " instances" : "instance " + st.instances[0];
  document.getElementById("updated").textContent = "updated " + new Date(st.time).toLocaleTimeString();
  const now = Date.parse(st.time) / 1000;
  const counts = new Map();
  for (const d of st.decisions) counts.set(d.domain + "\u0000" + d.rule + "\u0000" + d.outcome, d);
  if (prev && now > prev.t) {
    const dt = now - prev.t;
    const tot = { allowed: 0, denied: 0, degraded: 0 };
    const perRule = new Map();
    for (const [k, d] of counts) {
      const was = prev.counts.get(k);
      const delta = Math.max(0, d.count - (was ? was.count : 0)) / dt;
      const cls = classOf(d.outcome);
      if (cls) tot[cls] += delta;
      const rk = d.domain + "\u0000" + d.rule;
      if (!perRule.has(rk)) perRule.set(rk, { domain: d.domain, rule: d.rule, allowed: 0, denied: 0, degraded: 0, shadow: 0 });
      const r = perRule.get(rk);
      if (d.outcome === "shadow_denied") r.shadow += delta;
      if (cls) r[cls] += delta;
    }
    push(history.rates, tot);
    for (const c of ["allowed", "denied", "degraded"]) document.getElementById("rate-" + c).textContent = fmtRate(tot[c]);
    renderRules(perRule);
    const lat = st.latency, pl = prev.latency;
    let p50 = NaN, p99 = NaN;
    if (lat.bounds && pl.bounds && lat.count > pl.count) {
      const deltas = lat.buckets.map((c, i) => c - (pl.buckets[i] || 0));
      p50 = quantile(0.5, lat.bounds, deltas);
      p99 = quantile(0.99, lat.bounds, deltas);
    }
    push(history.latency, { p50, p99 });
    document.getElementById("p50").textContent = fmtDur(p50);
    document.getElementById("p99").textContent = fmtDur(p99);
    drawChart(document.getElementById("rate-chart"),
      ["allowed", "denied", "degraded"].map(c => history.rates.map(p => p[c])),
      ["var(--allowed)", "var(--denied)", "var(--degraded)"].map(css), fmtRate);
    drawChart(document.getElementById("latency-chart"),
      ["p50", "p99"].map(c => history.latency.map(p => p[c])), ["var(--p50)", "var(--p99)"].map(css), fmtDur);
  }
  const tierCounts = new Map();
  for (const d of st.tiers || []) tierCounts.set(d.rule + "\u0000" + d.outcome, d.count);
  if (prev && prev.tiers && now > prev.t) renderTiers(tierCounts, prev.tiers, now - prev.t);
  prev = { t: now, counts, latency: st.latency, tiers: tierCounts };
  renderBreakers(st.breakers);
  renderReload(st.reload || []);
}

function css(v) { return getComputedStyle(document.documentElement).getPropertyValue(v.slice(4, -1)).trim(); }

function renderRules(perRule) {
  const tbody = document.querySelector("#rules tbody");
  tbody.replaceChildren();
  const rows = [...perRule.values()].sort((a, b) => (b.denied + b.allowed) - (a.denied + a.allowed));
  for (const r of rows) {
    const tr = el("tr");
    tr.append(el("td", {}, r.domain), el("td", {}, r.rule));
    for (const c of ["allowed", "denied", "degraded", "shadow"]) tr.append(el("td", { class: "n" }, fmtRate(r[c])));
    tbody.append(tr);
  }
}

function renderTiers(cur, was, dt) {
  const rows = new Map();
  for (const [k, c] of cur) {
    const [tier, outcome] = k.split("\u0000");
    const rate = Math.max(0, c - (was.get(k) || 0)) / dt;
    if (!rows.has(tier)) rows.set(tier, { allowed: 0, denied: 0 });
    const r = rows.get(tier);
    if (outcome === "denied" || outcome === "local_denied" || outcome === "failed_closed") r.denied += rate; else r.allowed += rate;
  }
  const tbody = document.querySelector("#tiers tbody");
  tbody.replaceChildren();
  for (const [tier, r] of [...rows.entries()].sort()) {
    const tr = el("tr");
    const total = r.allowed + r.denied;
    tr.append(el("td", {}, tier), el("td", { class: "n" }, fmtRate(r.allowed)), el("td", { class: "n" }, fmtRate(r.denied)),
      el("td", { class: "n" }, total > 0 ? (100 * r.denied / total).toFixed(1) + " %" : "–"));
    tbody.append(tr);
  }
  document.getElementById("tiers-note").hidden = rows.size > 0;
}

function renderBreakers(nodes) {
  const ul = document.getElementById("breakers");
  ul.replaceChildren();
  if (!nodes.length) { ul.append(el("li", { class: "muted" }, "in-process store: no remote nodes")); return; }
  for (const n of nodes) {
    const li = el("li");
    li.append(el("span", { class: "dot " + n.State }), document.createTextNode(n.Node + " — " + n.State));
    if (n.LastError) li.append(el("div", { class: "err" }, n.LastError));
    ul.append(li);
  }
}

function renderReload(list) {
  const ul = document.getElementById("reload");
  ul.replaceChildren();
  if (!list.length) { ul.append(el("li", { class: "muted" }, "no rule files watched")); return; }
  for (const r of list) {
    const li = el("li");
    li.append(el("span", { class: "dot " + (r.ok ? "ok" : "failed") }),
      document.createTextNode(r.instance + ": " + (r.ok ? "ok" : "last reload failed") + ", loaded " + new Date(r.last_reload).toLocaleTimeString()));
    if (r.last_error) li.append(el("div", { class: "err" }, r.last_error));
    ul.append(li);
  }
}

function renderTop(top) {
  const all = [];
  for (const r of top.rules) for (const o of r.top_denied) all.push({ rule: r.domain + "/" + r.rule, bound: r.error_bound.denials, ...o });
  all.sort((a, b) => b.denials - a.denials);
  const tbody = document.querySelector("#top tbody");
  tbody.replaceChildren();
  for (const o of all.slice(0, 10)) {
    const tr = el("tr", { "data-key": o.key });
    tr.append(el("td", {}, o.key), el("td", {}, o.rule), el("td", { class: "n" }, String(o.denials)),
      el("td", { class: "n" }, String(o.checks)), el("td", { class: "n" }, String(o.denials_error)));
    tbody.append(tr);
  }
  document.getElementById("top-note").textContent = all.length
    ? "Counts are estimates: never below the truth, at most ± above it." : "No key was denied in the last 5 minutes.";
}

async function tick() {
  try {
    const [st, top] = await Promise.all([getJSON("/admin/v1/stats"), getJSON("/admin/v1/top?n=10&window=5m")]);
    renderStats(st);
    renderTop(top);
  } catch (e) {
    document.getElementById("updated").textContent = "update failed: " + e.message;
  }
}

tick();
setInterval(tick, POLL_MS);
