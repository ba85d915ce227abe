// The disquepy dashboard: polls /api/overview and the open view (every view refreshes
// live), pages jobs through /jobs and /jobs/finished (server-side cursors), draws the
// history disque-web keeps (/api/history), and calls the same REST API a user would
// (cancel, pause, dead letters).
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
const PRIOS = ["high", "medium", "low"];
const POLL_MS = 2000;

async function api(method, path, body) {
  // a change is JSON, always (disque-web refuses one without the JSON content type)
  const opts = { method, headers: {} };
  if (method !== "GET") opts.headers["Content-Type"] = "application/json";
  if (body !== undefined) opts.body = JSON.stringify(body);
  const r = await fetch(path, opts);
  if (r.status === 401) {  // not logged in (any more): the login page, then back here
    location.assign("/login?next=" + encodeURIComponent(location.pathname + location.hash));
    throw new Error("not logged in");
  }
  let data = null;
  try { data = await r.json(); } catch (e) { data = null; }
  if (!r.ok) {
    const d = data && data.detail;
    const msg = Array.isArray(d) ? d.map((e) => `${(e.loc || []).join(".")}: ${e.msg}`).join("; ") : d;
    const err = new Error(msg || `${r.status} ${r.statusText}`);
    err.status = r.status;
    throw err;
  }
  return data;
}

function toast(msg, bad) {
  const t = document.createElement("div");
  t.className = "toast" + (bad ? " bad" : "");
  t.textContent = msg;
  $("#toasts").appendChild(t);
  setTimeout(() => t.remove(), 4000);
}

function num(v) { return v == null ? "–" : Number(v).toLocaleString("en-US", { maximumFractionDigits: 1 }); }
function bytes(v) {
  if (v == null) return "–";
  const u = ["B", "KB", "MB", "GB", "TB"]; let i = 0;
  while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return `${v.toFixed(v >= 100 || i === 0 ? 0 : 1)} ${u[i]}`;
}
function dur(s) {
  if (s == null) return "–";
  if (s < 1) return "< 1 s";
  // round to the unit shown last first, so 86,399 s reads "1 d 0 h", never "23 h 60 min"
  const two = (v, big, small, a, b) => {
    const n = Math.round(v / small), hi = Math.floor(n / (big / small)), lo = n % (big / small);
    return lo ? `${hi} ${a} ${lo} ${b}` : `${hi} ${a}`;
  };
  if (s < 59.5) return `${Math.round(s)} s`;
  if (s < 3570) return two(s, 60, 1, "min", "s");
  if (s < 84600) return two(s, 3600, 60, "h", "min");
  return two(s, 86400, 3600, "d", "h");
}
function when(ts) {
  if (!ts) return "–";
  const d = new Date(ts * 1000), today = new Date().toDateString() === d.toDateString();
  return today ? d.toLocaleTimeString() : d.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
}
// whether data differs from what a table last showed: a live refresh redraws only then
// (rows the user points at, or a test holds, stay the same elements)
const shown = {};
function changed(key, data) {
  const j = JSON.stringify(data);
  if (shown[key] === j) return false;
  shown[key] = j;
  return true;
}
function shortId(id) { return id.length > 24 ? id.slice(0, 11) + "…" + id.slice(-10) : id; }

// ------------------------------------------------------------------ views

const views = ["overview", "jobs", "finished", "workers", "dead", "lookup"];
let current = "overview";
function show(view, arg) {
  current = view;
  for (const v of views) $(`#view-${v}`).hidden = v !== view;
  for (const a of document.querySelectorAll("#tabs a")) a.classList.toggle("active", a.dataset.view === view);
  if (view === "jobs") loadJobs(true);
  if (view === "finished") loadFinished(true);
  if (view === "workers") loadWorkers();
  if (view === "dead") { loadDead(); loadGroupDead(); }
  if (view === "lookup" && arg) { $("#lookup-id").value = arg; lookup(arg); }
}
// the open view's data, again (the lookup view is left as the user asked it)
function refreshView() {
  if (current === "jobs") loadJobs(false, true);
  else if (current === "finished") loadFinished(false, true);
  else if (current === "workers") loadWorkers(true);
  else if (current === "dead") { loadDead(true); loadGroupDead(true); }
}
function route() {
  const h = decodeURIComponent(location.hash.slice(1));
  const [view, ...rest] = h.split("/");
  show(views.includes(view) ? view : "overview", rest.join("/"));
}
window.addEventListener("hashchange", route);

// ------------------------------------------------------------------ overview

let overview = null;
const CHART_WINDOW = 900; // seconds shown; disque-web keeps an hour
const chart = new LineChart($("#chart"), [{ name: "added", color: "#4f46e5" }, { name: "completed", color: "#10b981" }, { name: "failed", color: "#dc2626" }], CHART_WINDOW);
const latency = new LineChart($("#latency-chart"), [{ name: "wait p50", color: "#f59e0b" }, { name: "wait p95", color: "#b45309" }, { name: "processing p50", color: "#0ea5e9" }, { name: "processing p95", color: "#0369a1" }], CHART_WINDOW, "ms");
let lastSample = null;

async function loadHistory() {
  const d = await api("GET", "/api/history" + (lastSample ? `?since=${lastSample}` : ""));
  for (const s of d.samples) {
    chart.add(s.t, [s.added_per_sec, s.completed_per_sec, s.failed_per_sec]);
    latency.add(s.t, [s.wait_p50_ms, s.wait_p95_ms, s.processing_p50_ms, s.processing_p95_ms]);
    lastSample = s.t;
  }
  chart.draw();
  latency.draw();
}

function banner(kind, text) {
  const b = $("#banner");
  b.hidden = !text;
  b.className = "banner " + kind;
  b.textContent = text || "";
}

async function poll() {
  try {
    overview = await api("GET", "/api/overview");
    document.body.classList.remove("stale");
    renderOverview(overview);
    const down = overview.unreachable || [];
    banner("warn", down.length ? `${down.length} of ${overview.totals.nodes} nodes unreachable (${down.join(", ")}): the counts below cover the ${overview.totals.nodes_up} that answered.` : "");
    $("#updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    $("#cluster-pill").className = "pill pill-bad";
    document.body.classList.add("stale");
    if (e.status === 503) {
      $("#cluster-pill").textContent = "nodes unreachable";
      banner("bad", `Cluster unreachable: ${e.message}. Nothing below is current.`);
      $("#queues-empty").hidden = true;
    } else {
      $("#cluster-pill").textContent = "API unreachable";
      banner("bad", `disque-web does not answer: ${e.message}`);
    }
  }
  try { await loadHistory(); } catch (e) { /* the next poll tries again */ }
  refreshView();
  setTimeout(poll, POLL_MS);
}

function renderOverview(o) {
  const t = o.totals;
  const pill = $("#cluster-pill");
  pill.className = "pill " + (t.nodes_up === t.nodes ? "pill-ok" : t.nodes_up ? "pill-bad" : "pill-bad");
  pill.textContent = t.nodes_up === t.nodes ? `cluster ok · ${t.nodes} node${t.nodes > 1 ? "s" : ""}` : `${t.nodes_up}/${t.nodes} nodes up`;
  $("#st-queued").textContent = num(t.queued);
  $("#st-jobs").textContent = `${num(t.jobs)} job copies held in all states`;
  $("#st-in").textContent = num(t.in_per_sec);
  $("#st-out").textContent = num(t.out_per_sec);
  $("#st-blocked").textContent = num(t.blocked);
  $("#st-dead").textContent = num(t.dead);
  $("#st-nodes").textContent = `${t.nodes_up} / ${t.nodes}`;
  $("#st-mem").textContent = `${bytes(t.memory)} used · ${num(t.ops_per_sec)} ops/s`;
  renderQueues(o.queues);
  renderGroups(o.groups || []);
  renderNodes(o.nodes);
  fillQueueSelects(o.queues);
}

function renderQueues(queues) {
  if (!changed("queues", [queues])) return;
  const tb = $("#queues-table tbody");
  $("#queues-empty").hidden = queues.length > 0;
  const curl = $("#curl-example");  // the example names this dashboard's own address
  if (curl) curl.textContent = curl.textContent.replace("http://HOST", location.origin)
    .replace("curl -X POST", `curl ${CREDENTIALS}-X POST`);
  $("#queues-table").hidden = queues.length === 0;
  const max = Math.max(1, ...queues.map((q) => q.depth));
  tb.innerHTML = queues.map((q) => {
    const lv = q.levels;
    const bar = PRIOS.map((p) => `<span class="p-${p}" style="width:${(100 * lv[p].depth) / max}%"></span>`).join("");
    const paused = q.paused !== "none";
    return `<tr data-queue="${esc(q.name)}">
      <td><span class="qname">${esc(q.name)}</span></td>
      <td><div class="depth"><div class="bar">${bar}</div><span class="n">${num(q.depth)}</span></div>
        <div class="levels"><span class="h">high <b>${num(lv.high.depth)}</b></span> · <span class="m">medium <b>${num(lv.medium.depth)}</b></span> · <span class="l">low <b>${num(lv.low.depth)}</b></span></div></td>
      <td class="num">${num(q.in_per_sec)}</td><td class="num">${num(q.out_per_sec)}</td>
      <td class="num">${num(q.blocked)}</td><td class="num">${dur(q.oldest_age)}</td>
      <td class="num">${q.dead ? `<a href="#dead/${encodeURIComponent(q.name)}">${num(q.dead)}</a>` : "0"}</td>
      <td>${paused ? `<span class="badge paused">paused ${esc(q.paused)}</span>` : `<span class="badge up">running</span>`}</td>
      <td class="actions"><a class="btn btn-sm" href="#jobs/${encodeURIComponent(q.name)}">Jobs</a>
        <button class="btn btn-sm" data-act="${paused ? "resume" : "pause"}">${paused ? "Resume" : "Pause"}</button></td></tr>`;
  }).join("");
}

function renderGroups(groups) {
  if (!changed("groups", [groups])) return;
  $("#groups-card").hidden = groups.length === 0;
  const tb = $("#groups-table tbody");
  tb.innerHTML = groups.map((g) => {
    const all = Math.max(1, g.total);
    const seg = (cls, n) => `<span class="${cls}" style="width:${(100 * n) / all}%"></span>`;
    return `<tr data-queue="${esc(g.queue)}" data-group="${esc(g.group)}">
      <td><span class="qname">${esc(g.queue)}</span></td><td><span class="gname">${esc(g.group)}</span></td>
      <td><div class="depth"><div class="bar">${seg("g-done", g.done)}${seg("g-pending", g.pending)}${seg("g-lag", g.lag)}</div>
        <span class="n wide">${num(g.done)} / ${num(g.total)}</span></div></td>
      <td class="num">${num(g.lag)}</td><td class="num">${num(g.pending)}</td>
      <td class="num">${dur(g.oldest_not_done_age)}</td><td class="num">${g.dead ? `<a href="#dead/${encodeURIComponent(g.queue)}/${encodeURIComponent(g.group)}">${num(g.dead)}</a>` : "0"}</td>
      <td class="num">${num(g.consumers)}</td></tr>`;
  }).join("");
}

$("#queues-table").addEventListener("click", async (ev) => {
  const b = ev.target.closest("button[data-act]");
  if (!b) return;
  const q = b.closest("tr").dataset.queue;
  b.disabled = true;
  try {
    await api("POST", `/queues/${encodeURIComponent(q)}/${b.dataset.act}`);
    toast(`Queue ${q} ${b.dataset.act === "pause" ? "paused" : "resumed"}`);
    renderOverview(await api("GET", "/api/overview"));
  } catch (e) { toast(e.message, true); b.disabled = false; }
});

function renderNodes(nodes) {
  if (!changed("nodes", [nodes])) return;
  $("#nodes-table tbody").innerHTML = nodes.map((n) => `<tr>
    <td><span class="mono">${esc(n.address)}</span>${n.id ? ` <span class="muted small mono">${esc(n.id.slice(0, 8))}</span>` : ""}</td>
    <td><span class="badge ${n.state}">${n.state}</span>${n.error ? ` <span class="muted small">${esc(n.error)}</span>` : ""}</td>
    <td class="num">${bytes(n.used_memory)}</td><td class="num">${num(n.ops_per_sec)}</td>
    <td class="num">${num(n.connected_clients)}</td><td class="num">${num(n.registered_jobs)}</td>
    <td class="num">${num(n.registered_queues)}</td><td class="num">${dur(n.uptime_seconds)}</td></tr>`).join("");
}

function fillQueueSelects(queues) {
  const names = queues.map((q) => q.name);
  fillGroupSelect(overview ? overview.groups || [] : []);
  for (const [sel, first] of [["#jobs-queue", "All queues"], ["#finished-queue", "All queues"], ["#dead-queue", null]]) {
    const s = $(sel);
    const have = [...s.options].map((o) => o.value).filter((v) => v);
    if (have.join("\n") === names.join("\n")) continue;
    const cur = s.value;
    s.innerHTML = (first ? `<option value="">${first}</option>` : names.length ? "" : `<option value="">No queues</option>`) + names.map((n) => `<option>${esc(n)}</option>`).join("");
    if (names.includes(cur)) s.value = cur;
    if (sel === "#dead-queue" && pendingDeadQueue && names.includes(pendingDeadQueue)) s.value = pendingDeadQueue;
  }
}

// ------------------------------------------------------------------ jobs (server-side paging)

const jobsState = { state: "queued", cursors: ["0"], page: 0, next: "0" };

async function loadJobs(reset, quiet) {
  const h = decodeURIComponent(location.hash.slice(1)).split("/");
  if (h[0] === "jobs" && h[1] && reset) {
    if (![...$("#jobs-queue").options].some((o) => o.value === h[1])) $("#jobs-queue").add(new Option(h[1], h[1]));
    $("#jobs-queue").value = h[1];
  }
  if (reset) { jobsState.cursors = ["0"]; jobsState.page = 0; }
  const q = $("#jobs-queue").value;
  const params = new URLSearchParams({ state: jobsState.state, count: "50", cursor: jobsState.cursors[jobsState.page] });
  if (q) params.set("queue", q);
  try {
    const d = await api("GET", `/jobs?${params}`);
    jobsState.next = d.next_cursor;
    renderJobs(d.jobs);
  } catch (e) { if (!quiet) toast(e.message, true); }
}

function renderJobs(jobs) {
  // ages grow every poll: redraw for them every 10 s only
  if (!changed("jobs", [jobs.map((j) => ({ ...j, age: Math.round((j.age || 0) / 10) })), jobsState.page, jobsState.next])) return;
  $("#jobs-empty").hidden = jobs.length > 0;
  $("#jobs-table tbody").innerHTML = jobs.map((j) => `<tr data-id="${esc(j.job_id)}">
    <td><a class="mono" href="#lookup/${encodeURIComponent(j.job_id)}" title="${esc(j.job_id)}">${esc(shortId(j.job_id))}</a></td>
    <td>${esc(j.queue)}</td><td><span class="chip ${j.priority}">${j.priority}</span></td>
    <td><span class="badge ${j.state}">${j.state}</span></td>
    <td class="num">${dur(j.age)}</td><td class="num">${num(j.nacks)}</td>
    <td><div class="preview mono" title="${esc(j.payload_preview)}">${esc(j.payload_preview)}</div></td>
    <td class="actions">${j.state === "queued" ? `<button class="btn btn-sm btn-danger" data-act="cancel">Cancel</button>` : ""}</td></tr>`).join("");
  $("#jobs-page").textContent = `Page ${jobsState.page + 1} · ${jobs.length} job${jobs.length === 1 ? "" : "s"}`;
  $("#jobs-prev").disabled = jobsState.page === 0;
  $("#jobs-next").disabled = jobsState.next === "0";
}

$("#state-seg").addEventListener("click", (ev) => {
  const b = ev.target.closest("button");
  if (!b) return;
  for (const x of $("#state-seg").children) x.classList.toggle("on", x === b);
  jobsState.state = b.dataset.state;
  loadJobs(true);
});
$("#jobs-queue").addEventListener("change", () => loadJobs(true));
$("#jobs-refresh").addEventListener("click", () => loadJobs(false));
$("#jobs-next").addEventListener("click", () => {
  jobsState.cursors[jobsState.page + 1] = jobsState.next;
  jobsState.page += 1;
  loadJobs(false);
});
$("#jobs-prev").addEventListener("click", () => { jobsState.page = Math.max(0, jobsState.page - 1); loadJobs(false); });
$("#jobs-table").addEventListener("click", async (ev) => {
  const b = ev.target.closest("button[data-act=cancel]");
  if (!b) return;
  const id = b.closest("tr").dataset.id;
  b.disabled = true;
  try {
    await api("POST", `/jobs/${encodeURIComponent(id)}/cancel`);
    toast(`Job ${shortId(id)} cancelled`);
    b.closest("tr").querySelector(".badge").outerHTML = `<span class="badge cancelled">cancelled</span>`;
    b.remove();
  } catch (e) { toast(e.message, true); b.disabled = false; }
});

// ------------------------------------------------------------------ dead letters

let pendingDeadQueue = null;
async function loadDead(quiet) {
  const h = decodeURIComponent(location.hash.slice(1)).split("/");
  if (h[0] === "dead" && h.length === 2 && h[1] && !quiet) {
    pendingDeadQueue = h[1];
    if (![...$("#dead-queue").options].some((o) => o.value === h[1])) $("#dead-queue").add(new Option(h[1], h[1]));
    $("#dead-queue").value = h[1];
  }
  const q = $("#dead-queue").value;
  if (!q) { renderDead([]); return; }
  try { renderDead(await api("GET", `/queues/${encodeURIComponent(q)}/dead-letters`)); } catch (e) { if (!quiet) toast(e.message, true); }
}

function queueCell(q) {
  // "payments:high" -> payments with its priority chip (a plain queue name as it is)
  const m = /^(.*):(high|low)$/.exec(q || "");
  return m ? `${esc(m[1])} <span class="chip ${m[2]}">${m[2]}</span>` : esc(q);
}

function renderDead(items) {
  if (!changed("dead", [items])) return;
  $("#dead-empty").hidden = items.length > 0;
  $("#dead-requeue-all").disabled = items.length === 0;
  $("#dead-table tbody").innerHTML = items.map((d) => `<tr data-id="${esc(d.id)}" data-job="${esc(d.job_id)}">
    <td><a class="mono" href="#lookup/${encodeURIComponent(d.job_id)}" title="${esc(d.job_id)}">${esc(shortId(d.job_id))}</a></td>
    <td>${queueCell(d.queue)}</td><td><div class="err mono" title="${esc(d.error)}">${esc(d.error)}</div></td>
    <td class="num">${num(d.attempts)}</td><td class="nowrap">${when(d.failed_at)}</td>
    <td><div class="preview mono">${esc(JSON.stringify(d.payload))}</div></td>
    <td class="actions"><button class="btn btn-sm" data-act="requeue">Requeue</button>
      <button class="btn btn-sm btn-danger" data-act="delete">Delete</button></td></tr>`).join("");
}

$("#dead-queue").addEventListener("change", () => { pendingDeadQueue = null; loadDead(); });
$("#dead-table").addEventListener("click", async (ev) => {
  const b = ev.target.closest("button[data-act]");
  if (!b) return;
  const tr = b.closest("tr"), q = $("#dead-queue").value, id = tr.dataset.id;
  b.disabled = true;
  try {
    if (b.dataset.act === "requeue") {
      await api("POST", `/queues/${encodeURIComponent(q)}/dead-letters/${encodeURIComponent(id)}/requeue`);
      toast(`Job ${shortId(tr.dataset.job)} queued again`);
    } else {
      await api("DELETE", `/queues/${encodeURIComponent(q)}/dead-letters/${encodeURIComponent(id)}`);
      toast(`Dead letter deleted`);
    }
    loadDead();
  } catch (e) { toast(e.message, true); b.disabled = false; }
});
$("#dead-requeue-all").addEventListener("click", async () => {
  const q = $("#dead-queue").value;
  try {
    const r = await api("POST", `/queues/${encodeURIComponent(q)}/dead-letters/requeue`);
    toast(`${r.requeued} job(s) queued again`);
    loadDead();
  } catch (e) { toast(e.message, true); }
});

// ------------------------------------------------------------------ finished jobs

const finState = { status: "", cursors: ["0"], page: 0, next: "0" };

async function loadFinished(reset, quiet) {
  if (reset) { finState.cursors = ["0"]; finState.page = 0; }
  const params = new URLSearchParams({ count: "50", cursor: finState.cursors[finState.page] });
  if (finState.status) params.set("status", finState.status);
  const q = $("#finished-queue").value;
  if (q) params.set("queue", q);
  try {
    const d = await api("GET", `/jobs/finished?${params}`);
    finState.next = d.next_cursor;
    renderFinished(d.jobs);
  } catch (e) { if (!quiet) toast(e.message, true); }
}

function outcomeCell(j) {
  const v = j.status === "failed" ? j.error : j.result;
  if (v == null) return "";
  const text = typeof v === "string" ? v : JSON.stringify(v);
  return `<div class="result mono ${j.status === "failed" ? "err" : ""}" title="${esc(text)}">${esc(text)}</div>`;
}

function renderFinished(jobs) {
  if (!changed("finished", [jobs, finState.page, finState.next])) return;
  $("#finished-empty").hidden = jobs.length > 0;
  $("#finished-table tbody").innerHTML = jobs.map((j) => `<tr data-id="${esc(j.job_id)}">
    <td><a class="mono" href="#lookup/${encodeURIComponent(j.job_id)}" title="${esc(j.job_id)}">${esc(shortId(j.job_id))}</a></td>
    <td>${esc(j.queue)}</td><td><span class="chip ${j.priority}">${j.priority}</span></td>
    <td><span class="badge ${j.status}">${j.status}</span></td><td class="num">${num(j.attempts)}</td>
    <td class="nowrap">${when(j.finished_at)}</td>
    <td class="num">${j.created_at ? dur(j.finished_at - j.created_at) : "–"}</td>
    <td>${outcomeCell(j)}</td></tr>`).join("");
  $("#finished-page").textContent = `Page ${finState.page + 1} · ${jobs.length} job${jobs.length === 1 ? "" : "s"}`;
  $("#finished-prev").disabled = finState.page === 0;
  $("#finished-next").disabled = finState.next === "0";
}

$("#finished-seg").addEventListener("click", (ev) => {
  const b = ev.target.closest("button");
  if (!b) return;
  for (const x of $("#finished-seg").children) x.classList.toggle("on", x === b);
  finState.status = b.dataset.status;
  loadFinished(true);
});
$("#finished-queue").addEventListener("change", () => loadFinished(true));
$("#finished-next").addEventListener("click", () => {
  finState.cursors[finState.page + 1] = finState.next;
  finState.page += 1;
  loadFinished(false);
});
$("#finished-prev").addEventListener("click", () => { finState.page = Math.max(0, finState.page - 1); loadFinished(false); });

// ------------------------------------------------------------------ workers

async function loadWorkers(quiet) {
  try { renderWorkers(await api("GET", "/workers")); } catch (e) { if (!quiet) toast(e.message, true); }
}

function renderWorkers(d) {
  if (!changed("workers", [d])) return;
  $("#workers-empty").hidden = d.workers > 0;
  $("#workers-nodes").innerHTML = d.nodes.map((n) => `<div class="node-head"><span class="mono">${esc(n.address)}</span>
      <span class="badge ${n.state}">${n.state}</span><span class="muted small">${n.state === "up" ? `${n.workers.length} worker${n.workers.length === 1 ? "" : "s"}` : esc(n.error || "")}</span></div>
    ${n.workers.length ? `<table class="table workers-table" data-node="${esc(n.address)}">
      <thead><tr><th>Host</th><th class="num">PID</th><th>Queues</th><th class="num">Concurrency</th><th class="num">Done</th><th class="num">Failed</th><th>Started</th><th>Connected since</th><th class="num">Last seen</th></tr></thead>
      <tbody>${n.workers.map((w) => `<tr data-pid="${w.pid}">
        <td>${esc(w.host)}</td><td class="num mono">${w.pid}</td>
        <td class="queues-list">${w.queues.map((q) => `<span class="qchip">${esc(q)}</span>`).join("")}</td>
        <td class="num">${num(w.concurrency)}</td><td class="num">${num(w.done)}</td><td class="num">${num(w.failed)}</td>
        <td class="nowrap">${when(w.started_at)}</td>
        <td class="nowrap" title="connected for ${dur(w.connected_for)}">${when(Date.now() / 1000 - w.connected_for)}</td>
        <td class="num">${w.last_seen < 1 ? "now" : dur(w.last_seen) + " ago"}</td></tr>`).join("")}</tbody></table>` : ""}`).join("");
}

// ------------------------------------------------------------------ consumer group dead letters

let pendingGroup = null;
function fillGroupSelect(groups) {
  const s = $("#gdead-group");
  const keys = groups.map((g) => `${g.queue}/${g.group}`);
  const have = [...s.options].map((o) => o.value);
  if (have.join("\n") !== keys.join("\n")) {
    const cur = s.value;
    s.innerHTML = groups.map((g) => `<option value="${esc(g.queue + "/" + g.group)}">${esc(g.queue)} · ${esc(g.group)}${g.dead ? ` (${g.dead} dead)` : ""}</option>`).join("");
    if (keys.includes(cur)) s.value = cur;
  }
  if (pendingGroup && keys.includes(pendingGroup)) { s.value = pendingGroup; pendingGroup = null; loadGroupDead(); }
  $("#gdead-card").hidden = groups.length === 0;
}

async function loadGroupDead(quiet) {
  const h = decodeURIComponent(location.hash.slice(1)).split("/");
  if (h[0] === "dead" && h.length >= 3 && !quiet) {
    pendingGroup = `${h[1]}/${h.slice(2).join("/")}`;
    if ([...$("#gdead-group").options].some((o) => o.value === pendingGroup)) { $("#gdead-group").value = pendingGroup; pendingGroup = null; }
  }
  const v = $("#gdead-group").value;
  if (!v) { renderGroupDead({ dead: [] }); return; }
  const i = v.indexOf("/");
  try { renderGroupDead(await api("GET", `/groups/${encodeURIComponent(v.slice(0, i))}/${encodeURIComponent(v.slice(i + 1))}/dead-letters`)); } catch (e) { if (!quiet) toast(e.message, true); }
}

function renderGroupDead(d) {
  if (!changed("gdead", [d])) return;
  $("#gdead-empty").hidden = d.dead.length > 0;
  $("#gdead-requeue-all").disabled = d.dead.length === 0;
  $("#gdead-table tbody").innerHTML = d.dead.map((e) => `<tr data-id="${esc(e.id)}">
    <td class="mono">${esc(shortId(e.id))}</td>
    <td><div class="preview mono">${esc(typeof e.contents === "string" ? e.contents : JSON.stringify(e.contents))}</div></td>
    <td class="num">${num(e.deliveries)}</td><td class="mono small">${esc(e.nodes.join(", "))}</td>
    <td class="actions"><button class="btn btn-sm" data-act="requeue">Requeue</button></td></tr>`).join("");
}

async function requeueGroup(ids) {
  const v = $("#gdead-group").value, i = v.indexOf("/");
  const r = await api("POST", `/groups/${encodeURIComponent(v.slice(0, i))}/${encodeURIComponent(v.slice(i + 1))}/dead-letters/requeue`, { ids });
  toast(`${r.requeued} event(s) given back to ${v.slice(i + 1)}`);
  loadGroupDead();
}
$("#gdead-group").addEventListener("change", () => loadGroupDead());
$("#gdead-table").addEventListener("click", async (ev) => {
  const b = ev.target.closest("button[data-act=requeue]");
  if (!b) return;
  b.disabled = true;
  try { await requeueGroup([b.closest("tr").dataset.id]); } catch (e) { toast(e.message, true); b.disabled = false; }
});
$("#gdead-requeue-all").addEventListener("click", async () => {
  try { await requeueGroup([]); } catch (e) { toast(e.message, true); }
});

// ------------------------------------------------------------------ job lookup

$("#lookup-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const id = $("#lookup-id").value.trim();
  if (id) location.hash = "lookup/" + encodeURIComponent(id);
});

async function lookup(id) {
  const out = $("#lookup-result");
  out.innerHTML = `<p class="muted">Looking up…</p>`;
  let s;
  try { s = await api("GET", `/jobs/${encodeURIComponent(id)}`); } catch (e) {
    out.innerHTML = `<div class="notice">${esc(e.message)}</div>`;
    return;
  }
  const cancellable = ["queued", "scheduled", "retrying"].includes(s.status);
  out.innerHTML = `<div class="headline"><span class="mono">${esc(s.job_id)}</span>
      <span class="badge ${s.status}" id="lookup-status">${s.status.replace("_", " ")}</span>
      ${cancellable ? `<button class="btn btn-sm btn-danger" id="lookup-cancel">Cancel job</button>` : ""}</div>
    <div class="detail"><div><dl>
      <dt>Queue</dt><dd>${esc(s.queue ?? "–")}</dd>
      <dt>Priority</dt><dd>${s.priority ? `<span class="chip ${s.priority}">${s.priority}</span>` : "–"}</dd>
      <dt>Attempt</dt><dd>${num(s.attempt)}</dd>
      <dt>Created</dt><dd>${when(s.created_at)}</dd>
      <dt>Time to live</dt><dd>${s.ttl != null ? dur(s.ttl) : "–"}</dd>
      <dt>Held by</dt><dd class="mono">${esc((s.nodes || []).join(", ") || "–")}</dd>
      <dt>Detail</dt><dd>${esc(s.detail)}</dd>
      ${s.finished_at ? `<dt>Finished</dt><dd>${when(s.finished_at)}</dd>` : ""}
      ${s.error ? `<dt>Error</dt><dd class="err mono">${esc(s.error)}</dd>` : ""}
      ${s.result != null ? `<dt>Result</dt><dd class="mono" id="lookup-result-value">${esc(typeof s.result === "string" ? s.result : JSON.stringify(s.result))}</dd>` : ""}
    </dl></div>
    <div><h3 class="small muted">HISTORY</h3><ul class="timeline">${history(s)}</ul>
      <h3 class="small muted">PAYLOAD</h3>${s.payload != null ? `<pre class="mono">${esc(JSON.stringify(s.payload, null, 2))}</pre>` : `<p class="muted small">Not kept once the job has ended (the outcome is).</p>`}</div></div>`;
  const c = $("#lookup-cancel");
  if (c) c.addEventListener("click", async () => {
    c.disabled = true;
    try { await api("POST", `/jobs/${encodeURIComponent(id)}/cancel`); toast("Job cancelled"); lookup(id); } catch (e) { toast(e.message, true); c.disabled = false; }
  });
}

function history(s) {
  const ev = [];
  if (s.created_at) ev.push(["", "Created", when(s.created_at)]);
  if (s.delay) ev.push(["", `Delayed ${dur(s.delay)}`, s.created_at ? `until ${when(s.created_at + s.delay)}` : ""]);
  const again = (s.nacks || 0) + (s.additional_deliveries || 0);
  if (s.status === "failed") {
    ev.push(["bad", `Attempt ${s.attempt} failed`, s.error || ""]);
    ev.push(["bad", s.dead_letter_id ? "Moved to the dead letters" : "Failed for good", when(s.finished_at)]);
    return ev.map(([cls, what, t]) => `<li class="${cls}"><div>${esc(what)}</div><div class="t">${esc(t)}</div></li>`).join("");
  }
  if (again) ev.push(["bad", `Failed or timed out ${again} time${again > 1 ? "s" : ""}`, "queued again"]);
  const last = { completed: "good", failed: "bad", cancelled: "bad", expired: "bad" }[s.status] ?? "";
  const ended = { completed: "Completed", cancelled: "Cancelled", expired: "Expired (its TTL ended)" }[s.status];
  if (ended && s.finished_at) ev.push([last, ended, when(s.finished_at)]);
  else ev.push([last, `Now: ${s.status.replace("_", " ")}`, s.detail]);
  return ev.map(([cls, what, t]) => `<li class="${cls}"><div>${esc(what)}</div><div class="t">${esc(t)}</div></li>`).join("");
}

// ------------------------------------------------------------------ start

// what the example curl call must add to log in (none without a login)
let CREDENTIALS = "";

async function whoami() {
  // who is logged in (disque-web --auth nodes / --token-file), and the way out
  const d = await api("GET", "/session").catch(() => null);
  if (!d || !d.user) return;
  const modes = d.login || [];
  if (modes.includes("nodes")) CREDENTIALS = `-u ${d.user}:PASSWORD `;
  else if (modes.includes("token")) CREDENTIALS = "-H 'Authorization: Bearer TOKEN' ";
  $("#who-name").textContent = d.user;
  $("#who").hidden = false;
  $("#logout").addEventListener("click", async () => {
    await api("POST", "/logout").catch(() => null);
    location.assign("/login");
  });
}

route();
whoami();
poll();
