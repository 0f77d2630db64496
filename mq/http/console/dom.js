// DOM helpers: elements are built, never parsed from strings (names and values are user data).

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

// A table: columns = [[header, row => cell]], rows = objects.
export function table(columns, rows, attrs = {}) {
  return h("table", attrs,
    h("thead", {}, h("tr", {}, columns.map(([name]) => h("th", {}, name)))),
    h("tbody", {}, rows.length
      ? rows.map((row) => h("tr", {}, columns.map(([, cell]) => h("td", {}, cell(row)))))
      : h("tr", {}, h("td", { colspan: columns.length, class: "empty" }, "none"))));
}

export function card(label, value, tone = "") {
  return h("div", { class: `card ${tone}`, "data-label": label }, h("div", { class: "card-value" }, value),
    h("div", { class: "card-label" }, label));
}

export function badge(text, tone = "") {
  return h("span", { class: `badge ${tone}` }, text);
}

export function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

export function age(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  if (seconds < 60) return `${seconds.toFixed(1)} s`;
  if (seconds < 3600) return `${(seconds / 60).toFixed(1)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}

export function nodes(list) {
  return list && list.length ? list.join(", ") : "–";
}

export function link(href, text) {
  return h("a", { href }, text);
}
