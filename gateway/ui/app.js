// The operators' page: /admin/usage and /metrics, read with the admin key, rendered without any library.
// The key comes from the URL fragment (#key=..., never sent to the server nor logged) or the form, and is kept
// in sessionStorage for this tab only.
"use strict";

const REFRESH_MS = 10000;
const LAYERS = ["exact", "semantic", "prefix", "compression"];

function adminKey() {
  const m = location.hash.match(/key=([^&]+)/);
  if (m) {
    sessionStorage.setItem("llmgw-admin-key", decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname);
  }
  return sessionStorage.getItem("llmgw-admin-key");
}

async function get(path, key) {
  const r = await fetch(path, { headers: { Authorization: "Bearer " + key } });
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return path.startsWith("/metrics") ? r.text() : r.json();
}

const usd = (v) => "$" + v.toFixed(6);
const pct = (v) => (100 * v).toFixed(1) + " %";

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  if (cls) e.className = cls;
  return e;
}

function table(id, head, rows) {
  const t = document.getElementById(id);
  t.replaceChildren();
  const tr = el("tr");
  head.forEach((h) => tr.append(el("th", h)));
  t.append(tr);
  if (!rows.length) {
    const empty = el("tr");
    const td = el("td", "no data yet", "empty");
    td.colSpan = head.length;
    empty.append(td);
    t.append(empty);
  }
  for (const row of rows) {
    const r = el("tr");
    row.forEach((c) => r.append(el("td", String(c))));
    t.append(r);
  }
}

// ---- Prometheus text format: [{name, labels, value}] -------------------------------------------------------
function parseMetrics(text) {
  const out = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = line.match(/^([a-zA-Z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)/);
    if (!m) continue;
    const labels = {};
    for (const l of (m[2] || "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    out.push({ name: m[1], labels, value: parseFloat(m[3]) });
  }
  return out;
}

function sumBy(samples, name, keyOf) {
  const sums = new Map();
  for (const s of samples) {
    if (s.name !== name) continue;
    const k = keyOf(s.labels);
    sums.set(k, (sums.get(k) || 0) + s.value);
  }
  return sums;
}

function quantile(q, buckets) {
  // buckets: [[le, cumulative count]] sorted; linear interpolation inside the bucket, as histogram_quantile
  const total = buckets.length ? buckets[buckets.length - 1][1] : 0;
  if (!total) return null;
  const rank = q * total;
  let prevLe = 0, prevCount = 0;
  for (const [le, count] of buckets) {
    if (count >= rank) {
      if (le === Infinity) return prevLe;
      return prevLe + (le - prevLe) * (count === prevCount ? 0 : (rank - prevCount) / (count - prevCount));
    }
    prevLe = le; prevCount = count;
  }
  return prevLe;
}

// ---- sections ---------------------------------------------------------------------------------------------
function renderUsage(u) {
  const t = u.totals;
  document.getElementById("spent").textContent = usd(t.spent_usd);
  document.getElementById("saved-net").textContent = usd(t.net_saved_usd);
  document.getElementById("requests").textContent = String(t.requests);
  const layerRows = LAYERS.map((l) => [l, usd(t.saved_usd[l])]);
  for (const [kind, v] of Object.entries(t.saving_costs_usd)) layerRows.push(["cost: " + kind, "-" + usd(v)]);
  table("saved-layers", ["layer", "saved"], layerRows);
  const rows = (byName) => Object.entries(byName).map(([name, x]) =>
    [name, x.requests, usd(x.spent_usd), usd(x.net_saved_usd)]);
  table("tenants", ["tenant", "requests", "spent", "saved (net)"], rows(u.tenants));
  table("routes", ["route", "requests", "spent", "saved (net)"], rows(u.routes));
  renderChart(u.series);
}

function renderChart(series) {
  const box = document.getElementById("chart");
  box.replaceChildren();
  if (!series.length) { box.append(el("p", "no data yet", "empty")); return; }
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  const w = 1000, h = 160, slot = w / series.length;
  const top = Math.max(...series.map((s) => Math.max(s.spent_usd, s.net_saved_usd)), 1e-12);
  svg.setAttribute("viewBox", `0 0 ${w} ${h + 20}`);
  series.forEach((s, i) => {
    [["spent", s.spent_usd], ["saved", Math.max(0, s.net_saved_usd)]].forEach(([cls, v], j) => {
      const r = document.createElementNS(ns, "rect");
      const bh = (v / top) * h;
      r.setAttribute("x", String(i * slot + j * slot * 0.45 + slot * 0.05));
      r.setAttribute("y", String(h - bh));
      r.setAttribute("width", String(slot * 0.4));
      r.setAttribute("height", String(bh));
      r.setAttribute("class", cls);
      const title = document.createElementNS(ns, "title");
      title.textContent = `${s.hour} ${cls} ${usd(v)}`;
      r.append(title);
      svg.append(r);
    });
    const label = document.createElementNS(ns, "text");
    label.setAttribute("x", String(i * slot + 2));
    label.setAttribute("y", String(h + 15));
    label.setAttribute("font-size", "11");
    label.textContent = s.hour.slice(11, 16);
    svg.append(label);
  });
  box.append(svg);
}

function renderMetrics(samples) {
  const lookups = sumBy(samples, "gateway_cache_lookups_total", (l) => l.layer + "|" + l.result);
  const layers = [...new Set([...lookups.keys()].map((k) => k.split("|")[0]))].sort();
  table("hit-rate", ["layer", "hits", "lookups", "hit rate"], layers.map((layer) => {
    const hits = lookups.get(layer + "|hit") || 0;
    let n = 0;
    for (const [k, v] of lookups) if (k.startsWith(layer + "|") && !k.endsWith("|bypass")) n += v;
    return [layer, hits, n, n ? pct(hits / n) : "—"];
  }));

  const byRoute = new Map();
  for (const s of samples) {
    if (s.name !== "gateway_request_duration_seconds_bucket") continue;
    const le = s.labels.le === "+Inf" ? Infinity : parseFloat(s.labels.le);
    if (!byRoute.has(s.labels.route)) byRoute.set(s.labels.route, []);
    byRoute.get(s.labels.route).push([le, s.value]);
  }
  const fmt = (v) => (v === null ? "—" : v.toFixed(4));
  table("latency", ["route", "P50", "P95", "P99"], [...byRoute].sort().map(([route, b]) => {
    b.sort((x, y) => x[0] - y[0]);
    return [route, fmt(quantile(0.5, b)), fmt(quantile(0.95, b)), fmt(quantile(0.99, b))];
  }));

  const errors = sumBy(samples, "gateway_upstream_errors_total", (l) => l.backend + "|" + (l.reason === "shed" ? "shed" : "error"));
  const backends = [...new Set([...errors.keys()].map((k) => k.split("|")[0]))].sort();
  table("errors", ["backend", "errors", "shed"], backends.map((b) => [b, errors.get(b + "|error") || 0, errors.get(b + "|shed") || 0]));

  const semantic = samples.filter((s) => /^gateway_cache_semantic_.*(wrong|budget|explor)/.test(s.name));
  table("semantic", ["metric", "labels", "value"], semantic.map((s) =>
    [s.name, Object.entries(s.labels).map(([k, v]) => `${k}=${v}`).join(", "), s.value]));
}

async function refresh(key) {
  const status = document.getElementById("status");
  try {
    const [usage, metrics] = await Promise.all([get("/admin/usage", key), get("/metrics", key)]);
    renderUsage(usage);
    renderMetrics(parseMetrics(metrics));
    status.textContent = "updated " + new Date().toLocaleTimeString();
    document.body.dataset.loaded = "1";
  } catch (e) {
    status.textContent = String(e.message || e);
  }
}

function start() {
  const key = adminKey();
  if (!key) {
    const form = document.getElementById("login");
    form.hidden = false;
    document.getElementById("status").textContent = "admin key needed";
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      sessionStorage.setItem("llmgw-admin-key", document.getElementById("key").value);
      form.hidden = true;
      start();
    });
    return;
  }
  refresh(key);
  setInterval(() => refresh(key), REFRESH_MS);
}

start();
