// retinue's live view. No build step, no dependency. Every piece of data is put in the page
// with textContent, never parsed as markup: agent output is untrusted text.
// listing.js (filter and search), detail.js (an agent's detail), actions.js (its buttons) and
// timeline.js (the timeline) load before this file; this one starts the page.
"use strict";

const KNOWN_STATES = [
  "starting", "running", "completed", "failed", "interrupted", "closed", "restarting", "awaiting_approval",
];
const BUSY = new Set(["starting", "running", "restarting", "awaiting_approval"]);
const FILTERS = ["failed", "running", "awaiting_approval", "restarting", "interrupted"];
const STOPPED_WITH_WRITER = new Set(["starting", "running"]);
const $ = (id) => document.getElementById(id);

const view = {
  nodes: new Map(),             // id -> node {row, tr, cells, kids, total, loaded, expanded, depth}
  root: { id: "", kids: [], total: 0, loaded: false, expanded: true, depth: 0 },
  closed: false,
  expandAll: false,             // the tree was small enough to open expanded (summary.expand_rows)
  filter: null,                 // a state: only its agents are listed (flat, full paths)
  query: "",                    // a search by path or profile: only the matches are listed
  flat: new Map(),              // id -> node of the filtered list
  flatTimer: null,
  selected: null,
  version: 0,
  skew: 0,                      // server clock minus ours, seconds
  pageSize: 200,
  tools: {},                    // agent id -> tool in progress (from events)
  summary: null,
  connected: false,
  writer: "in-process",         // or "live", "stopped" (no process holds the store)
  writerText: "",
  stoppedAt: null,              // when the stopped writer was last seen (epoch seconds)
  actions: false,
  lastAction: null,             // {agent, ok, text, action}: shown in that agent's detail
  drafts: {},                   // approval request id -> the reason or note being typed
  loading: 0,                   // reloads in progress
  held: [],                     // updates that came during one
  heldOver: false,              // more came than are held: reload again
  loadedVersion: 0,             // the version the last reload read
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

function stateText(state) {
  const words = String(state).replace(/_/g, " ");
  return view.writer === "stopped" && STOPPED_WITH_WRITER.has(state) ? words + " when the writer stopped" : words;
}

function now() { return Date.now() / 1000 + view.skew; }

function seconds(value) {
  if (value < 60) return value.toFixed(1) + "s";
  if (value < 3600) return Math.floor(value / 60) + "m" + String(Math.floor(value % 60)).padStart(2, "0") + "s";
  return Math.floor(value / 3600) + "h" + String(Math.floor((value % 3600) / 60)).padStart(2, "0") + "m";
}

function elapsed(row) {
  const begin = row.started_at || row.created_at;
  let end = row.updated_at;
  if (BUSY.has(row.state)) {
    end = view.writer === "stopped" && view.stoppedAt ? Math.max(row.updated_at, view.stoppedAt) : now();
  }
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

function makeNode(row, depth, flat) {
  const tr = el("tr");
  const cells = {};
  for (const name of ["path", "profile", "state", "time", "attempt", "tokens", "cost", "result"]) {
    cells[name] = el("td", name === "path" || name === "result" ? name
      : (["time", "attempt", "tokens", "cost"].includes(name) ? "num" : ""));
    tr.appendChild(cells[name]);
  }
  const open = view.expandAll && !flat;
  const node = { id: row.id, row, tr, cells, kids: [], total: 0, loaded: open, expanded: open, depth, flat: !!flat };
  tr.addEventListener("click", (event) => {
    if (event.target.classList.contains("toggle")) return;
    select(row.id);
  });
  (flat ? view.flat : view.nodes).set(row.id, node);
  paint(node);
  return node;
}

function kidCount(row) { return view.closed ? row.kids_all : row.kids; }

function paint(node) {
  const row = node.row;
  const c = node.cells;
  node.tr.dataset.id = row.id;
  node.tr.dataset.path = row.path;
  node.tr.dataset.state = row.state;
  node.tr.title = row.path;
  c.path.replaceChildren();
  c.path.title = row.path;
  const count = kidCount(row);
  if (node.flat) {
    c.path.appendChild(el("span", "", row.path));
  } else {
    c.path.style.paddingLeft = (8 + 16 * (node.depth - 1)) + "px";
    const toggle = el("button", "toggle", count ? (node.expanded ? "▾" : "▸") : "");
    toggle.title = count ? count + " children" : "";
    toggle.addEventListener("click", () => toggleNode(node));
    c.path.appendChild(toggle);
    c.path.appendChild(el("span", "", node.depth === 1 ? row.path : row.name));
  }
  if (count) c.path.appendChild(el("span", "sub", " (" + count + ")"));
  if (row.forked_from) {
    const fork = el("span", "sub", " ⑂ " + row.forked_from.path + "@" + row.forked_from.generation);
    fork.title = "fork of " + row.forked_from.path + " as of generation " + row.forked_from.generation;
    c.path.appendChild(fork);
  }
  marks(c.path, row, node.tr);
  c.profile.textContent = row.profile;
  c.state.replaceChildren(el("span", "state " + stateClass(row.state, "st-"), stateText(row.state)));
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

// A parent whose subtree holds a failed or waiting agent says so on its row.
function marks(cell, row, tr) {
  const failed = row.failed_below || 0, waiting = row.waiting_below || 0;
  tr.classList.toggle("has-failed", failed > 0);
  tr.classList.toggle("has-waiting", waiting > 0);
  if (failed) {
    const mark = el("span", "mark mark-failed", "⚠ " + failed);
    mark.title = failed + " failed below";
    cell.appendChild(mark);
  }
  if (waiting) {
    const mark = el("span", "mark mark-waiting", "⏸ " + waiting);
    mark.title = waiting + " awaiting approval below";
    cell.appendChild(mark);
  }
  if (row.in_doubt) {
    const mark = el("span", "mark mark-doubt", "? " + row.in_doubt);
    mark.title = row.in_doubt + " tool calls in doubt (running when the turn stopped; they may or may not have taken effect)";
    cell.appendChild(mark);
  }
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

function listing() { return view.filter !== null || view.query !== ""; }

function render() {
  const body = $("rows");
  const fragment = document.createDocumentFragment();
  if (listing()) {
    for (const node of view.flat.values()) fragment.appendChild(node.tr);
    body.replaceChildren(fragment);
    return;
  }
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
    if (row.updated_at < was.updated_at) return false;   // older than what is shown
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
  if (parent.kids.length >= parent.total && parent.kids.length < view.pageSize) {
    const node = makeNode(row, parent.depth + 1);
    parent.kids.push(row.id);
    if (node.loaded && kidCount(row)) loadKids(node, 0);   // its children came before it
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

function depthOf(row) { return row.path.split("/").length; }

function applyUpdate(update) {
  let structural = false;
  // Parents first, then as they were made (the order a fresh load gives).
  const rows = [...update.rows].sort((a, b) => depthOf(a) - depthOf(b) || a.created_at - b.created_at);
  for (const row of rows) structural = applyRow(row) || structural;
  for (const id of update.removed) {
    const node = view.nodes.get(id);
    if (node) { dropChild(nodeOf(node.row.parent), id); structural = true; }
  }
  for (const row of rows) {  // children counts shown on parents
    const parent = view.nodes.get(row.parent);
    if (parent) paint(parent);
    const listed = view.flat.get(row.id);
    if (listed) { listed.row = row; paint(listed); }
  }
  if (structural) scheduleRender();
  if (listing() && (rows.length || update.removed.length)) refreshListing();
  if (update.summary) showSummary(update.summary);
  const touched = rows.some((r) => r.id === view.selected) || update.removed.includes(view.selected);
  if (view.selected && touched) refreshDetail();
  if (view.selected) refreshTimeline();
}

async function reload() {
  // What was opened by hand is opened again (an expanded tree that grew past the bound is not).
  const expanded = view.expandAll ? [] : [...view.nodes.values()].filter((n) => n.expanded).map((n) => n.id);
  view.nodes.clear();
  view.root.kids = [];
  view.root.loaded = false;
  const tree = await getJSON("/api/tree?" + new URLSearchParams({ closed: view.closed ? "1" : "0" }));
  view.loadedVersion = tree.version;
  view.expandAll = tree.rows !== null;
  if (view.expandAll) {
    for (const row of tree.rows) {   // parents come before their children
      const parent = nodeOf(row.parent);
      if (!parent) continue;
      makeNode(row, parent.depth + 1);
      parent.kids.push(row.id);
    }
    view.root.loaded = true;
    for (const node of [view.root, ...view.nodes.values()]) node.total = node.kids.length;
    for (const node of view.nodes.values()) paint(node);
  } else {
    await loadKids(view.root, 0);
    for (const id of expanded) {
      const node = view.nodes.get(id);
      if (node) { node.expanded = true; paint(node); await loadKids(node, 0); }
    }
  }
  render();
  if (listing()) await refreshListing(true);
}

// A full reload (the first, after a reset, from a new server). Updates that arrive meanwhile
// are held, then those newer than what was loaded are applied; a summary never goes back.
async function refresh() {
  view.loading += 1;
  view.summary = null;
  try {
    await loadSummary();
    await reload();
  } finally {
    view.loading -= 1;
  }
  if (view.loading) return;
  const held = view.held;
  const over = view.heldOver;
  view.held = [];
  view.heldOver = false;
  if (over) { await refresh(); return; }   // too many came meanwhile: load again instead
  for (const update of held) if (update.version > view.loadedVersion) applyUpdate(update);
}

// -- header ------------------------------------------------------------------------------

function showSummary(summary) {
  if (view.summary && summary.version < view.summary.version) return;  // an older answer
  view.summary = summary;
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
  paintFilters();
  if (summary.writer !== undefined) {
    const was = view.writer;
    view.writer = summary.writer;
    view.writerText = summary.writer_text || "";
    view.stoppedAt = summary.stopped_at || null;
    paintBadge();
    if (was !== view.writer) {
      for (const node of [...view.nodes.values(), ...view.flat.values()]) paint(node);
      if (view.selected) refreshDetail(true);
    }
  }
}

async function loadSummary() {
  const summary = await getJSON("/api/summary");
  view.skew = summary.now - Date.now() / 1000;
  view.pageSize = summary.page_size || view.pageSize;
  view.actions = !!summary.actions;
  $("store").textContent = summary.store;
  $("mode").textContent = (summary.readonly ? "read-only view" : "in-process view")
    + (summary.actions ? " · actions" : "");
  showSummary(summary);
  if (summary.error) setConn(false, summary.error);
}

function setConn(on, text) {
  view.connected = on;
  view.connText = text;
  paintBadge();
}

// The badge: the stream's connection, and whether a process still writes the store.
function paintBadge() {
  const conn = $("conn");
  conn.title = view.writerText || "";
  if (view.connected && view.writer === "stopped") {
    conn.className = "conn conn-dead";
    conn.textContent = "writer stopped";
    conn.dataset.writer = "stopped";
    return;
  }
  conn.className = "conn " + (view.connected ? "conn-on" : "conn-off");
  conn.textContent = view.connText || (view.connected ? "live" : "connecting…");
  conn.dataset.writer = view.writer;
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
      await refresh();
    }
  });
  source.addEventListener("update", (event) => {
    const update = JSON.parse(event.data);
    view.version = update.version;
    if (view.loading) {   // applied once the reload is in, if newer than what it loaded
      if (view.held.length < view.pageSize) view.held.push(update); else view.heldOver = true;
      return;
    }
    applyUpdate(update);
  });
  source.addEventListener("reset", async (event) => {
    view.version = JSON.parse(event.data).version;
    await refresh();
  });
  source.addEventListener("summary", (event) => showSummary(JSON.parse(event.data)));
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
  for (const node of [...view.nodes.values(), ...view.flat.values()]) {
    if (BUSY.has(node.row.state)) node.cells.time.textContent = seconds(elapsed(node.row));
  }
}

// The table's header sticks just below the toolbar, whose height its wrapping decides.
function fitHeader() {
  const toolbar = document.querySelector(".toolbar");
  $("tree-pane").style.setProperty("--toolbar-h", toolbar.offsetHeight + "px");
}

function start() {
  window.addEventListener("resize", fitHeader);
  $("closed").addEventListener("change", () => { view.closed = $("closed").checked; refresh(); });
  $("search").addEventListener("input", onSearch);
  $("search").addEventListener("keydown", (e) => { if (e.key === "Escape") { $("search").value = ""; onSearch(); } });
  paintFilters();
  fitHeader();
  startTimeline();
  connect();
  setInterval(tick, 1000);
}

start();
