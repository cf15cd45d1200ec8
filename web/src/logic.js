// The console's own logic, free of the DOM and the network: the unit tests (web/test) run it
// under node, the pages import it in the browser.

// "k=v, k2=v2" (commas or spaces between pairs) -> {k: "v", k2: "v2"}. Throws on a pair
// without "=" or with an empty key.
export function parseLabelFilter(text) {
  const labels = {};
  for (const part of String(text || "").split(/[\s,]+/)) {
    if (!part) continue;
    const eq = part.indexOf("=");
    if (eq <= 0) throw new Error(`label filter "${part}": want key=value`);
    labels[part.slice(0, eq)] = part.slice(eq + 1);
  }
  return labels;
}

// Whether a sandbox (as GET /v1/sandboxes renders it) passes {labels, state}.
export function matchesFilter(sb, filter) {
  if (filter.state && sb.state !== filter.state) return false;
  const md = sb.metadata || {};
  for (const [k, v] of Object.entries(filter.labels || {})) {
    if (md[k] !== v) return false;
  }
  return true;
}

// Brings `sandboxes` (a Map id -> sandbox) up to date with one event of GET /v1/events.
// Returns the ids whose rows changed (deleted ones included).
export function applyEvent(sandboxes, type, data) {
  switch (type) {
    case "snapshot": {
      const changed = new Set(sandboxes.keys());
      sandboxes.clear();
      for (const sb of data.sandboxes || []) {
        sandboxes.set(sb.id, sb);
        changed.add(sb.id);
      }
      return [...changed];
    }
    case "sandbox.created":
    case "sandbox.state":
    case "sandbox.updated":
      sandboxes.set(data.sandbox.id, data.sandbox);
      return [data.sandbox.id];
    case "sandbox.deleted":
      sandboxes.delete(data.id);
      return [data.id];
    default:
      return [];
  }
}

// The list in the order shown: newest first, then by id.
export function sortedSandboxes(sandboxes, filter) {
  return [...sandboxes.values()]
    .filter((sb) => matchesFilter(sb, filter))
    .sort((a, b) => (b.created_at || "").localeCompare(a.created_at || "") || a.id.localeCompare(b.id));
}

// The lifecycle actions a sandbox in `state` can take (the buttons on its row).
export function actionsFor(state) {
  switch (state) {
    case "running":
      return ["pause", "suspend", "snapshot", "fork", "delete"];
    case "paused":
      return ["resume", "suspend", "snapshot", "fork", "delete"];
    case "suspended":
      return ["wake", "delete"];
    case "error":
      return ["delete"];
    case "creating":
    case "deleting":
    case "deleted":
      return [];
    default:
      return ["delete"];
  }
}

// How a lifecycle action is asked of the API: [method, path, body].
export function actionRequest(id, action) {
  const base = `/v1/sandboxes/${encodeURIComponent(id)}`;
  switch (action) {
    case "pause":
    case "resume":
    case "suspend":
    case "wake":
      return ["POST", `${base}/${action}`, undefined];
    case "snapshot":
      return ["POST", `${base}/snapshots`, undefined];
    case "fork":
      return ["POST", `${base}/fork`, { count: 1 }];
    case "delete":
      return ["DELETE", base, undefined];
    default:
      throw new Error(`unknown action ${action}`);
  }
}

// "3 s", "5 min", "2 h", "4 d" from milliseconds.
export function formatAge(ms) {
  if (!Number.isFinite(ms) || ms < 0) return "—";
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86400) return `${Math.floor(s / 3600)} h`;
  return `${Math.floor(s / 86400)} d`;
}

export function formatBytes(n) {
  if (n === null || n === undefined || !Number.isFinite(Number(n))) return "—";
  n = Number(n);
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return i === 0 ? `${n} B` : `${n.toFixed(n < 10 ? 1 : 0)} ${units[i]}`;
}

// When a sandbox expires, relative to `now` (ms): "in 5 min", "never".
export function formatExpiry(expiresAt, now) {
  if (!expiresAt) return "never";
  const t = Date.parse(expiresAt);
  if (!Number.isFinite(t)) return "—";
  return t <= now ? "now" : `in ${formatAge(t - now)}`;
}

// One line about an operation: "pause: running", "create: failed (not_found: …)".
export function describeOperation(op) {
  let s = `${op.kind}: ${op.state}`;
  if (op.state === "failed" && op.error) s += ` (${op.error.code}: ${op.error.message})`;
  return s;
}

// The page a console path shows: {page, id?}. Paths are under /ui.
export function routeOf(pathname) {
  const p = String(pathname || "").replace(/^\/ui/, "").replace(/\/+$/, "") || "/";
  let m;
  if (p === "/" || p === "/sandboxes") return { page: "sandboxes" };
  if (p === "/login") return { page: "login" };
  if ((m = p.match(/^\/sandboxes\/([^/]+)\/terminal$/))) return { page: "terminal", id: decodeURIComponent(m[1]) };
  if ((m = p.match(/^\/sandboxes\/([^/]+)$/))) return { page: "sandbox", id: decodeURIComponent(m[1]) };
  if (p === "/templates") return { page: "templates" };
  if (p === "/operations") return { page: "operations" };
  if (p === "/keys") return { page: "keys" };
  return { page: "notfound" };
}

// The body of POST /v1/sandboxes from the create form's fields (strings, "" = default).
export function createRequest(f) {
  const body = {};
  if (f.template) body.template = f.template;
  if (f.runtime) body.runtime = f.runtime;
  const limits = {};
  if (f.cpus) limits.cpus = Number(f.cpus);
  if (f.memory_mib) limits.memory_bytes = Math.round(Number(f.memory_mib) * 1024 * 1024);
  if (Object.keys(limits).length) body.limits = limits;
  if (f.timeout !== undefined && f.timeout !== "") body.timeout = Number(f.timeout);
  if (f.network) body.network = { mode: f.network };
  if (f.labels) body.metadata = parseLabelFilter(f.labels);
  for (const [k, v] of Object.entries(body.limits || {})) {
    if (!Number.isFinite(v) || v <= 0) throw new Error(`${k} must be a positive number`);
  }
  if (body.timeout !== undefined && (!Number.isInteger(body.timeout) || body.timeout < 0))
    throw new Error("timeout must be a whole number of seconds (0 = none)");
  return body;
}

// The parent of an absolute path ("/a/b" -> "/a", "/" -> "/").
export function parentPath(p) {
  const t = String(p).replace(/\/+$/, "");
  const i = t.lastIndexOf("/");
  return i <= 0 ? "/" : t.slice(0, i);
}

export function joinPath(dir, name) {
  return (dir.endsWith("/") ? dir : dir + "/") + name;
}

// Where a command's output view starts reading: the "from byte" field ("" = the start; a
// negative number counts back from the end, "-1000" = the last 1,000 bytes) against the
// stream's stored size. Throws on anything else.
export function outputStart(field, size) {
  const t = String(field ?? "").trim();
  if (t === "") return 0;
  if (!/^-?\d+$/.test(t)) throw new Error(`from byte "${t}": want a whole number (negative: from the end)`);
  const n = Number(t);
  if (!Number.isSafeInteger(n)) throw new Error(`from byte "${t}": too large`);
  if (n >= 0) return n;
  return Math.max(0, (Number(size) || 0) + n);
}

// The output view keeps at most `max` characters: appending `chunk` to `shown` drops the
// oldest characters past that. Returns {text, dropped} (characters dropped by this call).
export function boundedAppend(shown, chunk, max) {
  const text = shown + chunk;
  if (text.length <= max) return { text, dropped: 0 };
  return { text: text.slice(text.length - max), dropped: text.length - max };
}
