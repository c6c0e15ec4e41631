// gpuwatch web page: reads only the public REST API (/api/v1) with the user's token.
// Views: #/ (fleet), #/gpu/<uuid>, #/service/<namespace>/<name>. Charts: Plotly, served
// from the installed plotly package at /vendor/plotly.min.js.
"use strict";

const API = "/api/v1";
const $ = (sel) => document.querySelector(sel);
let refreshTimer = null;

function token() { return sessionStorage.getItem("gpuwatch-token") || ""; }

function setStatus(text) { $("#status").textContent = text || ""; }

async function api(path, params) {
  const url = new URL(API + path, location.origin);
  for (const [k, v] of Object.entries(params || {})) url.searchParams.set(k, v);
  const resp = await fetch(url, { headers: { Authorization: "Bearer " + token() } });
  const body = await resp.json().catch(() => ({}));
  if (!resp.ok) throw new Error(`${resp.status}: ${body.message || resp.statusText}`);
  return body;
}

function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  row.appendChild(td);
  return td;
}

function link(href, text) {
  const a = document.createElement("a");
  a.href = href;
  a.textContent = text;
  return a;
}

const pct = (v) => (v == null ? "–" : (100 * v).toFixed(1) + " %");
const fixed = (v, unit, digits = 0) => (v == null ? "–" : v.toFixed(digits) + " " + unit);

function show(id) {
  for (const s of ["#fleet-view", "#gpu-view", "#service-view"]) $(s).hidden = s !== id;
}

async function fleetView() {
  show("#fleet-view");
  const [gpus, services] = await Promise.all([api("/gpus"), api("/services")]);
  const tbody = $("#fleet tbody");
  tbody.replaceChildren();
  for (const g of gpus.items) {
    const tr = document.createElement("tr");
    tr.dataset.gpu = g.gpu;
    cell(tr, g.node);
    cell(tr, "").appendChild(link("#/gpu/" + encodeURIComponent(g.gpu), "…" + g.gpu.slice(-12)));
    cell(tr, g.model || "–");
    const seen = new Map();  // one entry per pod, however many processes it runs on the GPU
    for (const h of g.holders) seen.set(`${h.namespace}/${h.pod}/${h.service}`, h);
    const holders = cell(tr, seen.size ? "" : "–");
    [...seen.values()].forEach((h, i) => {
      if (i) holders.appendChild(document.createTextNode(", "));
      const label = `${h.namespace || "?"}/${h.pod || "?"}`;
      if (h.service) {
        holders.appendChild(document.createTextNode(label + " ("));
        holders.appendChild(link(`#/service/${encodeURIComponent(h.namespace || "")}/${encodeURIComponent(h.service)}`,
                                 h.service));
        holders.appendChild(document.createTextNode(")"));
      } else holders.appendChild(document.createTextNode(label));
    });
    const m = g.metrics;
    cell(tr, pct(m.DCGM_FI_PROF_SM_ACTIVE), "num");
    cell(tr, fixed(m.DCGM_FI_DEV_FB_USED, "MiB"), "num");
    cell(tr, fixed(m.DCGM_FI_DEV_POWER_USAGE, "W"), "num");
    cell(tr, fixed(m.DCGM_FI_DEV_GPU_TEMP, "°C"), "num");
    cell(tr, g.health, "health-" + g.health).title = g.reasons.join("; ");
    cell(tr, String(g.open_anomalies), "num");
    tbody.appendChild(tr);
  }
  $("#fleet-summary").textContent = `${gpus.items.length} GPUs, ${new Date().toLocaleTimeString()}`;
  const list = $("#services");
  list.replaceChildren();
  for (const s of services.items) {
    const li = document.createElement("li");
    li.appendChild(link(`#/service/${encodeURIComponent(s.namespace || "")}/${encodeURIComponent(s.service)}`,
                        `${s.namespace || "?"}/${s.service}`));
    li.appendChild(document.createTextNode(` — ${s.gpu_count} GPUs, pods ${s.pods.join(", ")}`));
    list.appendChild(li);
  }
}

function chart(container, id, title, traces, yaxis, xrange) {
  let div = document.getElementById(id);
  if (!div) {
    div = document.createElement("div");
    div.id = id;
    div.className = "chart";
    container.appendChild(div);
  }
  Plotly.react(div, traces, {
    title: { text: title, font: { size: 14 } }, margin: { t: 36, r: 16, b: 36, l: 56 },
    xaxis: xrange ? { type: "date", range: xrange } : { type: "date" }, yaxis: yaxis || {},
    showlegend: traces.length > 1,
  }, { displayModeBar: false, responsive: true });
}

const GPU_CHARTS = [
  ["DCGM_FI_PROF_SM_ACTIVE", "SM active", { tickformat: ".0%", range: [0, 1] }],
  ["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Tensor active", { tickformat: ".0%", range: [0, 1] }],
  ["DCGM_FI_DEV_FB_USED", "Memory used (MiB)"],
  ["DCGM_FI_DEV_POWER_USAGE", "Power (W)"],
  ["DCGM_FI_DEV_GPU_TEMP", "Temperature (°C)"],
];

function stepFor(seconds) {
  if (seconds <= 900) return "5s";
  if (seconds <= 3600) return "15s";
  if (seconds <= 21600) return "1m";
  return "5m";
}

async function gpuView(uuid) {
  show("#gpu-view");
  $("#gpu-title").textContent = uuid;
  const span = Number($("#gpu-range").value);
  const end = Date.now() / 1000;
  const data = await api(`/gpus/${encodeURIComponent(uuid)}/series`, {
    metrics: GPU_CHARTS.map((c) => c[0]).join(","), start: (end - span).toFixed(0), end: end.toFixed(0),
    step: stepFor(span),
  });
  $("#gpu-facts").textContent = `${data.times.length} points per metric, step ${data.step_seconds} s, ` +
    `read from ${data.source === "raw" ? "raw samples" : data.source + " rollup"}`;
  const x = data.times.map((t) => new Date(t * 1000));
  for (const [key, title, yaxis] of GPU_CHARTS) {
    chart($("#gpu-charts"), "chart-" + key, title,
          [{ x, y: data.series[key], type: "scatter", mode: "lines", name: title, connectgaps: false }], yaxis);
  }
}

async function serviceView(namespace, name) {
  show("#service-view");
  $("#service-title").textContent = `${namespace || "?"}/${name}`;
  const span = Number($("#service-range").value);
  const end = Date.now() / 1000;
  const params = { start: (end - span).toFixed(0), end: end.toFixed(0), step: span <= 21600 ? "1m" : "1h" };
  if (namespace) params.namespace = namespace;
  const h = await api(`/services/${encodeURIComponent(name)}/history`, params);
  const t = h.total;
  $("#service-total").textContent =
    `${(t.gpu_seconds / 3600).toFixed(2)} GPU-hours, ${t.energy_kwh.toFixed(3)} kWh, ` +
    `cost ${t.cost.toFixed(2)} ${h.currency} at ${h.price_per_gpu_hour} ${h.currency} per GPU-hour`;
  const x = h.steps.map((s) => new Date(s.t * 1000));
  const xr = [new Date((end - span) * 1000), new Date(end * 1000)];
  const box = $("#service-charts");
  chart(box, "svc-gpus", "GPUs held (average per step)",
        [{ x, y: h.steps.map((s) => s.gpus), type: "scatter", mode: "lines+markers", name: "GPUs" }], {}, xr);
  chart(box, "svc-active", "SM and tensor active", [
    { x, y: h.steps.map((s) => s.sm_active), type: "scatter", mode: "lines+markers", name: "SM active" },
    { x, y: h.steps.map((s) => s.tensor_active), type: "scatter", mode: "lines+markers", name: "tensor active" },
  ], { tickformat: ".0%", range: [0, 1] }, xr);
  chart(box, "svc-cost", `Cost per step (${h.currency})`,
        [{ x, y: h.steps.map((s) => s.cost), type: "bar", name: "cost" }], {}, xr);
  const tbody = $("#pods tbody");
  tbody.replaceChildren();
  for (const p of h.pods) {
    const tr = document.createElement("tr");
    cell(tr, p.namespace || "–");
    cell(tr, p.pod || "–");
    cell(tr, p.gpus.toFixed(2), "num");
    cell(tr, (p.gpu_seconds / 3600).toFixed(2), "num");
    cell(tr, pct(p.sm_active), "num");
    cell(tr, pct(p.tensor_active), "num");
    cell(tr, fixed(p.memory_used_mib, "MiB"), "num");
    cell(tr, fixed(p.energy_kwh, "kWh", 3), "num");
    cell(tr, fixed(p.cost, h.currency, 2), "num");
    tbody.appendChild(tr);
  }
}

async function route() {
  clearTimeout(refreshTimer);
  if (!token()) {
    setStatus("Paste an API token (gpuwatch token create --role viewer) to begin.");
    return;
  }
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  try {
    if (parts[0] === "gpu" && parts[1]) await gpuView(parts[1]);
    else if (parts[0] === "service" && parts[2]) await serviceView(parts[1], parts[2]);
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
  $("#gpu-range").addEventListener("change", route);
  $("#service-range").addEventListener("change", route);
  window.addEventListener("hashchange", route);
  if (token()) whoami();
  route();
});
