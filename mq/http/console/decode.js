// Record fields arrive as base64; show them as UTF-8, pretty JSON or hex.

export function bytesOf(b64) {
  if (b64 === null || b64 === undefined) return null;
  const raw = atob(b64);
  const out = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) out[i] = raw.charCodeAt(i);
  return out;
}

export function hex(bytes) {
  const lines = [];
  for (let i = 0; i < bytes.length; i += 16) {
    const row = Array.from(bytes.subarray(i, i + 16));
    const hx = row.map((b) => b.toString(16).padStart(2, "0")).join(" ");
    const text = row.map((b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : ".")).join("");
    lines.push(`${i.toString(16).padStart(8, "0")}  ${hx.padEnd(47)}  ${text}`);
  }
  return lines.join("\n");
}

// `mode`: "utf8", "json" or "hex". Returns {text, error}: error says why a mode failed.
export function decode(b64, mode) {
  const bytes = bytesOf(b64);
  if (bytes === null) return { text: "null", error: null };
  if (mode === "hex") return { text: hex(bytes), error: null };
  let text;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    return { text: hex(bytes), error: "not UTF-8: shown as hex" };
  }
  if (mode === "json") {
    try {
      return { text: JSON.stringify(JSON.parse(text), null, 2), error: null };
    } catch {
      return { text, error: "not JSON: shown as UTF-8" };
    }
  }
  return { text, error: null };
}
