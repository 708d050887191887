// The timeline of the selected agent's tree: a row per agent, its turns, model and tool calls,
// an axis with round ticks for any length (a second or a day), and zoom. Text only, as app.js.
"use strict";

// Tick steps, in seconds: 1-2-5 below a minute, then the clock's own round values.
const TICK_STEPS = [
  0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30,
  60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800,
];
const MAX_ZOOM = 4096;

const timeline = {
  data: null,        // the last answer of /api/timeline
  zoom: 1,           // 1: the whole tree; n: 1/n of it
  from: 0,           // seconds after the tree's start where the window begins (zoomed)
};

// The step between ticks for a window of `span` seconds with about `target` ticks.
function tickStep(span, target) {
  const want = span / Math.max(1, target);
  for (const step of TICK_STEPS) if (step >= want) return step;
  return Math.ceil(want / 604800) * 604800;
}

// An offset from the tree's start, written as round as `step` allows: +250ms, +1.5s, +2m, +1h30m.
function tickLabel(offset, step) {
  const t = Math.round(offset / step) * step;
  if (step < 1) {
    if (t < 1) return "+" + Math.round(t * 1000) + "ms";
    const digits = step >= 0.1 ? 1 : step >= 0.01 ? 2 : 3;
    return "+" + t.toFixed(digits) + "s";
  }
  if (t < 60) return "+" + t + "s";
  if (t < 3600) {
    const m = Math.floor(t / 60), s = Math.round(t % 60);
    return "+" + m + "m" + (s ? String(s).padStart(2, "0") + "s" : "");
  }
  if (t < 86400) {
    const h = Math.floor(t / 3600), m = Math.round((t % 3600) / 60);
    return "+" + h + "h" + (m ? String(m).padStart(2, "0") + "m" : "");
  }
  const d = Math.floor(t / 86400), h = Math.round((t % 86400) / 3600);
  return "+" + d + "d" + (h ? h + "h" : "");
}

// Round ticks between `from` and `to` (seconds after the tree's start): [{at, label}].
function niceTicks(from, to, target) {
  const span = Math.max(to - from, 1e-6);
  const step = tickStep(span, target || 6);
  const ticks = [];
  for (let at = Math.ceil(from / step - 1e-9) * step; at <= to + 1e-9 && ticks.length < 200; at += step) {
    ticks.push({ at, label: tickLabel(at, step) });
  }
  return ticks;
}

function refreshTimeline(now) {
  if (view.timelineTimer && !now) return;
  clearTimeout(view.timelineTimer);
  view.timelineTimer = setTimeout(async () => {
    view.timelineTimer = null;
    if (!view.selected) return;
    try {
      const data = await getJSON("/api/timeline?" + new URLSearchParams({ id: view.selected }));
      if (now && (!timeline.data || timeline.data.top !== data.top)) { timeline.zoom = 1; timeline.from = 0; }
      timeline.data = data;
      drawTimeline();
    } catch (error) { $("timeline").replaceChildren(el("p", "hint", error.message)); }
  }, now ? 0 : 1000);
}

function agentEnd(t, a) {
  if (!BUSY.has(a.state)) return a.updated_at;
  return view.writer === "stopped" && view.stoppedAt ? Math.max(a.updated_at, view.stoppedAt) : t.now;
}

// The tree's whole extent [start, end] in epoch seconds.
function extent(t) {
  const ends = t.agents.map((a) => agentEnd(t, a));
  const start = Math.min(...t.agents.map((a) => a.created_at));
  const end = Math.max(start + 0.001, ...ends, ...t.spans.map((s) => s.end));
  return [start, end];
}

function zoomBy(factor, anchor) {
  const t = timeline.data;
  if (!t || !t.agents.length) return;
  const [start, end] = extent(t);
  const span = end - start;
  const width = span / timeline.zoom;
  const at = anchor === undefined ? 0.5 : anchor;           // where in the window to hold still
  const pivot = timeline.from + width * at;
  timeline.zoom = Math.min(MAX_ZOOM, Math.max(1, timeline.zoom * factor));
  const next = span / timeline.zoom;
  timeline.from = Math.min(Math.max(0, pivot - next * at), span - next);
  drawTimeline();
}

function pan(direction) {
  const t = timeline.data;
  if (!t || !t.agents.length) return;
  const [start, end] = extent(t);
  const span = end - start;
  const width = span / timeline.zoom;
  timeline.from = Math.min(Math.max(0, timeline.from + direction * width / 2), span - width);
  drawTimeline();
}

function drawTimeline() {
  const t = timeline.data;
  const box = $("timeline");
  box.replaceChildren();
  if (!t || !t.agents.length) { $("timeline-title").textContent = ""; return; }
  const [start, end] = extent(t);
  const span = end - start;
  if (timeline.zoom <= 1) timeline.from = 0;
  const width = span / timeline.zoom;
  const from = Math.min(timeline.from, span - width);
  const lo = start + from, hi = lo + width;
  const pct = (v) => (100 * (Math.min(Math.max(v, lo), hi) - lo) / width) + "%";
  const size = (a, b) => Math.max(0, (100 * (Math.min(b, hi) - Math.max(a, lo)) / width)) + "%";
  const inside = (a, b) => b >= lo && a <= hi;
  $("timeline-title").textContent = t.agents[0].path + " · " + seconds(span)
    + (t.truncated ? " · first " + t.agents.length + " agents" : "")
    + (t.events ? "" : " · from the store (turns and model calls"
      + (t.calls_read < t.agents.length ? ", those of the first " + t.calls_read + " agents" : "") + ")");
  $("tl-scale").textContent = timeline.zoom > 1
    ? "×" + (timeline.zoom >= 10 ? Math.round(timeline.zoom) : timeline.zoom.toFixed(1)) + " · "
      + seconds(width) + " shown" : "";
  const axis = el("div", "tl-axis");
  axis.appendChild(el("span"));
  const ticks = el("div", "ticks");
  for (const tick of niceTicks(from, from + width, 6)) {
    const mark = el("span", "tick", tick.label);
    mark.style.left = (100 * (tick.at - from) / width) + "%";
    ticks.appendChild(mark);
  }
  axis.appendChild(ticks);
  box.appendChild(axis);
  const byAgent = new Map();
  for (const s of t.spans) {
    if (!byAgent.has(s.agent)) byAgent.set(s.agent, []);
    byAgent.get(s.agent).push(s);
  }
  const topDepth = t.agents[0].path.split("/").length;
  for (const a of t.agents) {
    const line = el("div", "tl-row");
    const label = el("div", "tl-label", a.path.split("/").pop());
    label.style.paddingLeft = (6 * (a.path.split("/").length - topDepth)) + "px";
    label.title = a.path;
    label.dataset.path = a.path;
    label.addEventListener("click", () => select(a.id));
    line.appendChild(label);
    const track = el("div", "tl-track");
    const last = agentEnd(t, a);
    if (inside(a.created_at, last)) {
      const life = el("div", "tl-life");
      life.style.left = pct(a.created_at);
      life.style.width = size(a.created_at, last);
      track.appendChild(life);
    }
    const spans = byAgent.get(a.id) || [];
    const openAt = t.open_turns[a.id];
    const shown = spans.some((s) => s.kind === "turn" && s.label === "g" + a.generation);
    const begin = openAt || a.started_at;
    if ((!shown || openAt) && begin && inside(begin, last)) {   // the store's last (or current) turn
      const bar = el("div", "tl-turn " + stateClass(a.state, "bg-"));
      bar.style.left = pct(begin);
      bar.style.width = size(begin, last);
      bar.title = a.state + " g" + a.generation + " " + seconds(last - begin);
      track.appendChild(bar);
    }
    for (const s of spans) {
      if (!inside(s.start, s.end)) continue;
      const bar = el("div", s.kind === "turn" ? "tl-turn " + stateClass(s.detail, "bg-")
        : s.kind === "model" ? "tl-model" : "tl-tool" + (s.ok ? "" : " bad"));
      bar.style.left = pct(s.start);
      bar.style.width = size(s.start, s.end);
      bar.title = s.kind + " " + s.label + " " + seconds(s.end - s.start) + (s.detail ? " · " + s.detail : "");
      track.appendChild(bar);
    }
    line.appendChild(track);
    box.appendChild(line);
  }
}

function startTimeline() {
  $("tl-in").addEventListener("click", () => zoomBy(2));
  $("tl-out").addEventListener("click", () => zoomBy(0.5));
  $("tl-fit").addEventListener("click", () => { timeline.zoom = 1; timeline.from = 0; drawTimeline(); });
  $("tl-left").addEventListener("click", () => pan(-1));
  $("tl-right").addEventListener("click", () => pan(1));
  $("timeline").addEventListener("wheel", (event) => {
    const track = event.target.closest && event.target.closest(".tl-track");
    if (!event.ctrlKey || !track) return;
    event.preventDefault();
    const box = track.getBoundingClientRect();
    const at = Math.min(1, Math.max(0, (event.clientX - box.left) / Math.max(1, box.width)));
    zoomBy(event.deltaY < 0 ? 1.5 : 1 / 1.5, at);
  }, { passive: false });
}
