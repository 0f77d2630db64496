// Small SVG charts, no library: a sparkline of a series, and labelled bars.

const SVG = "http://www.w3.org/2000/svg";

function svg(width, height, cls) {
  const el = document.createElementNS(SVG, "svg");
  el.setAttribute("viewBox", `0 0 ${width} ${height}`);
  el.setAttribute("width", width);
  el.setAttribute("height", height);
  el.setAttribute("class", cls);
  return el;
}

function node(name, attrs, text) {
  const el = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  if (text !== undefined) el.textContent = text;
  return el;
}

// A line of the last values of `series` (numbers), scaled to its maximum.
// `rate`: the label is a rate (k/s); else a plain count.
export function sparkline(series, { width = 160, height = 36, label = "", rate = true } = {}) {
  const el = svg(width, height, "spark");
  const top = Math.max(1, ...series);
  const n = Math.max(2, series.length);
  const x = (i) => (i * (width - 2)) / (n - 1) + 1;
  const y = (v) => height - 2 - (v / top) * (height - 14);
  if (series.length < 2) { // nothing to draw yet: a baseline until the second poll
    el.append(node("line", { x1: 1, y1: height - 2, x2: width - 1, y2: height - 2, class: "spark-line" }));
  } else {
    const points = series.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`);
    const area = `1,${height - 2} ${points.join(" ")} ${x(series.length - 1).toFixed(1)},${height - 2}`;
    el.append(node("polygon", { points: area, class: "spark-area" }));
    el.append(node("polyline", { points: points.join(" "), class: "spark-line" }));
  }
  const last = series.length ? series[series.length - 1] : 0;
  el.append(node("text", { x: width - 2, y: 10, "text-anchor": "end", class: "spark-text" },
    `${label}${rate ? formatRate(last) : Math.round(last).toLocaleString()}`));
  return el;
}

// Horizontal bars: items = [{label, value}], scaled to the largest value.
export function bars(items, { width = 520, row = 22, unit = "" } = {}) {
  const labelWidth = 150;
  const height = Math.max(row, items.length * row);
  const el = svg(width, height, "bars");
  const top = Math.max(1, ...items.map((i) => i.value));
  items.forEach((item, i) => {
    const w = ((width - labelWidth - 70) * item.value) / top;
    const y = i * row;
    el.append(node("text", { x: labelWidth - 8, y: y + row / 2 + 4, "text-anchor": "end",
      class: "bar-label" }, item.label));
    el.append(node("rect", { x: labelWidth, y: y + 3, width: Math.max(w, 1).toFixed(1),
      height: row - 6, rx: 2, class: item.value > 0 ? "bar" : "bar bar-zero" }));
    el.append(node("text", { x: labelWidth + w + 6, y: y + row / 2 + 4, class: "bar-value",
      "data-label": item.label },
      `${item.value.toLocaleString()}${unit}`));
  });
  return el;
}

export function formatRate(v) {
  if (v >= 1e6) return `${(v / 1e6).toFixed(1)}M/s`;
  if (v >= 1e3) return `${(v / 1e3).toFixed(1)}k/s`;
  return `${v < 10 ? v.toFixed(1) : Math.round(v)}/s`;
}
