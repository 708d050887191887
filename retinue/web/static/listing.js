// The state filter and the search: a flat list of the matching agents, with their full paths,
// in place of the tree. Text only, as app.js.
"use strict";

function refreshListing(now) {
  clearTimeout(view.flatTimer);
  return new Promise((resolve) => {
    view.flatTimer = setTimeout(async () => { await loadListing(); resolve(); }, now ? 0 : 400);
  });
}

async function loadListing() {
  const results = $("results");
  if (!listing()) {
    view.flat.clear();
    results.hidden = true;
    results.replaceChildren();
    render();
    return;
  }
  const params = new URLSearchParams();
  if (view.query) params.set("q", view.query);
  if (view.filter) params.set("state", view.filter);
  let found;
  try {
    found = await getJSON("/api/search?" + params);
  } catch (error) {
    results.replaceChildren(el("div", "hint", error.message));
    results.hidden = false;
    return;
  }
  view.flat.clear();
  for (const row of found.rows) makeNode(row, 1, true);
  const what = (view.filter ? stateText(view.filter) + " agents" : "agents")
    + (view.query ? " matching “" + view.query + "”" : "");
  const line = el("div", "hint", found.total + " " + what
    + (found.total > found.rows.length ? ", the first " + found.rows.length + " shown" : ""));
  const clear = el("button", "link", "show the whole tree");
  clear.addEventListener("click", clearListing);
  line.appendChild(clear);
  results.replaceChildren(line);
  results.hidden = false;
  render();
}

function clearListing() {
  view.filter = null;
  view.query = "";
  $("search").value = "";
  paintFilters();
  loadListing();
}

function setFilter(state) {
  view.filter = view.filter === state ? null : state;
  paintFilters();
  refreshListing(true);
}

function paintFilters() {
  const box = $("filters");
  if (!box.childElementCount) {
    for (const state of FILTERS) {
      const button = el("button", "filter " + stateClass(state, "st-"));
      button.type = "button";
      button.dataset.state = state;
      button.addEventListener("click", () => setFilter(state));
      box.appendChild(button);
    }
  }
  const states = (view.summary && view.summary.states) || {};
  for (const button of box.children) {
    const state = button.dataset.state;
    const count = states[state] || 0;
    button.textContent = state.replace(/_/g, " ") + " " + count;
    button.dataset.count = String(count);
    button.classList.toggle("active", view.filter === state);
    button.classList.toggle("zero", count === 0);
    button.setAttribute("aria-pressed", view.filter === state ? "true" : "false");
  }
}

let searchTimer = null;
function onSearch() {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(() => {
    view.query = $("search").value.trim();
    refreshListing(true);
  }, 250);
}

