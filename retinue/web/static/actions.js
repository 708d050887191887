// The action buttons of an agent's detail (the view was started with --actions). Each action is a
// POST that carries this page's token (from its <meta>, made for this page load) in a header;
// the server checks it and the Origin, and answers what was done or the typed error's text.
"use strict";

const ACTION_TOKEN = (document.querySelector('meta[name="retinue-action-token"]') || {}).content || "";
const ACTION_LABELS = {
  interrupt: "interrupt", interrupt_tree: "interrupt tree", resume: "resume", close: "close",
};
const CONFIRM = {
  interrupt_tree: "Interrupt every running agent of this tree?",
  close: "Close this agent? Its name is freed; a closed agent takes no more work.",
};

async function act(action, body) {
  let response;
  try {
    response = await fetch("/api/actions/" + action, {
      method: "POST",
      credentials: "same-origin",
      headers: { "content-type": "application/json", accept: "application/json",
        "x-retinue-action-token": ACTION_TOKEN },
      body: JSON.stringify(body),
    });
  } catch (error) {
    return { ok: false, error: "the server did not answer: " + error.message };
  }
  try {
    return await response.json();
  } catch (error) {
    return { ok: false, error: response.status + " " + response.statusText };
  }
}

// What an agent's detail offers, by its state as the page knows it (the server has the last word).
function offered(d) {
  if (d.state === "closed") return [];
  const found = [];
  if (BUSY.has(d.state)) found.push("interrupt");
  if (d.kids) found.push("interrupt_tree");
  if (d.state === "interrupted") found.push("resume");
  found.push("close");
  return found;
}

async function runAction(agentId, action, body) {
  if (CONFIRM[action] && !window.confirm(CONFIRM[action])) return;
  const answer = await act(action, body);
  view.lastAction = { agent: agentId, ok: !!answer.ok, text: answer.ok ? answer.done : answer.error, action };
  refreshDetail(true);
}

function actionResult(d) {
  const last = view.lastAction;
  if (!last || last.agent !== d.id) return null;
  const line = el("p", "action-result " + (last.ok ? "ok" : "bad"), last.text);
  line.id = "action-result";
  line.dataset.action = last.action;
  line.dataset.ok = last.ok ? "1" : "0";
  return line;
}

function actionsPane(d) {
  if (!view.actions) return null;
  const pane = el("div", "actions");
  pane.id = "actions";
  if (!ACTION_TOKEN) {
    pane.appendChild(el("p", "hint", "This page has no action token: reload it."));
    return pane;
  }
  const row = el("div", "buttons");
  for (const action of offered(d)) {
    const button = el("button", "act act-" + action, ACTION_LABELS[action]);
    button.type = "button";
    button.dataset.action = action;
    button.addEventListener("click", () => runAction(d.id, action, { agent: d.id }));
    row.appendChild(button);
  }
  pane.appendChild(row);
  for (const request of d.approvals || []) pane.appendChild(approvalBox(d, request));
  const result = actionResult(d);
  if (result) pane.appendChild(result);
  return pane;
}

function approvalBox(d, request) {
  const box = el("div", "approval");
  box.dataset.request = request.id;
  box.appendChild(el("div", "", "awaiting approval: " + request.tool
    + (request.in_doubt ? " (in doubt: it was running when the process stopped and may have taken effect; approving runs it again with key " + request.idempotency_key + ")" : "")));
  box.appendChild(el("pre", "", request.arguments));
  if (request.expires_at) {
    box.appendChild(el("div", "hint", "denied by itself in " + seconds(Math.max(0, request.expires_at - now()))));
  }
  const text = el("input", "reason");
  text.type = "text";
  text.placeholder = "reason (needed to deny) or note";
  text.maxLength = 2000;
  text.dataset.request = request.id;
  text.value = view.drafts[request.id] || "";   // kept across the detail's refreshes
  text.addEventListener("input", () => { view.drafts[request.id] = text.value; });
  const approve = el("button", "act act-approve", "approve");
  approve.type = "button";
  approve.addEventListener("click", () => runAction(d.id, "approve",
    { request: request.id, note: text.value.trim() || null }));
  const deny = el("button", "act act-deny", "deny");
  deny.type = "button";
  deny.addEventListener("click", () => runAction(d.id, "deny", { request: request.id, reason: text.value }));
  const line = el("div", "buttons");
  line.appendChild(text);
  line.appendChild(approve);
  line.appendChild(deny);
  box.appendChild(line);
  return box;
}
