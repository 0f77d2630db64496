// Overview, topics, groups and queues. A view is mount(root, params, api) -> update():
// mount builds the page's frame once, update() fetches and redraws its data (each poll).

import { bars, sparkline } from "./charts.js";
import { age, badge, bytes, card, h, link, nodes, table } from "./dom.js";

const SERIES = 60; // points kept per chart: two minutes at one poll every 2 s

// Rates from successive cumulative values: key -> {t, v, series}.
const history = new Map();
function rate(key, t, v) {
  const seen = history.get(key) || { t, v, series: [] };
  if (t > seen.t) {
    seen.series.push(Math.max(0, ((v - seen.v) * 1000) / (t - seen.t)));
    if (seen.series.length > SERIES) seen.series.shift();
  }
  history.set(key, { t, v, series: seen.series });
  return seen.series;
}
function series(key, value) {
  const seen = history.get(key) || { series: [] };
  seen.series.push(value);
  if (seen.series.length > SERIES) seen.series.shift();
  history.set(key, seen);
  return seen.series;
}

function section(title, ...children) {
  return h("section", {}, h("h2", {}, title), ...children);
}

function fill(root, ...children) {
  root.replaceChildren(...children.flat());
}

function overview(root, _params, api) {
  return async () => {
    const c = await api("cluster");
    const problems = c.under_replicated.length + c.offline.length;
    fill(root,
      h("h1", {}, "Cluster ", h("code", {}, c.cluster_id)),
      h("div", { class: "cards" },
        card("brokers", c.brokers.length),
        card("controller", c.controller ?? "none", c.controller === null ? "bad" : ""),
        card("topics", c.topics),
        card("partitions", c.partitions),
        card("under-replicated", c.under_replicated.length, c.under_replicated.length ? "warn" : "good"),
        card("offline", c.offline.length, c.offline.length ? "bad" : "good")),
      section("Brokers", table([
        ["node", (b) => h("span", {}, String(b.node_id), b.controller ? badge("controller", "info") : "",
          b.node_id === c.node_id ? badge("this broker") : "")],
        ["address", (b) => `${b.host}:${b.port}`],
        ["leader of", (b) => `${b.leaders} partitions`],
        ["replicas", (b) => b.replicas],
        ["console", (b) => (b.http_url ? link(`${b.http_url}/`, b.http_url) : "none")],
      ], c.brokers, { id: "brokers" })),
      section(problems ? "Partitions needing attention" : "Partitions", problems
        ? table([
          ["partition", (p) => link(`#/topics/${encodeURIComponent(p.topic)}`, `${p.topic}-${p.partition}`)],
          ["state", (p) => (c.offline.includes(p) ? badge("offline", "bad") : badge("under-replicated", "warn"))],
          ["leader", (p) => (p.leader < 0 ? "none" : p.leader)],
          ["replicas", (p) => nodes(p.replicas)],
          ["ISR", (p) => nodes(p.isr)],
        ], [...c.offline, ...c.under_replicated], { id: "problems" })
        : h("p", { class: "good-note", id: "problems" }, "Every partition has a leader and a full ISR.")));
  };
}

function topics(root, _params, api) {
  return async () => {
    const body = await api("topics");
    fill(root, h("h1", {}, "Topics"), table([
      ["name", (t) => h("span", {}, link(`#/topics/${encodeURIComponent(t.name)}`, t.name),
        t.internal ? badge("internal") : "", t.queue ? badge("queue", "info") : "")],
      ["partitions", (t) => t.partitions],
      ["replication", (t) => t.replication_factor],
      ["health", (t) => (t.offline ? badge(`${t.offline} offline`, "bad")
        : t.under_replicated ? badge(`${t.under_replicated} under-replicated`, "warn") : badge("ok", "good"))],
      ["size here", (t) => bytes(t.size_bytes_here)],
    ], body.topics, { id: "topics" }),
    body.truncated ? h("p", { class: "note" }, `${body.truncated} more not shown`) : "");
  };
}

function topicDetail(root, [name], api) {
  return async () => {
    const t = await api(`topics/${encodeURIComponent(name)}`);
    const sum = (f) => t.partitions.reduce((a, p) => a + (p[f] || 0), 0);
    const inRate = rate(`in:${name}`, t.time_ms, sum("end_offset"));
    const outRate = rate(`out:${name}`, t.time_ms, sum("consumed"));
    const growth = rate(`bytes:${name}`, t.time_ms, sum("size_bytes"));
    fill(root,
      h("h1", {}, "Topic ", h("code", {}, t.name), t.queue ? badge("queue", "info") : ""),
      h("div", { class: "charts" },
        h("figure", { id: "rate-in" }, sparkline(inRate, { width: 260, height: 60 }),
          h("figcaption", {}, "records in")),
        h("figure", { id: "rate-out" }, sparkline(outRate, { width: 260, height: 60 }),
          h("figcaption", {}, "records consumed (committed by groups)")),
        h("figure", { id: "rate-bytes" }, sparkline(growth, { width: 260, height: 60 }),
          h("figcaption", {}, "bytes in (replicas here)"))),
      section("Partitions", table([
        ["#", (p) => p.partition],
        ["leader", (p) => (p.leader === null ? badge("offline", "bad") : p.leader)],
        ["replicas", (p) => nodes(p.replicas)],
        ["ISR", (p) => h("span", {}, nodes(p.isr), p.under_replicated ? badge("under-replicated", "warn") : "")],
        ["start", (p) => p.start_offset ?? "–"],
        ["end", (p) => p.end_offset ?? h("span", { class: "err" }, p.message || "?")],
        ["size here", (p) => bytes(p.size_bytes)],
        ["in", (p) => sparkline(rate(`in:${name}:${p.partition}`, t.time_ms, p.end_offset || 0))],
        ["", (p) => link(`#/browse/${encodeURIComponent(name)}/${p.partition}`, "messages")],
      ], t.partitions, { id: "partitions" })),
      section("Configs", table([["key", ([k]) => k], ["value", ([, v]) => v]],
        Object.entries(t.configs), { id: "configs" })));
  };
}

function groups(root, _params, api) {
  return async () => {
    const body = await api("groups");
    fill(root, h("h1", {}, "Consumer groups"), table([
      ["group", (g) => link(`#/groups/${encodeURIComponent(g.group_id)}`, g.group_id)],
      ["state", (g) => badge(g.state, g.state === "Stable" ? "good" : "")],
      ["members", (g) => g.members ?? "–"],
      ["lag", (g) => (g.lag === null ? "–" : g.lag.toLocaleString())],
      ["lag over time", (g) => (g.lag === null ? ""
        : sparkline(series(`lag:${g.group_id}`, g.lag), { width: 120, height: 28, rate: false }))],
    ], body.groups, { id: "groups" }));
  };
}

const MAX_BARS = 40; // a chart to read at a glance: the partitions with the most lag

function mostLag(offsets) {
  if (offsets.length <= MAX_BARS) return offsets;
  const top = [...offsets].sort((a, b) => (b.lag ?? 0) - (a.lag ?? 0)).slice(0, MAX_BARS);
  return offsets.filter((o) => top.includes(o)); // in partition order
}

function groupDetail(root, [id], api) {
  return async () => {
    const g = await api(`groups/${encodeURIComponent(id)}`);
    const total = series(`lag:${id}`, g.lag);
    fill(root,
      h("h1", {}, "Group ", h("code", {}, g.group_id), badge(g.state, g.state === "Stable" ? "good" : "")),
      h("div", { class: "cards" },
        card("members", g.members.length), card("generation", g.generation_id),
        card("assignor", g.assignor || "–"), card("coordinator", g.coordinator),
        card("total lag", g.lag.toLocaleString(), g.lag ? "warn" : "good")),
      section("Lag per partition",
        h("div", { class: "charts" },
          h("figure", { id: "lag-chart" }, bars(mostLag(g.offsets).map((o) => ({
            label: `${o.topic}-${o.partition}`, value: o.lag ?? 0 })), { unit: " records" }),
          g.offsets.length > MAX_BARS
            ? h("figcaption", {}, `the ${MAX_BARS} partitions with the most lag of ${g.offsets.length}`)
            : ""),
          h("figure", { id: "lag-trend" }, sparkline(total, { width: 260, height: 60, rate: false }),
            h("figcaption", {}, "total lag over time")))),
      section("Members", table([
        ["member", (m) => h("code", {}, m.member_id)],
        ["client", (m) => m.client_id],
        ["host", (m) => m.client_host],
        ["assignment", (m) => Object.entries(m.assignment).map(([t, ps]) => `${t}: ${ps.join(", ")}`).join("; ") || "–"],
      ], g.members, { id: "members" })),
      section("Offsets", table([
        ["partition", (o) => `${o.topic}-${o.partition}`],
        ["committed", (o) => (o.committed_offset < 0 ? "–" : o.committed_offset)],
        ["end", (o) => (o.end_offset < 0 ? "?" : o.end_offset)],
        ["lag", (o) => (o.lag ?? "?")],
        ["member", (o) => (o.member_id ? h("code", {}, o.member_id.slice(0, 24)) : "–")],
      ], g.offsets, { id: "offsets" })));
  };
}

function queues(root, _params, api) {
  return async () => {
    const body = await api("queues");
    fill(root, h("h1", {}, "Queues"), table([
      ["queue", (q) => link(`#/topics/${encodeURIComponent(q.name)}`, q.name)],
      ["visible", (q) => q.visible],
      ["in flight", (q) => q.in_flight],
      ["delayed", (q) => q.delayed],
      ["dead-lettered", (q) => q.dead_lettered + q.dead_lettering],
      ["acked", (q) => q.acked],
      ["oldest", (q) => age(q.oldest_age_s)],
      ["depth", (q) => sparkline(series(`depth:${q.name}`, q.visible + q.in_flight + q.delayed),
        { width: 120, height: 28, rate: false })],
      ["dead-letter queue", (q) => q.dead_letter_queue || "–"],
      ["", (q) => (q.errors.length ? badge(`${q.errors.length} errors`, "bad") : "")],
    ], body.queues, { id: "queues" }));
  };
}

export const views = {
  overview, topics, topics_detail: topicDetail, groups, groups_detail: groupDetail, queues,
};
