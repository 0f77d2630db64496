// The console: a hash router, one poll loop, and the views (views.js, browse.js).

import { views } from "./views.js";
import { browse } from "./browse.js";

const POLL_MS = 2000;
const routes = { ...views, browse };
let current = null; // {key, update}
let timer = null;

export async function api(path) {
  const response = await fetch(`/api/${path}`, { headers: { Accept: "application/json" } });
  const body = await response.json();
  if (!response.ok) throw new Error(`${body.error}: ${body.message}`);
  return body;
}

function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean)
    .map(decodeURIComponent);
  const section = parts[0] || "overview";
  const name = `${section}${parts.length > 1 && section !== "browse" ? "_detail" : ""}`;
  return { section, view: routes[name] || routes.overview, params: parts.slice(1) };
}

function setStatus(text, ok) {
  const el = document.getElementById("status");
  el.textContent = text;
  el.className = `status ${ok ? "ok" : "bad"}`;
}

async function tick() {
  clearTimeout(timer);
  const view = current;
  try {
    await view.update();
    if (view === current) setStatus(`live · ${new Date().toLocaleTimeString()}`, true);
  } catch (error) {
    if (view === current) setStatus(String(error.message || error), false);
  }
  if (view === current) timer = setTimeout(tick, POLL_MS);
}

function navigate() {
  const { section, view, params } = route();
  for (const a of document.querySelectorAll("nav a")) {
    a.classList.toggle("active", a.dataset.section === section);
  }
  // a fresh container per view: a previous view's poll still in flight draws into its
  // own, detached one, never over this view
  const root = document.createElement("div");
  document.getElementById("view").replaceChildren(root);
  current = { update: view(root, params, api) };
  tick();
}

document.getElementById("interval").textContent = String(POLL_MS / 1000);
window.addEventListener("hashchange", navigate);
navigate();
