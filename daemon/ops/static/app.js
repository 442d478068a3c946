// batchd status page: fetches status.json every 2 s and updates the page in
// place. Everything is built with textContent, never innerHTML, since batch
// names come from users.
"use strict";

const REFRESH_MS = 2000;
const CHART_W = 600, CHART_H = 160, CHART_SPAN_S = 3600;
const $ = (id) => document.getElementById(id);

function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

const num = (n) => n.toLocaleString("en-US");

function rate(r) {
  return r >= 100 ? r.toFixed(0) : r >= 10 ? r.toFixed(1) : r.toFixed(2);
}

function duration(s) {
  s = Math.round(s);
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
  return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
}

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return n.toFixed(i ? 1 : 0) + " " + units[i];
}

function renderEngine(e, tps, diskFull) {
  const items = [
    ["engine", e.name || "—"],
    ["state", diskFull ? "disk full: intake paused" : e.hung ? "not answering" : e.paused ? "paused" : "running"],
    ["in flight", num(e.in_flight)],
    ["queued", num(e.queued)],
    ["handed / window", num(e.handed) + " / " + num(e.window)],
    ["waiting", num(e.waiting)],
    ["tokens/s", rate(tps)],
    ["prefix cache hits", e.prefix_cache_hit_rate == null ? "—" : (e.prefix_cache_hit_rate * 100).toFixed(1) + "%"],
    ["KV cache", e.kv_bytes_total == null ? "—" : bytes(e.kv_bytes_used) + " / " + bytes(e.kv_bytes_total)],
    ["retries", num(e.retries)],
  ];
  const dl = $("engine");
  dl.replaceChildren(...items.map(([k, v]) => {
    const d = el("div");
    d.append(el("dt", "", k), el("dd", k === "state" && (e.paused || e.hung || diskFull) ? "badge paused" : "", v));
    return d;
  }));
}

function renderChart(history, now) {
  const start = now - CHART_SPAN_S;
  const pts = history.filter((p) => p.unix >= start);
  const max = Math.max(1, ...pts.map((p) => p.tokens_per_second));
  const xy = pts.map((p) => [
    ((p.unix - start) / CHART_SPAN_S) * CHART_W,
    CHART_H - (p.tokens_per_second / max) * (CHART_H - 10),
  ]);
  const line = xy.map(([x, y]) => x.toFixed(1) + "," + y.toFixed(1)).join(" ");
  $("chart-line").setAttribute("points", line);
  $("chart-area").setAttribute("d", xy.length < 2 ? "" :
    "M" + xy[0][0].toFixed(1) + "," + CHART_H + " L" + line.replaceAll(" ", " L") +
    " L" + xy[xy.length - 1][0].toFixed(1) + "," + CHART_H + " Z");
  $("chart-max").textContent = pts.length ? "max " + rate(max) + " tokens/s" : "no samples yet";
}

// One table row per batch, kept across refreshes (keyed by data-batch) so the
// bars animate instead of being rebuilt.
function batchRow(id) {
  const tr = el("tr", "batch");
  tr.dataset.batch = id;
  const name = el("td");
  name.append(el("span", "name"), el("span", "id"));
  const bar = el("div", "bar");
  bar.append(el("div", "bar-fill"));
  const progress = el("td");
  progress.append(bar, el("span", "bar-label"));
  tr.append(name, el("td", "status"), progress, el("td", "counts"), el("td", "rate"), el("td", "eta"));
  return tr;
}

function updateRow(tr, b) {
  const pct = (b.progress * 100).toFixed(1) + "%";
  tr.className = "batch status-" + b.status;
  tr.querySelector(".name").textContent = b.name || b.id;
  tr.querySelector(".id").textContent = b.id + (b.endpoint ? " · " + b.endpoint : "");
  const badge = el("span", "badge " + b.status, b.status.replace("_", " "));
  tr.querySelector(".status").replaceChildren(badge);
  tr.querySelector(".bar-fill").style.width = pct;
  tr.querySelector(".bar-label").textContent = pct;
  tr.querySelector(".counts").textContent =
    num(b.completed + b.failed) + " / " + num(b.total) + (b.failed ? " · " + num(b.failed) + " failed" : "");
  tr.querySelector(".rate").textContent = b.rate > 0 ? rate(b.rate) + " req/s" : "—";
  tr.querySelector(".eta").textContent = b.eta_seconds == null ? "—" : duration(b.eta_seconds);
}

function renderBatches(batches) {
  const body = $("batches");
  const rows = new Map([...body.children].map((tr) => [tr.dataset.batch, tr]));
  for (const b of batches) {
    const tr = rows.get(b.id) || batchRow(b.id);
    rows.delete(b.id);
    updateRow(tr, b);
    body.append(tr); // appending an existing row moves it: the order follows the server's
  }
  for (const tr of rows.values()) tr.remove();
  $("no-batches").hidden = batches.length > 0;
}

async function refresh() {
  try {
    const resp = await fetch("status.json", { cache: "no-store" });
    const st = await resp.json();
    if (!resp.ok) throw new Error(st.error || resp.statusText);
    renderEngine(st.engine, st.tokens_per_second, st.disk_full);
    renderChart(st.history, st.now);
    renderBatches(st.batches);
    $("updated").textContent = "updated " + new Date(st.now * 1000).toLocaleTimeString();
    $("error").hidden = true;
  } catch (err) {
    $("error").textContent = "Status unavailable: " + err.message + " (showing the last good data)";
    $("error").hidden = false;
  } finally {
    setTimeout(refresh, REFRESH_MS);
  }
}

refresh();
