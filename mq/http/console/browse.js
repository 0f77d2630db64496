// The message browser: the last N records of a partition, decoded as UTF-8, JSON or hex.

import { decode } from "./decode.js";
import { badge, bytes, h, table } from "./dom.js";

const LIMITS = [10, 20, 50, 100, 200]; // the API's MAX_RECORDS is 200

function field(b64, size, mode, kind) {
  if (b64 === null) return h("span", { class: "null" }, "null");
  const { text, error } = decode(b64, mode);
  const cut = size > atob(b64).length ? ` (first ${bytes(atob(b64).length)} of ${bytes(size)})` : "";
  return h("div", {}, error || cut ? h("div", { class: "note" }, `${error || ""}${cut}`) : "",
    h("pre", { class: `${kind} ${mode}` }, text));
}

export function browse(root, [topic, partition], api) {
  const state = { topic: topic || "", partition: partition || "0", limit: "20", mode: "utf8" };
  const topicSelect = h("select", { id: "browse-topic", onchange: (e) => change({ topic: e.target.value, partition: "0" }) });
  const partitionSelect = h("select", { id: "browse-partition", onchange: (e) => change({ partition: e.target.value }) });
  const limitSelect = h("select", { id: "browse-limit", onchange: (e) => change({ limit: e.target.value }) },
    LIMITS.map((n) => h("option", { value: n, selected: String(n) === state.limit }, `last ${n}`)));
  const modes = h("div", { class: "modes", role: "radiogroup" }, ["utf8", "json", "hex"].map((m) =>
    h("label", {}, h("input", { type: "radio", name: "mode", value: m, checked: m === state.mode,
      onchange: () => change({ mode: m }) }), { utf8: "UTF-8", json: "JSON", hex: "hex" }[m])));
  const summary = h("p", { class: "note", id: "browse-summary" });
  const results = h("div", { id: "records" });
  root.append(h("h1", {}, "Messages"),
    h("div", { class: "toolbar" }, topicSelect, partitionSelect, limitSelect, modes), summary, results);
  let last = null;

  function change(patch) {
    Object.assign(state, patch);
    location.replace(`#/browse/${encodeURIComponent(state.topic)}/${state.partition}`);
    last = null;
    update();
  }

  function draw(body) {
    summary.textContent = `${body.topic}-${body.partition}: offsets ${body.start_offset} to ${body.end_offset - 1}, ` +
      `showing ${body.records.length}${body.complete ? "" : " (cut at the read bound)"}`;
    results.replaceChildren(table([
      ["offset", (r) => r.offset],
      ["time", (r) => new Date(r.timestamp).toISOString().replace("T", " ").replace("Z", "")],
      ["key", (r) => field(r.key, r.key_size, state.mode === "hex" ? "hex" : "utf8", "key")],
      ["value", (r) => field(r.value, r.value_size, state.mode, "value")],
      ["headers", (r) => r.headers.map(([k, v]) => badge(`${k}=${v === null ? "null" : decode(v, "utf8").text}`))],
    ], [...body.records].reverse(), { class: "records" }));
  }

  async function update() {
    const listed = await api("topics");
    const names = listed.topics.filter((t) => !t.internal).map((t) => t.name);
    if (!state.topic && names.length) state.topic = names[0];
    topicSelect.replaceChildren(...names.map((n) => h("option", { value: n, selected: n === state.topic }, n)));
    const info = listed.topics.find((t) => t.name === state.topic);
    if (!info) { results.replaceChildren(h("p", { class: "empty" }, "no topic")); return; }
    partitionSelect.replaceChildren(...Array.from({ length: info.partitions }, (_, i) =>
      h("option", { value: i, selected: String(i) === state.partition }, `partition ${i}`)));
    limitSelect.value = state.limit;
    const body = await api(`topics/${encodeURIComponent(state.topic)}/partitions/${state.partition}/records?limit=${state.limit}`);
    const key = JSON.stringify([state, body.end_offset, body.start_offset]);
    if (key !== last) { last = key; draw(body); }
  }
  return update;
}
