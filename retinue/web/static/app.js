// retinue's live view. No build step, no dependency. Every piece of data is put in the page
// with textContent, never parsed as markup: agent output is untrusted text.
"use strict";

const KNOWN_STATES = [
  "starting", "running", "completed", "failed", "interrupted", "closed", "restarting", "awaiting_approval",
];
const BUSY = new Set(["starting", "running", "restarting", "awaiting_approval"]);
const $ = (id) => document.getElementById(id);

const view = {
  nodes: new Map(),             // id -> node {row, tr, cells, kids, total, loaded, expanded, depth}
  root: { id: "", kids: [], total: 0, loaded: false, expanded: true, depth: 0 },
  closed: false,
  selected: null,
  version: 0,
  skew: 0,                      // server clock minus ours, seconds
  pageSize: 200,
  tools: {},                    // agent id -> tool in progress (from events)
  renderPending: false,
  detailTimer: null,
  detailBusy: false,
  detailAgain: false,
  timelineTimer: null,
  started: false,
};

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function stateClass(state, prefix) {
  const safe = String(state).replace(/[^a-z_]/g, "");
  return prefix + (KNOWN_STATES.includes(safe) ? safe : "other");
}

function now() { return Date.now() / 1000 + view.skew; }

function seconds(value) {
  if (value < 60) return value.toFixed(1) + "s";
  if (value < 3600) return Math.floor(value / 60) + "m" + String(Math.floor(value % 60)).padStart(2, "0") + "s";
  return Math.floor(value / 3600) + "h" + String(Math.floor((value % 3600) / 60)).padStart(2, "0") + "m";
}

function elapsed(row) {
  const begin = row.started_at || row.created_at;
  const end = BUSY.has(row.state) ? now() : row.updated_at;
  return Math.max(0, end - begin);
}

function money(value) { return value ? "$" + value.toFixed(4) : ""; }

async function getJSON(url) {
  const response = await fetch(url, { headers: { accept: "application/json" } });
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

// -- the tree ---------------------------------------------------------------------------

function nodeOf(id) { return id === "" ? view.root : view.nodes.get(id); }

function makeNode(row, depth) {
  const tr = el("tr");
  tr.dataset.id = row.id;
  const cells = {};
  for (const name of ["path", "profile", "state", "time", "attempt", "tokens", "cost", "result"]) {
    cells[name] = el("td", name === "path" || name === "result" ? name
      : (["time", "attempt", "tokens", "cost"].includes(name) ? "num" : ""));
    tr.appendChild(cells[name]);
  }
  const node = { id: row.id, row, tr, cells, kids: [], total: 0, loaded: false, expanded: false, depth };
  tr.addEventListener("click", (event) => {
    if (event.target.classList.contains("toggle")) return;
    select(row.id);
  });
  view.nodes.set(row.id, node);
  paint(node);
  return node;
}

function paint(node) {
  const row = node.row;
  const c = node.cells;
  c.path.replaceChildren();
  c.path.style.paddingLeft = (8 + 16 * (node.depth - 1)) + "px";
  const count = view.closed ? row.kids_all : row.kids;
  const toggle = el("button", "toggle", count ? (node.expanded ? "▾" : "▸") : "");
  toggle.title = count ? count + " children" : "";
  toggle.addEventListener("click", () => toggleNode(node));
  c.path.appendChild(toggle);
  c.path.appendChild(el("span", "", node.depth === 1 ? row.path : row.name));
  if (count) c.path.appendChild(el("span", "sub", " (" + count + ")"));
  c.profile.textContent = row.profile;
  c.state.replaceChildren(el("span", "state " + stateClass(row.state, "st-"), row.state));
  c.time.textContent = seconds(elapsed(row));
  c.attempt.textContent = row.attempt ? String(row.attempt) : "";
  if (row.due_at) c.attempt.textContent += " (next " + seconds(Math.max(0, row.due_at - now())) + ")";
  c.tokens.textContent = row.tokens ? row.tokens.toLocaleString() : "";
  c.cost.textContent = money(row.cost_usd);
  c.result.replaceChildren();
  const tool = row.state === "running" ? (view.tools[row.id] || row.tool) : null;
  if (tool) c.result.appendChild(el("span", "tool", "⚙ " + tool));
  else c.result.textContent = row.last_error && BUSY.has(row.state) ? row.last_error : (row.result || "");
  node.tr.classList.toggle("selected", view.selected === row.id);
}

async function loadKids(node, offset) {
  const params = new URLSearchParams({ parent: node.id, offset: String(offset),
    limit: String(view.pageSize), closed: view.closed ? "1" : "0" });
  const page = await getJSON("/api/children?" + params);
  if (offset === 0) node.kids = [];
  for (const row of page.rows) {
    if (node.kids.includes(row.id)) continue;
    const known = view.nodes.get(row.id);
    if (known) { known.row = row; known.depth = node.depth + 1; paint(known); }
    else makeNode(row, node.depth + 1);
    node.kids.push(row.id);
  }
  node.total = page.total;
  node.loaded = true;
  scheduleRender();
}

async function toggleNode(node) {
  node.expanded = !node.expanded;
  if (node.expanded && !node.loaded) await loadKids(node, 0);
  paint(node);
  scheduleRender();
}

function scheduleRender() {
  if (view.renderPending) return;
  view.renderPending = true;
  requestAnimationFrame(() => { view.renderPending = false; render(); });
}

function render() {
  const body = $("rows");
  const fragment = document.createDocumentFragment();
  const walk = (parent) => {
    for (const id of parent.kids) {
      const node = view.nodes.get(id);
      if (!node) continue;
      fragment.appendChild(node.tr);
      if (node.expanded) walk(node);
    }
    if (parent.loaded && parent.kids.length < parent.total) {
      const tr = el("tr", "more");
      const td = el("td");
      td.colSpan = 8;
      td.style.paddingLeft = (24 + 16 * parent.depth) + "px";
      const more = el("button", "more", "show " + Math.min(view.pageSize, parent.total - parent.kids.length)
        + " more of " + (parent.total - parent.kids.length) + " not shown");
      more.addEventListener("click", () => loadKids(parent, parent.kids.length));
      td.appendChild(more);
      tr.appendChild(td);
      fragment.appendChild(tr);
    }
  };
  walk(view.root);
  body.replaceChildren(fragment);
}

function visible(row) { return view.closed || row.state !== "closed"; }

function applyRow(row) {
  const known = view.nodes.get(row.id);
  const parent = nodeOf(row.parent);
  if (known) {
    const was = known.row;
    known.row = row;
    if (!visible(row) && visible(was)) {
      dropChild(parent, row.id);
      return true;
    }
    paint(known);
    return false;
  }
  if (!parent || !parent.loaded || !visible(row)) {
    if (parent && parent !== view.root) paint(parent);
    return false;
  }
  if (parent.kids.length >= parent.total) {
    makeNode(row, parent.depth + 1);
    parent.kids.push(row.id);
  }
  parent.total += 1;
  return true;
}

function dropChild(parent, id) {
  if (parent) {
    const at = parent.kids.indexOf(id);
    if (at >= 0) { parent.kids.splice(at, 1); parent.total = Math.max(0, parent.total - 1); }
  }
  view.nodes.delete(id);
}

function applyUpdate(update) {
  let structural = false;
  for (const row of update.rows) structural = applyRow(row) || structural;
  for (const id of update.removed) {
    const node = view.nodes.get(id);
    if (node) { dropChild(nodeOf(node.row.parent), id); structural = true; }
  }
  for (const row of update.rows) {  // children counts shown on parents
    const parent = view.nodes.get(row.parent);
    if (parent) paint(parent);
  }
  if (structural) scheduleRender();
  if (update.summary) showSummary(update.summary);
  const touched = update.rows.some((r) => r.id === view.selected) || update.removed.includes(view.selected);
  if (view.selected && touched) refreshDetail();
  if (view.selected) refreshTimeline();
}

async function reload() {
  const expanded = [...view.nodes.values()].filter((n) => n.expanded).map((n) => n.id);
  view.nodes.clear();
  view.root.kids = [];
  view.root.loaded = false;
  await loadKids(view.root, 0);
  for (const id of expanded) {
    const node = view.nodes.get(id);
    if (node) { node.expanded = true; paint(node); await loadKids(node, 0); }
  }
  render();
}

// -- header ------------------------------------------------------------------------------

function showSummary(summary) {
  const counts = $("counts");
  counts.replaceChildren();
  const states = Object.keys(summary.states || {}).sort();
  for (const state of states) {
    counts.appendChild(el("span", "state " + stateClass(state, "st-"), state + " " + summary.states[state]));
  }
  $("totals").textContent = summary.agents.toLocaleString() + " agents · "
    + (summary.tokens || 0).toLocaleString() + " tokens · " + (money(summary.cost_usd) || "$0");
  if (summary.read_s !== undefined) {
    $("poll").textContent = "read " + (summary.read_s * 1000).toFixed(0) + " ms";
  }
}

async function loadSummary() {
  const summary = await getJSON("/api/summary");
  view.skew = summary.now - Date.now() / 1000;
  view.pageSize = summary.page_size || view.pageSize;
  $("store").textContent = summary.store;
  $("mode").textContent = summary.readonly ? "read-only view" : "in-process view";
  showSummary(summary);
  if (summary.error) setConn(false, summary.error);
}

function setConn(on, text) {
  const conn = $("conn");
  conn.className = "conn " + (on ? "conn-on" : "conn-off");
  conn.textContent = text;
}

// -- an agent's detail -------------------------------------------------------------------

function select(id) {
  view.selected = id;
  for (const node of view.nodes.values()) node.tr.classList.toggle("selected", node.id === id);
  refreshDetail(true);
  refreshTimeline(true);
}

function refreshDetail(now) {
  clearTimeout(view.detailTimer);
  view.detailTimer = setTimeout(loadDetail, now ? 0 : 500);
}

async function loadDetail() {
  if (!view.selected) return;
  if (view.detailBusy) { view.detailAgain = true; return; }  // read again once this one is done
  view.detailBusy = true;
  view.detailAgain = false;
  const id = view.selected;
  try {
    const detail = await getJSON("/api/agent?" + new URLSearchParams({ id }));
    if (view.selected === id) showDetail(detail);
  } catch (error) {
    const pane = $("detail");
    pane.replaceChildren(el("p", "hint", "Could not read " + id + ": " + error.message));
  } finally {
    view.detailBusy = false;
    if (view.detailAgain) refreshDetail();
  }
}

function section(parent, title, text) {
  parent.appendChild(el("h2", "", title));
  parent.appendChild(el("pre", "", text));
}

function showDetail(d) {
  const pane = $("detail");
  pane.replaceChildren();
  const crumbs = el("div", "crumbs");
  for (const up of d.ancestors || []) {
    const link = el("button", "link", up.path.split("/").pop());
    link.addEventListener("click", () => select(up.id));
    crumbs.appendChild(link);
    crumbs.appendChild(document.createTextNode("/"));
  }
  pane.appendChild(crumbs);
  pane.appendChild(el("h3", "", d.path));
  const facts = el("dl");
  const fact = (name, value) => {
    if (value === null || value === undefined || value === "") return;
    facts.appendChild(el("dt", "", name));
    const dd = el("dd");
    if (value instanceof Node) dd.appendChild(value); else dd.textContent = String(value);
    facts.appendChild(dd);
  };
  fact("state", el("span", "state " + stateClass(d.state, "st-"), d.state));
  fact("profile", d.profile);
  fact("id", d.id);
  fact("generation", d.generation);
  fact("attempt", d.attempt);
  fact("time", seconds(elapsed(d)));
  if (d.due_at) fact("next attempt", "in " + seconds(Math.max(0, d.due_at - now())));
  fact("tool in progress", d.tool);
  fact("tokens", (d.usage.prompt_tokens + d.usage.completion_tokens).toLocaleString()
    + " (" + d.usage.prompt_tokens + " prompt, " + d.usage.completion_tokens + " completion)");
  fact("cost", money(d.usage.cost_usd) || "$0");
  if (d.tree_usage) {
    fact("tree tokens", (d.tree_usage.prompt_tokens + d.tree_usage.completion_tokens).toLocaleString());
    fact("tree cost", money(d.tree_usage.cost_usd) || "$0");
  }
  fact("children", d.kids_all ? d.kids + " live, " + d.kids_all + " in all" : null);
  pane.appendChild(facts);
  section(pane, "task", d.task);
  if (d.output !== null) section(pane, "output", d.output);
  if (d.error !== null) section(pane, "error", d.error);
  if (d.last_error && d.last_error !== d.error) section(pane, "last error", d.last_error);
  pane.appendChild(el("h2", "", "pending completions (" + d.pending.length + ")"));
  for (const c of d.pending) {
    pane.appendChild(el("pre", "", c.path + " g" + c.generation + " " + c.status + ": "
      + (c.output || c.error || "")));
  }
  pane.appendChild(el("h2", "", "unread messages (" + d.unread.length + ")"));
  for (const m of d.unread) pane.appendChild(el("pre", "", "from " + m.sender + " (" + m.kind + "): " + m.content));
  const shown = d.transcript.length;
  pane.appendChild(el("h2", "", "transcript (last " + shown + " of " + d.transcript_length + ")"));
  const transcript = el("div", "transcript");
  transcript.id = "transcript";
  for (const entry of d.transcript) {
    const box = el("div", "entry role-" + String(entry.role).replace(/[^a-z]/g, ""));
    box.appendChild(el("div", "role", entry.role + (entry.name ? " · " + entry.name : "")));
    if (entry.content) box.appendChild(el("pre", "", entry.content));
    for (const call of entry.tool_calls) box.appendChild(el("div", "call", "→ " + call.name + "(" + call.arguments + ")"));
    transcript.appendChild(box);
  }
  if (!shown) transcript.appendChild(el("p", "hint", "no transcript (not a model agent, or no turn yet)"));
  pane.appendChild(transcript);
}

// -- the timeline ------------------------------------------------------------------------

function refreshTimeline(now) {
  if (view.timelineTimer && !now) return;
  clearTimeout(view.timelineTimer);
  view.timelineTimer = setTimeout(async () => {
    view.timelineTimer = null;
    if (!view.selected) return;
    try { drawTimeline(await getJSON("/api/timeline?" + new URLSearchParams({ id: view.selected }))); }
    catch (error) { $("timeline").replaceChildren(el("p", "hint", error.message)); }
  }, now ? 0 : 1000);
}

function drawTimeline(t) {
  const box = $("timeline");
  box.replaceChildren();
  const ends = t.agents.map((a) => (BUSY.has(a.state) ? t.now : a.updated_at));
  const start = Math.min(...t.agents.map((a) => a.created_at));
  const end = Math.max(start + 0.001, ...ends, ...t.spans.map((s) => s.end));
  const span = end - start;
  const pct = (v) => (100 * (Math.min(Math.max(v, start), end) - start) / span) + "%";
  const width = (a, b) => Math.max(0, (100 * (Math.min(b, end) - Math.max(a, start)) / span)) + "%";
  $("timeline-title").textContent = t.agents.length ? t.agents[0].path + " · " + seconds(span)
    + (t.truncated ? " · first " + t.agents.length + " agents" : "")
    + (t.events ? "" : " · from the store (turns and model calls"
      + (t.calls_read < t.agents.length ? ", those of the first " + t.calls_read + " agents" : "") + ")")
    : "";
  const axis = el("div", "tl-axis");
  axis.appendChild(el("span"));
  const ticks = el("div", "ticks");
  for (let i = 0; i <= 4; i++) ticks.appendChild(el("span", "", "+" + seconds(span * i / 4)));
  axis.appendChild(ticks);
  box.appendChild(axis);
  const byAgent = new Map();
  for (const s of t.spans) {
    if (!byAgent.has(s.agent)) byAgent.set(s.agent, []);
    byAgent.get(s.agent).push(s);
  }
  const topDepth = t.agents.length ? t.agents[0].path.split("/").length : 0;
  t.agents.forEach((a, i) => {
    const line = el("div", "tl-row");
    const label = el("div", "tl-label", a.path.split("/").pop());
    label.style.paddingLeft = (6 * (a.path.split("/").length - topDepth)) + "px";
    label.title = a.path;
    label.addEventListener("click", () => select(a.id));
    line.appendChild(label);
    const track = el("div", "tl-track");
    const life = el("div", "tl-life");
    life.style.left = pct(a.created_at);
    life.style.width = width(a.created_at, ends[i]);
    track.appendChild(life);
    const spans = byAgent.get(a.id) || [];
    const turns = spans.filter((s) => s.kind === "turn");
    const openAt = t.open_turns[a.id];
    const last = turns.some((s) => s.label === "g" + a.generation);
    if (!last || openAt) {   // the store's last (or current) turn
      const begin = openAt || a.started_at;
      if (begin) {
        const bar = el("div", "tl-turn " + stateClass(a.state, "bg-"));
        bar.style.left = pct(begin);
        bar.style.width = width(begin, ends[i]);
        bar.title = a.state + " g" + a.generation;
        track.appendChild(bar);
      }
    }
    for (const s of spans) {
      const bar = el("div", s.kind === "turn" ? "tl-turn " + stateClass(s.detail, "bg-")
        : s.kind === "model" ? "tl-model" : "tl-tool" + (s.ok ? "" : " bad"));
      bar.style.left = pct(s.start);
      bar.style.width = width(s.start, s.end);
      bar.title = s.kind + " " + s.label + " " + seconds(s.end - s.start) + (s.detail ? " · " + s.detail : "");
      track.appendChild(bar);
    }
    line.appendChild(track);
    box.appendChild(line);
  });
}

// -- search ------------------------------------------------------------------------------

let searchTimer = null;
function onSearch() {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(async () => {
    const text = $("search").value.trim();
    const results = $("results");
    if (!text) { results.hidden = true; results.replaceChildren(); return; }
    try {
      const found = await getJSON("/api/search?" + new URLSearchParams({ q: text }));
      results.replaceChildren(el("div", "hint", found.total + " found" + (found.total > found.rows.length ? ", first " + found.rows.length : "")));
      for (const row of found.rows) {
        const line = el("div");
        const link = el("button", "", row.path);
        link.addEventListener("click", () => select(row.id));
        line.appendChild(link);
        line.appendChild(el("span", "state " + stateClass(row.state, "st-"), row.state));
        results.appendChild(line);
      }
      results.hidden = false;
    } catch (error) { results.replaceChildren(el("div", "hint", error.message)); results.hidden = false; }
  }, 250);
}

// -- the live stream ---------------------------------------------------------------------

function connect() {
  const source = new EventSource("/api/events");
  source.addEventListener("hello", async (event) => {
    const hello = JSON.parse(event.data);
    view.skew = hello.now - Date.now() / 1000;
    setConn(true, "live");
    if (!view.started || hello.version !== view.version) {
      view.started = true;
      view.version = hello.version;
      await loadSummary();
      await reload();
    }
  });
  source.addEventListener("update", (event) => {
    const update = JSON.parse(event.data);
    view.version = update.version;
    applyUpdate(update);
  });
  source.addEventListener("reset", async (event) => {
    view.version = JSON.parse(event.data).version;
    await loadSummary();
    await reload();
  });
  source.addEventListener("activity", (event) => {
    const activity = JSON.parse(event.data);
    view.tools = activity.tools || {};
    for (const node of view.nodes.values()) if (node.row.state === "running") paint(node);
    if (view.selected && activity.spans.length) refreshTimeline();
  });
  source.onerror = () => setConn(false, "reconnecting…");
  source.onopen = () => setConn(true, "live");
}

function tick() {
  for (const node of view.nodes.values()) {
    if (BUSY.has(node.row.state)) node.cells.time.textContent = seconds(elapsed(node.row));
  }
}

function start() {
  $("closed").addEventListener("change", () => { view.closed = $("closed").checked; reload(); });
  $("search").addEventListener("input", onSearch);
  $("search").addEventListener("keydown", (e) => { if (e.key === "Escape") { $("search").value = ""; onSearch(); } });
  connect();
  setInterval(tick, 1000);
}

start();
