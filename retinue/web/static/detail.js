// An agent's detail: its facts, trace id, action buttons (actions.js), task, output, mailbox
// and transcript. Text only, as app.js.
"use strict";

function select(id) {
  view.selected = id;
  for (const node of [...view.nodes.values(), ...view.flat.values()]) {
    node.tr.classList.toggle("selected", node.id === id);
  }
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

function traceFact(d) {
  if (!d.trace_id) return null;
  if (!d.trace_url) return el("code", "trace", d.trace_id);
  const link = el("a", "trace", d.trace_id);
  link.href = d.trace_url;   // made by the server from --trace-url (http or https only)
  link.target = "_blank";
  link.rel = "noopener noreferrer";
  return link;
}

function showDetail(d) {
  const pane = $("detail");
  const typing = document.activeElement && pane.contains(document.activeElement)
    ? document.activeElement.dataset.request : undefined;
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
  fact("state", el("span", "state " + stateClass(d.state, "st-"), stateText(d.state)));
  fact("profile", d.profile);
  fact("id", d.id);
  fact("trace", traceFact(d));
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
  if (d.forked_from) fact("forked from", d.forked_from.path + " as of generation " + d.forked_from.generation);
  fact("children", d.kids_all ? d.kids + " live, " + d.kids_all + " in all" : null);
  if (d.failed_below) fact("failed below", d.failed_below);
  if (d.waiting_below) fact("awaiting approval below", d.waiting_below);
  pane.appendChild(facts);
  const actions = actionsPane(d);
  if (actions) pane.appendChild(actions);
  section(pane, "task", d.task);
  if (d.output !== null) section(pane, "output", d.output);
  if (d.error !== null) section(pane, "error", d.error);
  if (d.last_error && d.last_error !== d.error) section(pane, "last error", d.last_error);
  if (d.in_doubt_calls && d.in_doubt_calls.length) {
    pane.appendChild(el("h2", "", "tool calls in doubt (" + d.in_doubt_calls.length + ")"));
    for (const c of d.in_doubt_calls) {
      pane.appendChild(el("pre", "in-doubt", c.tool + " [" + c.effect + "] key " + c.idempotency_key
        + " attempt " + c.attempt + (c.awaiting_approval ? ", awaiting approval" : "")
        + ": " + c.arguments));
    }
  }
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
  if (typing) {   // the reason being typed keeps its focus across a refresh
    const input = [...pane.querySelectorAll("input.reason")].find((i) => i.dataset.request === typing);
    if (input) input.focus();
  }
}

