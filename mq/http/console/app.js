// The console: a hash router, one poll loop, and the views (views.js, browse.js).

import { views } from "./views.js";
import { browse } from "./browse.js";

const POLL_MS = 2000;
const routes = { ...views, browse };
let current = null; // {key, update}
let timer = null;

// What the status line says for the HTTP listener's refusals (mq.http.auth): the
// browser sends the user and password it asked for the page with every fetch.
const REFUSED = {
  401: "not signed in: reload the page and give a user name and password of this broker",
  403: "not allowed",
  429: "too many failed logins from this address: wait a minute, then reload",
};

export async function api(path) {
  const response = await fetch(`/api/${path}`, {
    headers: { Accept: "application/json" },
    credentials: "same-origin",
  });
  let body = null;
  try {
    body = await response.json();
  } catch {
    // not JSON (a proxy's page, a cut connection): the status says what happened
  }
  if (response.ok && body !== null) return body;
  const said = body && body.message ? body.message : `HTTP ${response.status}`;
  if (response.status in REFUSED) {
    throw new Error(response.status === 403 ? `${REFUSED[403]}: ${said}` : REFUSED[response.status]);
  }
  throw new Error(body && body.error ? `${body.error}: ${body.message}` : said);
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
