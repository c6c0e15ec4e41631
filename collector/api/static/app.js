// gpuwatch web page: reads only the public REST API (/api/v1) with the user's token.
// Views: #/ (fleet), #/incidents (anomalies, alerts, events), #/gpu/<uuid>,
// #/service/<namespace>/<name>, #/kernels/<namespace>/<name> (the CUPTI probe's kernels). Charts: Plotly, served from the installed plotly package at
// /vendor/plotly.min.js. Empty buckets arrive as nulls and are drawn as gaps (connectgaps off).
"use strict";

const API = "/api/v1";
const $ = (sel) => document.querySelector(sel);
let refreshTimer = null;

function token() { return sessionStorage.getItem("gpuwatch-token") || ""; }

function setStatus(text) { $("#status").textContent = text || ""; }

async function api(path, params) {
  const url = new URL(API + path, location.origin);
  for (const [k, v] of Object.entries(params || {})) if (v != null) url.searchParams.set(k, v);
  const resp = await fetch(url, { headers: { Authorization: "Bearer " + token() } });
  const body = await resp.json().catch(() => ({}));
  if (!resp.ok) throw new Error(`${resp.status}: ${body.message || resp.statusText}`);
  return body;
}

// The XID table and the clock-event reason bits, as the collector's detectors know them
// (/gpu-facts): fetched once, never copied into this file.
let factsPromise = null;
function gpuFacts() {
  if (!factsPromise) {
    factsPromise = api("/gpu-facts").then((f) => ({
      xids: new Map(f.xids.map((x) => [x.code, x])),
      reasons: new Map(f.clock_event_reasons.map((r) => [r.bit, r])),
    })).catch((err) => { factsPromise = null; throw err; });
  }
  return factsPromise;
}

function eventText(e, facts) {
  // an XID event carries only its code: say what it means and what to do
  if (e.kind !== "xid" || e.code == null) return [e.detail, ""];
  const x = facts.xids.get(e.code);
  if (!x) return [e.detail || `XID ${e.code}: not in gpuwatch's table (see NVIDIA's XID catalog)`, ""];
  return [e.detail || `XID ${e.code}: ${x.meaning}`, `${x.severity}: ${x.action}`];
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text != null) e.textContent = text;
  if (cls) e.className = cls;
  return e;
}

function cell(row, text, cls) {
  const td = el("td", text, cls);
  row.appendChild(td);
  return td;
}

function link(href, text) {
  const a = el("a", text);
  a.href = href;
  return a;
}

const pct = (v) => (v == null ? "–" : (100 * v).toFixed(1) + " %");
const fixed = (v, unit, digits = 0) => (v == null ? "–" : v.toFixed(digits) + " " + unit);
const gib = (mib) => (mib == null ? null : mib / 1024);
const when = (t) => (t == null ? "–" : new Date(t).toLocaleString());

function age(seconds) {
  if (seconds == null) return "never";
  if (seconds < 120) return `${seconds.toFixed(0)} s`;
  if (seconds < 7200) return `${(seconds / 60).toFixed(0)} min`;
  if (seconds < 172800) return `${(seconds / 3600).toFixed(0)} h`;
  return `${(seconds / 86400).toFixed(0)} days`;
}

function duration(seconds) {
  if (seconds == null) return "–";
  if (seconds < 120) return `${seconds.toFixed(0)} s`;
  if (seconds < 7200) return `${(seconds / 60).toFixed(1)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}

function gpuTime(seconds) {
  // GPU time in the unit that keeps it readable (a short run is seconds, not "0.00 GPU-hours")
  if (seconds == null) return "–";
  if (seconds < 120) return `${seconds.toFixed(0)} GPU-seconds`;
  if (seconds < 7200) return `${(seconds / 60).toFixed(1)} GPU-minutes`;
  return `${(seconds / 3600).toFixed(2)} GPU-hours`;
}

const gpuName = (g) => `${g.node} · GPU ${g.gpu_index == null ? "?" : g.gpu_index}`;
const podName = (p) => `${p.namespace || "?"}/${p.pod || "?"}`;
const serviceHref = (ns, svc) => `#/service/${encodeURIComponent(ns || "")}/${encodeURIComponent(svc)}`;
const gpuHref = (uuid) => "#/gpu/" + encodeURIComponent(uuid);
const kernelsHref = (ns, svc) => `#/kernels/${encodeURIComponent(ns || "")}/${encodeURIComponent(svc)}`;

function show(id) {
  for (const s of ["#fleet-view", "#incidents-view", "#gpu-view", "#service-view", "#kernels-view"]) {
    $(s).hidden = s !== id;
  }
}

function podsInto(td, pods) {
  if (!pods.length) { td.textContent = "–"; return; }
  pods.forEach((p, i) => {
    if (i) td.appendChild(document.createTextNode(", "));
    const span = el("span", podName(p) + (p.processes > 1 ? ` ×${p.processes}` : ""), "pod");
    span.title = p.processes > 1 ? `${p.processes} processes` : "";
    if (p.service) {
      span.appendChild(document.createTextNode(" ("));
      span.appendChild(link(serviceHref(p.namespace, p.service), p.service));
      span.appendChild(document.createTextNode(")"));
    }
    td.appendChild(span);
  });
}

function healthInto(td, g) {
  td.appendChild(el("span", g.health.replace("_", " "), "badge health-" + g.health));
  if (g.reasons.length) {
    td.appendChild(el("small", " " + g.reasons[0], "reason"));
    td.title = g.reasons.join("\n");
  }
}

async function fleetView() {
  show("#fleet-view");
  const [gpus, services] = await Promise.all([api("/gpus"), api("/services")]);
  const tbody = $("#fleet tbody");
  tbody.replaceChildren();
  const counts = {};
  for (const g of gpus.items) {
    counts[g.health] = (counts[g.health] || 0) + 1;
    const tr = document.createElement("tr");
    tr.dataset.gpu = g.gpu;
    tr.dataset.health = g.health;
    cell(tr, g.node);
    const name = cell(tr, "");
    name.appendChild(link(gpuHref(g.gpu), `GPU ${g.gpu_index == null ? "?" : g.gpu_index}`));
    name.title = g.gpu;
    cell(tr, g.model || "–");
    podsInto(cell(tr, "", "pods"), g.pods);
    const m = g.metrics;
    cell(tr, pct(m.DCGM_FI_PROF_SM_ACTIVE), "num");
    const used = gib(m.DCGM_FI_DEV_FB_USED);
    const total = m.DCGM_FI_DEV_FB_FREE == null || used == null ? null : used + gib(m.DCGM_FI_DEV_FB_FREE);
    cell(tr, used == null ? "–" : `${used.toFixed(1)}${total == null ? "" : " / " + total.toFixed(0)} GiB`, "num");
    const limit = m.DCGM_FI_DEV_POWER_MGMT_LIMIT;
    cell(tr, m.DCGM_FI_DEV_POWER_USAGE == null ? "–"
      : `${m.DCGM_FI_DEV_POWER_USAGE.toFixed(0)}${limit == null ? "" : " / " + limit.toFixed(0)} W`, "num");
    cell(tr, fixed(m.DCGM_FI_DEV_GPU_TEMP, "°C"), "num");
    healthInto(cell(tr, "", "health"), g);
    cell(tr, age(g.sample_age_seconds), "num age" + (g.stale ? " old" : ""));
    const anomalies = cell(tr, "", "num");
    if (g.open_anomalies) anomalies.appendChild(link(`#/incidents`, String(g.open_anomalies)));
    else anomalies.textContent = "0";
    tbody.appendChild(tr);
  }
  $("#fleet-summary").textContent = `${gpus.items.length} GPUs, ${new Date().toLocaleTimeString()}`;
  const chips = $("#fleet-health");
  chips.replaceChildren();
  for (const state of ["critical", "no_data", "stale", "degraded", "ok"]) {
    if (counts[state]) chips.appendChild(el("span", `${counts[state]} ${state.replace("_", " ")}`,
                                            "badge health-" + state));
  }
  const list = $("#services");
  list.replaceChildren();
  for (const s of services.items) {
    const li = document.createElement("li");
    li.appendChild(link(serviceHref(s.namespace, s.service), `${s.namespace || "?"}/${s.service}`));
    li.appendChild(document.createTextNode(` — ${s.gpu_count} GPU${s.gpu_count === 1 ? "" : "s"}, ` +
                                           `pods ${s.pods.join(", ")}`));
    list.appendChild(li);
  }
}

async function gpuIndex() {
  // GPU labels (node · index) for the lists; GPUs the token cannot see now keep their UUID
  const gpus = await api("/gpus");
  return new Map(gpus.items.map((g) => [g.gpu, g]));
}

function gpuCell(tr, uuid, node, known) {
  const td = cell(tr, "");
  if (!uuid) { td.textContent = node || "–"; return; }
  const g = known.get(uuid);
  td.appendChild(link(gpuHref(uuid), g ? gpuName(g) : `${node || "?"} · …${uuid.slice(-8)}`));
  td.title = uuid;
}

async function incidentsView() {
  show("#incidents-view");
  const span = Number($("#incidents-range").value);
  const end = Date.now() / 1000;
  const range = { start: (end - span).toFixed(0), end: end.toFixed(0), limit: 100 };
  const [known, anomalies, alerts, events, facts] = await Promise.all([
    gpuIndex(), api("/anomalies", range), api("/alerts", range), api("/events", range), gpuFacts()]);
  const more = (page) => (page.next_cursor ? " (newest 100)" : "");
  $("#anomalies-count").textContent = `${anomalies.items.length}${more(anomalies)}`;
  $("#alerts-count").textContent = `${alerts.items.length}${more(alerts)}`;
  $("#events-count").textContent = `${events.items.length}${more(events)}`;
  let tbody = $("#anomalies tbody");
  tbody.replaceChildren();
  for (const a of anomalies.items) {
    const tr = document.createElement("tr");
    tr.dataset.id = a.id;
    cell(tr, a.end_ts ? "closed" : "open", a.end_ts ? "" : "open");
    cell(tr, a.severity, "sev-" + a.severity);
    cell(tr, a.kind);
    gpuCell(tr, a.gpu, a.node, known);
    const who = cell(tr, "");
    if (a.pod || a.service) podsInto(who, [{ namespace: a.namespace, pod: a.pod, service: a.service, processes: 1 }]);
    else who.textContent = "–";
    cell(tr, when(a.start_ts));
    cell(tr, when(a.end_ts));
    cell(tr, a.summary, "summary").title = (a.causes || []).join("\n");
    profileCell(cell(tr, "", "profile"), a);
    tbody.appendChild(tr);
  }
  if (!anomalies.items.length) tbody.appendChild(emptyRow(9, "no anomalies in this range"));
  tbody = $("#alerts tbody");
  tbody.replaceChildren();
  for (const a of alerts.items) {
    const tr = document.createElement("tr");
    cell(tr, a.status, a.status === "firing" ? "open" : "");
    cell(tr, a.severity, "sev-" + a.severity);
    cell(tr, a.rule);
    gpuCell(tr, a.gpu, a.node, known);
    const svc = cell(tr, "");
    if (a.service) svc.appendChild(link(serviceHref(a.namespace, a.service), `${a.namespace || "?"}/${a.service}`));
    else svc.textContent = "–";
    cell(tr, when(a.starts_at));
    cell(tr, when(a.ends_at));
    cell(tr, a.summary, "summary");
    tbody.appendChild(tr);
  }
  if (!alerts.items.length) tbody.appendChild(emptyRow(8, "no alerts in this range"));
  tbody = $("#events tbody");
  tbody.replaceChildren();
  for (const e of events.items) {
    const tr = document.createElement("tr");
    cell(tr, when(e.ts));
    gpuCell(tr, e.gpu, e.node, known);
    cell(tr, e.kind);
    cell(tr, e.code == null ? "–" : String(e.code), "num");
    const [text, hint] = eventText(e, facts);
    const td = cell(tr, text, "summary");
    if (hint) td.title = hint;
    tbody.appendChild(tr);
  }
  if (!events.items.length) tbody.appendChild(emptyRow(5, "no events in this range"));
}

// An anomaly's CPU profile: a button that draws its flame graph when one was captured, else the
// status (requested, disabled, not_python, permission_denied, ...) with the reason as its title.
function profileCell(td, a) {
  const p = a.profile;
  if (!p) { td.textContent = "–"; return; }
  td.title = p.reason;
  if (p.status !== "captured") { td.textContent = p.status.replaceAll("_", " "); return; }
  const button = el("button", "flame graph", "flame-button");
  button.addEventListener("click", () => showProfile(a).catch((err) => setStatus(String(err))));
  td.appendChild(button);
}

async function showProfile(a) {
  const frame = await api(`/anomalies/${encodeURIComponent(a.id)}/profile`);
  $("#profile-title").textContent = `${a.kind} on ${a.node} · ${frame.meta.custom.reason}`;
  drawFlameGraph($("#flamegraph"), frame);
  $("#profile-view").hidden = false;
  $("#profile-view").scrollIntoView();
}

// The data frame of Grafana's flame graph panel (level, value, self, label: nested set, depth
// first) as nested bars: a node starts where its previous sibling ended, under its parent.
function drawFlameGraph(box, frame, unit = "samples") {
  const f = Object.fromEntries(frame.fields.map((x) => [x.name, x.values]));
  const total = f.value[0] || 1;
  const next = [];  // per level: where the next child of the node open at the level above starts
  let depth = 0;
  box.replaceChildren();
  for (let i = 0; i < f.level.length; i++) {
    const level = f.level[i];
    const x = level === 0 ? 0 : next[level - 1];
    if (level > 0) next[level - 1] += f.value[i];
    next[level] = x;
    depth = Math.max(depth, level + 1);
    const bar = el("div", f.label[i], "frame");
    bar.style.left = `${(100 * x) / total}%`;
    bar.style.width = `${(100 * f.value[i]) / total}%`;
    bar.style.top = `${level * 18}px`;
    bar.style.background = `hsl(${20 + ((f.label[i].length * 37) % 40)}, 85%, ${62 + (level % 3) * 6}%)`;
    bar.title = `${f.label[i]}\n${f.value[i]} ${unit} (${((100 * f.value[i]) / total).toFixed(1)} %), ` +
      `${f.self[i]} in the frame itself`;
    box.appendChild(bar);
  }
  box.style.height = `${depth * 18}px`;
}

function emptyRow(span, text) {
  const tr = document.createElement("tr");
  const td = cell(tr, text, "empty");
  td.colSpan = span;
  return tr;
}

const COLOURS = { critical: "#c62828", warning: "#e69500", info: "#1f77b4", event: "#7b1fa2" };

function chart(container, id, title, traces, layout) {
  let div = document.getElementById(id);
  if (!div) {
    div = el("div", null, "chart");
    div.id = id;
    container.appendChild(div);
  }
  for (const t of traces) {
    t.connectgaps = false;  // a null is a gap in the data: never draw across it
    if (t.type === undefined) t.type = "scatter";
  }
  Plotly.react(div, traces, {
    // one left margin for every chart, so their time axes line up
    title: { text: title, font: { size: 14 }, x: 0, xref: "paper", xanchor: "left", y: 1, yref: "paper",
             yanchor: "bottom", pad: { b: 6 } },
    margin: { t: 34, r: 16, b: 32, l: 120 }, hovermode: "x unified",
    legend: { orientation: "h", x: 1, xanchor: "right", y: 1, yanchor: "bottom" },
    showlegend: traces.length > 1, ...layout,
    xaxis: { type: "date", ...(layout.xaxis || {}) },
    yaxis: { exponentformat: "none", separatethousands: true, rangemode: "tozero", ...(layout.yaxis || {}) },
  }, { displayModeBar: false, responsive: true });
}

function peak(...series) {
  // the largest reading of the series (1 if none), for an axis with room above its top line
  let top = 0;
  for (const ys of series) for (const v of ys) if (v != null && v > top) top = v;
  return top || 1;
}

function line(x, y, name, extra) {
  // small markers too, so that a reading between two gaps still shows
  return { x, y, name, mode: "lines+markers", line: { width: 1.6 }, marker: { size: 3 }, ...extra };
}

function markShapes(anomalies, events, endMs, annotate) {
  // anomalies as shaded spans (to their end, or now while open); events as dashed lines
  const shapes = [];
  const notes = [];
  for (const a of anomalies) {
    const x0 = new Date(a.start_ts);
    const x1 = a.end_ts ? new Date(a.end_ts) : new Date(endMs);
    shapes.push({ type: "rect", xref: "x", yref: "paper", x0, x1, y0: 0, y1: 1, line: { width: 0 },
                  fillcolor: COLOURS[a.severity] || COLOURS.info, opacity: 0.14, layer: "below" });
    if (annotate) notes.push({ x: x0, y: 1, xref: "x", yref: "paper", text: a.kind, showarrow: false,
                               xanchor: "left", yanchor: "top", font: { size: 10, color: COLOURS[a.severity] } });
  }
  for (const e of events) {
    if (e.kind.startsWith("throttle_")) continue;  // drawn in the throttle chart
    const x = new Date(e.ts);
    shapes.push({ type: "line", xref: "x", yref: "paper", x0: x, x1: x, y0: 0, y1: 1,
                  line: { color: COLOURS.event, width: 1, dash: "dot" } });
    if (annotate) notes.push({ x, y: 0, xref: "x", yref: "paper", text: e.kind + (e.code ? " " + e.code : ""),
                               showarrow: false, xanchor: "left", yanchor: "bottom", textangle: -90,
                               font: { size: 10, color: COLOURS.event } });
  }
  return { shapes, annotations: notes };
}

function throttleTraces(events, startMs, endMs, facts) {
  // throttle_start / throttle_end pairs per reason (the event code is the reason's bit)
  const byCode = new Map();
  const ordered = [...events].filter((e) => e.kind.startsWith("throttle_")).sort((a, b) => a.ts.localeCompare(b.ts));
  for (const e of ordered) {
    const reason = facts.reasons.get(e.code);
    const name = reason ? reason.name : "0x" + (e.code || 0).toString(16);
    const r = byCode.get(e.code) || { name, spans: [], open: null };
    byCode.set(e.code, r);
    if (e.kind === "throttle_start" && r.open == null) r.open = new Date(e.ts);
    else if (e.kind === "throttle_end") {
      r.spans.push([r.open || new Date(startMs), new Date(e.ts)]);
      r.open = null;
    }
  }
  const traces = [];
  for (const r of byCode.values()) {
    if (r.open) r.spans.push([r.open, new Date(endMs)]);
    const x = [];
    const y = [];
    for (const [a, b] of r.spans) x.push(a, b, null), y.push(r.name, r.name, null);
    traces.push({ x, y, name: r.name, mode: "lines", line: { width: 12 }, hoverinfo: "name+x" });
  }
  return traces;
}

const SERIES = ["DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
  "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_POWER_MGMT_LIMIT",
  "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK",
  // the inference server of the pod on the GPU, where the agent scrapes it (absent otherwise)
  "gpuwatch_inference_requests_per_second", "gpuwatch_inference_queue_seconds",
  "gpuwatch_inference_pending_requests"];

function gpuStep(seconds) {
  // at least the agent's longest interval (10 s), so an idle GPU's buckets are not empty
  if (seconds <= 900) return "15s";
  if (seconds <= 3600) return "30s";
  if (seconds <= 21600) return "2m";
  return "5m";
}

async function gpuView(uuid) {
  show("#gpu-view");
  const span = Number($("#gpu-range").value);
  const endS = Date.now() / 1000;
  const range = { start: (endS - span).toFixed(0), end: endS.toFixed(0) };
  const [known, data, anomalies, events, facts] = await Promise.all([
    gpuIndex(),
    api(`/gpus/${encodeURIComponent(uuid)}/series`, { metrics: SERIES.join(","), ...range, step: gpuStep(span) }),
    api("/anomalies", { gpu: uuid, ...range, limit: 200 }),
    api("/events", { gpu: uuid, ...range, limit: 500 }),
    gpuFacts(),
  ]);
  const g = known.get(uuid);
  const pods = g && g.pods.length ? g.pods.map(podName).join(", ") : "no pod";
  $("#gpu-title").textContent = g ? `${gpuName(g)} · ${g.model || "unknown model"} · ${pods}` : `GPU ${uuid}`;
  $("#gpu-title").title = uuid;
  const health = $("#gpu-health");
  health.replaceChildren();
  if (g) {
    healthInto(health, g);
    health.appendChild(document.createTextNode(` · newest sample ${age(g.sample_age_seconds)} ago · ${uuid}`));
  }
  const s = data.series;
  const read = data.times.length - s.DCGM_FI_PROF_SM_ACTIVE.filter((v) => v == null).length;
  $("#gpu-facts").textContent = `${data.times.length} buckets of ${data.step_seconds} s (${read} with data), ` +
    `from ${data.source === "raw" ? "raw samples" : "the " + data.source + " rollup"}`;
  const x = data.times.map((t) => new Date(t * 1000));
  const startMs = Number(range.start) * 1000;
  const endMs = Number(range.end) * 1000;
  const xaxis = { range: [new Date(startMs), new Date(endMs)] };
  const marks = (first) => markShapes(anomalies.items, events.items, endMs, first);
  const box = $("#gpu-charts");
  const used = s.DCGM_FI_DEV_FB_USED.map(gib);
  const total = s.DCGM_FI_DEV_FB_USED.map((u, i) => (u == null || s.DCGM_FI_DEV_FB_FREE[i] == null ? null
    : gib(u + s.DCGM_FI_DEV_FB_FREE[i])));
  chart(box, "chart-activity", "Activity", [
    line(x, s.DCGM_FI_PROF_SM_ACTIVE, "SM active"),
    line(x, s.DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, "tensor active"),
    line(x, s.DCGM_FI_PROF_DRAM_ACTIVE, "DRAM active"),
  ], { xaxis, yaxis: { tickformat: ".0%", range: [0, 1.02] }, ...marks(true) });
  chart(box, "chart-memory", "Memory", [
    line(x, used, "used", { hovertemplate: "%{y:.1f} GiB" }),
    line(x, total, "total", { line: { dash: "dash", width: 1, color: "#888" }, hovertemplate: "%{y:.0f} GiB" }),
  ], { xaxis, yaxis: { ticksuffix: " GiB", tickformat: ",.0f", range: [0, 1.08 * peak(total, used)] },
        ...marks(false) });
  chart(box, "chart-power", "Power", [
    line(x, s.DCGM_FI_DEV_POWER_USAGE, "power", { hovertemplate: "%{y:.0f} W" }),
    line(x, s.DCGM_FI_DEV_POWER_MGMT_LIMIT, "power limit",
         { line: { dash: "dash", width: 1.2, color: COLOURS.critical }, hovertemplate: "%{y:.0f} W" }),
  ], { xaxis, yaxis: { ticksuffix: " W", tickformat: ",.0f",
                       range: [0, 1.08 * peak(s.DCGM_FI_DEV_POWER_MGMT_LIMIT, s.DCGM_FI_DEV_POWER_USAGE)] },
        ...marks(false) });
  chart(box, "chart-temperature", "Temperature", [
    line(x, s.DCGM_FI_DEV_GPU_TEMP, "GPU"), line(x, s.DCGM_FI_DEV_MEMORY_TEMP, "memory"),
  ], { xaxis, yaxis: { ticksuffix: " °C", tickformat: ",.0f" }, ...marks(false) });
  chart(box, "chart-clocks", "Clocks", [
    line(x, s.DCGM_FI_DEV_SM_CLOCK, "SM clock"), line(x, s.DCGM_FI_DEV_MEM_CLOCK, "memory clock"),
  ], { xaxis, yaxis: { ticksuffix: " MHz", tickformat: ",.0f" }, ...marks(false) });
  inferenceChart(box, x, s, xaxis, marks(false));
  const throttle = throttleTraces(events.items, startMs, endMs, facts);
  chart(box, "chart-throttle", throttle.length ? "Throttle reasons (clock events)" : "Throttle reasons: none in this range",
        throttle, { xaxis, yaxis: { type: "category", rangemode: "normal" }, showlegend: false,
                    shapes: marks(false).shapes });
}

function inferenceChart(box, x, s, xaxis, marks) {
  // requests/s and pending requests (left axis), mean queue time (right axis, ms): only for a GPU
  // whose pod's inference server the agent scrapes (annotation gpuwatch.io/scrape-port)
  const rps = s.gpuwatch_inference_requests_per_second;
  const queue = s.gpuwatch_inference_queue_seconds.map((v) => (v == null ? null : 1000 * v));
  const pending = s.gpuwatch_inference_pending_requests;
  const old = document.getElementById("chart-inference");
  if (![rps, queue, pending].some((ys) => ys.some((v) => v != null))) {
    if (old) old.remove();
    return;
  }
  chart(box, "chart-inference", "Inference server (the pod's own figures)", [
    line(x, rps, "requests/s", { hovertemplate: "%{y:.1f} req/s" }),
    line(x, pending, "pending", { hovertemplate: "%{y:.0f}" }),
    line(x, queue, "queue time", { yaxis: "y2", line: { dash: "dot", width: 1.6 }, hovertemplate: "%{y:.1f} ms" }),
  ], { xaxis, yaxis: { tickformat: ",.1f" },
       yaxis2: { overlaying: "y", side: "right", ticksuffix: " ms", rangemode: "tozero", showgrid: false },
       ...marks });
}

function serviceStep(seconds) {
  if (seconds <= 3600) return "1m";
  if (seconds <= 86400) return "5m";
  return "1h";
}

async function serviceView(namespace, name) {
  show("#service-view");
  $("#service-title").textContent = `${namespace || "?"}/${name}`;
  $("#service-kernels").href = kernelsHref(namespace, name);
  const span = Number($("#service-range").value);
  const end = Date.now() / 1000;
  const step = serviceStep(span);
  const params = { start: (end - span).toFixed(0), end: end.toFixed(0), step, namespace: namespace || null };
  const h = await api(`/services/${encodeURIComponent(name)}/history`, params);
  const t = h.total;
  $("#service-total").textContent =
    `${gpuTime(t.gpu_seconds)} over ${duration(t.running_seconds)} running` +
    (t.gpus_while_running == null ? "" : ` (${t.gpus_while_running.toFixed(2)} GPUs while running)`) +
    `, ${t.energy_kwh.toFixed(3)} kWh, cost ${t.cost.toFixed(2)} ${h.currency} ` +
    `at ${h.price_per_gpu_hour} ${h.currency} per GPU-hour; steps of ${step}`;
  const x = h.steps.map((st) => new Date(st.t * 1000));
  const xaxis = { range: [new Date((end - span) * 1000), new Date(end * 1000)] };
  const box = $("#service-charts");
  const pts = { marker: { size: 5 } };
  chart(box, "svc-gpus", "GPUs held", [
    line(x, h.steps.map((st) => st.gpus_while_running), "while running", pts),
    line(x, h.steps.map((st) => st.gpus_window_avg), "average over each step", pts),
  ], { xaxis, yaxis: { tickformat: ",.2~f" } });
  chart(box, "svc-active", "SM and tensor active (while running)", [
    line(x, h.steps.map((st) => st.sm_active), "SM active", pts),
    line(x, h.steps.map((st) => st.tensor_active), "tensor active", pts),
  ], { xaxis, yaxis: { tickformat: ".0%", range: [0, 1.02] } });
  chart(box, "svc-memory", "Memory of all its processes (while running)", [
    line(x, h.steps.map((st) => gib(st.memory_used_mib_while_running)), "memory", { ...pts,
      hovertemplate: "%{y:.1f} GiB" }),
  ], { xaxis, yaxis: { ticksuffix: " GiB", tickformat: ",.0f" } });
  chart(box, "svc-cost", `Cost per ${step} step (${h.currency})`,
        [{ x, y: h.steps.map((st) => st.cost), type: "bar", name: "cost" }], { xaxis, yaxis: { tickformat: ",.2f" } });
  const tbody = $("#pods tbody");
  tbody.replaceChildren();
  for (const p of h.pods) {
    const tr = document.createElement("tr");
    cell(tr, p.namespace || "–");
    cell(tr, p.pod || "–");
    cell(tr, duration(p.running_seconds), "num");
    cell(tr, p.gpus_while_running == null ? "–" : p.gpus_while_running.toFixed(2), "num");
    cell(tr, p.gpus_window_avg.toFixed(3), "num");
    cell(tr, gpuTime(p.gpu_seconds), "num");
    cell(tr, pct(p.sm_active), "num");
    cell(tr, pct(p.tensor_active), "num");
    cell(tr, fixed(gib(p.memory_used_mib_while_running), "GiB", 1), "num");
    cell(tr, fixed(p.energy_kwh, "kWh", 3), "num");
    cell(tr, fixed(p.cost, h.currency, 2), "num");
    tbody.appendChild(tr);
  }
  if (!h.pods.length) tbody.appendChild(emptyRow(11, "no pod of this service held a GPU in this range"));
}

const SPARK = "▁▂▃▄▅▆▇█";
// a kernel's share per bucket as a line of block characters (a dot where the bucket had no kernels)
const spark = (trend) => trend.map((v) => (v == null ? "·" : SPARK[Math.min(7, Math.floor(v * 8))])).join("");
const micro = (us) => (us >= 1000 ? `${(us / 1000).toFixed(2)} ms` : `${us.toFixed(1)} µs`);

// A service's kernels (GET /services/{name}/kernels): coverage, hints, the heaviest kernels with their
// share and trend, and the flame graph of kernel time (pod, category, kernel) drawn as the CPU profile's.
async function kernelsView(namespace, name) {
  show("#kernels-view");
  $("#kernels-title").textContent = `${namespace || "?"}/${name}`;
  const end = Date.now() / 1000;
  const params = { since: (end - Number($("#kernels-range").value)).toFixed(0), until: end.toFixed(0),
                   namespace: namespace || null };
  const path = `/services/${encodeURIComponent(name)}/kernels`;
  const [k, frame] = await Promise.all([api(path, { ...params, limit: 20 }), api(path + "/flamegraph", params)]);
  const c = k.coverage;
  $("#kernels-summary").textContent =
    `${c.windows} windows of ${c.processes} process${c.processes === 1 ? "" : "es"} in ${c.pods} pod` +
    `${c.pods === 1 ? "" : "s"}, ${c.recorded_seconds.toFixed(0)} s recorded; ${k.kernel_names} kernels, ` +
    `${k.kernel_seconds.toFixed(2)} s of kernel time; GPU idle between kernels ${pct(k.gpu.idle_share)}; ` +
    `${k.syncs.calls_per_second.toFixed(0)} syncs/s, ${k.launches.calls_per_second.toFixed(0)} launches/s` +
    (c.dropped_records ? `; ${c.dropped_records} CUPTI records dropped` : "");
  const hints = $("#kernel-hints");
  hints.replaceChildren();
  for (const h of k.hints) hints.appendChild(el("li", h.message, h.severity));
  if (!k.hints.length) hints.appendChild(el("li", "no hint: nothing in these figures stands out"));
  const tbody = $("#kernels tbody");
  tbody.replaceChildren();
  for (const x of k.kernels) {
    const tr = document.createElement("tr");
    cell(tr, x.name, "kernel");
    cell(tr, x.category);
    cell(tr, pct(x.share), "num");
    cell(tr, fixed(x.time_seconds, "s", 3), "num");
    cell(tr, x.calls_per_second.toFixed(0), "num");
    cell(tr, micro(x.mean_us), "num");
    cell(tr, micro(x.p95_us), "num");
    cell(tr, `${x.grid.join("×")} × ${x.block.join("×")}`).title =
      `${x.registers} registers/thread, ${x.shared_bytes} B shared memory/block`;
    cell(tr, pct(x.occupancy), "num");
    cell(tr, spark(x.trend), "spark").title = x.trend.map((v) => pct(v)).join(" ");
    tbody.appendChild(tr);
  }
  drawFlameGraph($("#kernel-flamegraph"), frame, "µs");
}

async function route() {
  clearTimeout(refreshTimer);
  if (!token()) {
    setStatus("Paste an API token (gpuwatch token create --role viewer) to begin.");
    return;
  }
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  for (const [id, on] of [["#nav-fleet", parts[0] === ""], ["#nav-incidents", parts[0] === "incidents"]]) {
    $(id).classList.toggle("current", on);
  }
  try {
    if (parts[0] === "gpu" && parts[1]) await gpuView(parts[1]);
    else if (parts[0] === "service" && parts[2]) await serviceView(parts[1], parts[2]);
    else if (parts[0] === "kernels" && parts[2]) await kernelsView(parts[1], parts[2]);
    else if (parts[0] === "incidents") await incidentsView();
    else await fleetView();
    setStatus("");
  } catch (err) {
    setStatus(String(err.message || err));
  }
  refreshTimer = setTimeout(route, 10000);
}

async function whoami() {
  try {
    const me = await api("/me");
    $("#who").textContent = `${me.role}${me.namespaces ? " · " + me.namespaces.join(", ") : ""}`;
  } catch (err) {
    $("#who").textContent = "";
    setStatus(String(err.message || err));
  }
}

window.addEventListener("DOMContentLoaded", () => {
  // `gpuwatch up` prints the page's address with its run's token in the fragment, which
  // never reaches a server or its access log; keep it for this tab and drop it from the bar
  const given = location.hash.match(/^#token=([^&/]+)/);
  if (given) {
    sessionStorage.setItem("gpuwatch-token", decodeURIComponent(given[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
  $("#login").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem("gpuwatch-token", $("#token").value.trim());
    $("#token").value = "";
    whoami().then(route);
  });
  for (const id of ["#gpu-range", "#service-range", "#incidents-range", "#kernels-range"]) {
    $(id).addEventListener("change", route);
  }
  window.addEventListener("hashchange", route);
  if (token()) whoami();
  route();
});
