// The console's pages. Each renders into `root` and returns a cleanup function (or nothing).
// DOM built with h(): text always goes in as text, never as HTML.
import { api, q } from "./api.js";
import * as L from "./logic.js";
import { TerminalSession } from "./terminal.js";

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const announce = (msg) => {
  document.getElementById("live").textContent = msg;
};

function errorBox() {
  return h("p", { class: "error", role: "alert" });
}

function showError(box, e) {
  box.textContent = e ? `${e.code ? e.code + ": " : ""}${e.message}` : "";
}

const sbPath = (id) => `/v1/sandboxes/${encodeURIComponent(id)}`;

// Follows an operation until it ends, showing it in `el` (events drive the list; this
// waits on the operation itself so any page can use it).
async function follow(op, el) {
  el.textContent = L.describeOperation(op);
  while (!op.done) {
    try {
      op = await api("GET", `/v1/operations/${op.id}?wait=30s`);
    } catch (e) {
      el.textContent = `${op.kind}: ${e.message}`;
      return op;
    }
    el.textContent = L.describeOperation(op);
  }
  el.className = op.state === "failed" ? "error" : "ok";
  announce(L.describeOperation(op));
  return op;
}

// ---------------------------------------------------------------- login

export async function login(root) {
  const failed = new URLSearchParams(location.search).get("error");
  root.append(
    h("section", { class: "login", "aria-labelledby": "login-title" },
      h("h1", { id: "login-title" }, "SPACE console"),
      h("p", { class: "muted" }, "Log in with an operator API key (its file is api-key in spaced's data directory). The key stays on the server: the page gets a session cookie."),
      failed ? h("p", { class: "error", role: "alert", id: "login-error" }, "That API key was refused.") : null,
      h("form", { method: "post", action: "/ui/login", id: "login-form" },
        h("label", { for: "api-key" }, "API key",
          h("input", { id: "api-key", name: "api-key", type: "password", autocomplete: "off", required: true, autofocus: true,
                       "aria-describedby": failed ? "login-error" : null })),
        h("p", {}, h("button", { type: "submit" }, "Log in")))));
  root.querySelector("#api-key").focus();
}

// ---------------------------------------------------------------- sandboxes

export async function sandboxes(root) {
  const all = new Map();
  const opsOf = new Map();  // sandbox id -> its latest operation line
  const err = errorBox();
  let filter = { labels: {}, state: "" };
  const tbody = h("tbody");
  const count = h("p", { class: "muted", "aria-live": "polite" });
  const status = h("span", { class: "muted", id: "events-status" }, "connecting…");

  const createForm = h("form", { class: "inline", id: "create-form", "aria-label": "Create a sandbox" },
    h("label", {}, "Template", h("input", { name: "template", placeholder: "default", size: 14 })),
    h("label", {}, "Runtime", h("select", { name: "runtime" }, h("option", { value: "" }, "default"), h("option", { value: "oci" }, "oci"), h("option", { value: "microvm" }, "microvm"))),
    h("label", {}, "CPUs", h("input", { name: "cpus", type: "number", min: "0.1", step: "0.1", size: 4 })),
    h("label", {}, "Memory (MiB)", h("input", { name: "memory_mib", type: "number", min: "16", size: 6 })),
    h("label", {}, "Timeout (s)", h("input", { name: "timeout", type: "number", min: "0", size: 6 })),
    h("label", {}, "Network", h("select", { name: "network" }, h("option", { value: "" }, "none (default)"), h("option", { value: "internet" }, "internet"))),
    h("label", {}, "Labels", h("input", { name: "labels", placeholder: "k=v, k2=v2", size: 14 })),
    h("button", { type: "submit" }, "Create sandbox"));
  const createStatus = h("p", { id: "create-status", "aria-live": "polite" });
  createForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    showError(err, null);
    try {
      const body = L.createRequest(Object.fromEntries(new FormData(createForm)));
      const r = await api("POST", "/v1/sandboxes", { json: body });
      opsOf.set(r.sandbox.id, r.operation);
      all.set(r.sandbox.id, all.get(r.sandbox.id) || r.sandbox);
      redraw();
      await follow(r.operation, createStatus);
    } catch (e) {
      showError(err, e);
    }
  });

  const filterForm = h("form", { class: "inline", role: "search", "aria-label": "Filter sandboxes", onsubmit: (e) => e.preventDefault() },
    h("label", {}, "Labels", h("input", { name: "labels", id: "filter-labels", placeholder: "k=v", size: 14 })),
    h("label", {}, "State", h("select", { name: "state", id: "filter-state" },
      ...["", "creating", "running", "paused", "suspended", "deleting", "error"].map((s) => h("option", { value: s }, s || "any")))));
  filterForm.addEventListener("input", () => {
    const f = Object.fromEntries(new FormData(filterForm));
    try {
      filter = { labels: L.parseLabelFilter(f.labels), state: f.state };
      showError(err, null);
    } catch (e) {
      showError(err, e);
    }
    redraw();
  });

  root.append(
    h("h1", {}, "Sandboxes ", status),
    h("fieldset", {}, h("legend", {}, "New sandbox"), createForm, createStatus),
    filterForm, err, count,
    h("div", { class: "table-wrap" },
      h("table", { id: "sandboxes" },
        h("caption", { class: "sr-only" }, "Sandboxes, updated live"),
        h("thead", {}, h("tr", {}, ...["Sandbox", "State", "Template", "Runtime", "Age", "Expires", "CPU / memory", "Labels", "Actions"].map((t, i) =>
          h("th", { scope: "col", class: i >= 2 && i <= 7 ? "hide-narrow" : null }, t)))),
        tbody)));

  function row(sb) {
    const now = Date.now();
    const lim = sb.limits || {};
    const opLine = h("span", { class: "op", "aria-live": "polite" });
    const op = opsOf.get(sb.id);
    if (op) opLine.textContent = L.describeOperation(op);
    const actions = L.actionsFor(sb.state).map((a) =>
      h("button", { type: "button", "data-action": a, "aria-label": `${a} ${sb.id}`, onclick: () => act(sb.id, a) }, a));
    return h("tr", { "data-sandbox-id": sb.id, "data-state": sb.state },
      h("td", {}, h("a", { href: `/ui/sandboxes/${encodeURIComponent(sb.id)}` }, sb.id)),
      h("td", { class: "state" }, sb.state, sb.reason ? h("span", { class: "muted" }, ` (${sb.reason})`) : null),
      h("td", { class: "hide-narrow" }, sb.template),
      h("td", { class: "hide-narrow" }, sb.runtime),
      h("td", { class: "hide-narrow" }, L.formatAge(now - Date.parse(sb.created_at))),
      h("td", { class: "hide-narrow" }, L.formatExpiry(sb.expires_at, now)),
      h("td", { class: "hide-narrow" }, `${lim.cpus ?? "—"} / ${L.formatBytes(lim.memory_bytes)}`),
      h("td", { class: "labels hide-narrow" }, ...Object.entries(sb.metadata || {}).map(([k, v]) => h("code", {}, `${k}=${v}`))),
      h("td", {}, h("div", { class: "row-actions" }, ...actions,
        sb.state === "running" ? h("a", { href: `/ui/sandboxes/${encodeURIComponent(sb.id)}/terminal` }, "terminal") : null), opLine));
  }

  function redraw() {
    const list = L.sortedSandboxes(all, filter);
    tbody.replaceChildren(...list.map(row));
    count.textContent = `${list.length} of ${all.size} sandboxes`;
  }

  async function act(id, action) {
    if (action === "delete" && !confirm(`Delete ${id}?`)) return;
    showError(err, null);
    const [method, path, json] = L.actionRequest(id, action);
    try {
      const r = await api(method, path, { json });
      if (r.operation) {
        opsOf.set(id, r.operation);
        redraw();
        const line = document.createElement("span");
        const done = await follow(r.operation, line);
        opsOf.set(id, done);
        redraw();
      }
    } catch (e) {
      showError(err, e);
    }
  }

  const es = new EventSource("/v1/events");
  const onEvent = (type) => (ev) => {
    const data = JSON.parse(ev.data);
    if (type === "operation") {
      const op = data.operation;
      if (op.target && opsOf.has(op.target) && opsOf.get(op.target).id === op.id) {
        opsOf.set(op.target, op);
        redraw();
      }
      return;
    }
    const changed = L.applyEvent(all, type, data);
    if (changed.length) redraw();
    if (type === "sandbox.created") announce(`sandbox ${data.sandbox.id} created`);
    if (type === "sandbox.deleted") announce(`sandbox ${data.id} deleted`);
  };
  for (const t of ["snapshot", "sandbox.created", "sandbox.state", "sandbox.updated", "sandbox.deleted", "operation"])
    es.addEventListener(t, onEvent(t));
  es.onopen = () => (status.textContent = "live");
  es.onerror = () => (status.textContent = "reconnecting…");
  const ticker = setInterval(redraw, 30000);  // ages and expiries
  return () => {
    es.close();
    clearInterval(ticker);
  };
}

// ---------------------------------------------------------------- one sandbox

export async function sandbox(root, route) {
  const id = route.id;
  const err = errorBox();
  let sb;
  try {
    sb = await api("GET", sbPath(id));
  } catch (e) {
    root.append(h("h1", {}, `Sandbox ${id}`), err);
    showError(err, e);
    return;
  }
  const timers = [];
  root.append(
    h("h1", {}, `Sandbox ${id} `, h("a", { href: `/ui/sandboxes/${encodeURIComponent(id)}/terminal` }, "open terminal")),
    err,
    h("div", { class: "grid" }, details(sb), metricsPanel(id, timers)),
    commandsPanel(id, err),
    filesPanel(id, err),
    snapshotsPanel(id, err),
    portsPanel(id, sb, err));
  return () => timers.forEach((t) => clearInterval(t));
}

function details(sb) {
  const rows = [["State", sb.state + (sb.reason ? ` (${sb.reason})` : "")], ["Template", sb.template], ["Runtime", sb.runtime],
    ["CPUs", sb.limits?.cpus ?? "—"], ["Memory", L.formatBytes(sb.limits?.memory_bytes)], ["Disk", L.formatBytes(sb.limits?.disk_bytes)],
    ["Network", sb.network?.mode ?? "none"], ["Created", sb.created_at], ["Expires", sb.expires_at || "never"],
    ["Labels", Object.entries(sb.metadata || {}).map(([k, v]) => `${k}=${v}`).join(", ") || "—"]];
  return h("section", { "aria-labelledby": "details-h" }, h("h2", { id: "details-h" }, "Details"),
    h("dl", { class: "details" }, ...rows.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, String(v))])));
}

function metricsPanel(id, timers) {
  const cpu = [], mem = [];
  const text = h("p", { id: "metrics-now", "aria-live": "off" }, "…");
  const cpuChart = h("div", { role: "img", "aria-label": "CPU use over the last minutes" });
  const memChart = h("div", { role: "img", "aria-label": "Memory use over the last minutes" });
  const chart = (values, max) => {
    const ns = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(ns, "svg");
    svg.setAttribute("class", "chart");
    svg.setAttribute("viewBox", "0 0 100 30");
    svg.setAttribute("preserveAspectRatio", "none");
    const line = document.createElementNS(ns, "polyline");
    const m = Math.max(max || 0, ...values, 1e-9);
    line.setAttribute("points", values.map((v, i) => `${(i / Math.max(values.length - 1, 1)) * 100},${30 - (v / m) * 28}`).join(" "));
    line.setAttribute("fill", "none");
    line.setAttribute("stroke", "#0550ae");
    line.setAttribute("stroke-width", "1");
    svg.append(line);
    return svg;
  };
  const tick = async () => {
    try {
      const m = await api("GET", `${sbPath(id)}/metrics`);
      cpu.push(m.cpu_used_pct || 0);
      mem.push(m.memory_bytes || 0);
      if (cpu.length > 60) cpu.shift(), mem.shift();
      text.textContent = `CPU ${Number(m.cpu_used_pct || 0).toFixed(1)} % of ${m.cpu_count} · memory ${L.formatBytes(m.memory_bytes)} of ${L.formatBytes(m.memory_limit_bytes)} · disk ${L.formatBytes(m.disk_bytes)}`;
      cpuChart.replaceChildren(chart(cpu, 100));
      memChart.replaceChildren(chart(mem, m.memory_limit_bytes));
    } catch (e) {
      text.textContent = `no metrics: ${e.message}`;
    }
  };
  tick();
  timers.push(setInterval(tick, 5000));
  return h("section", { "aria-labelledby": "metrics-h" }, h("h2", { id: "metrics-h" }, "Metrics"), text, h("p", { class: "muted" }, "CPU %"), cpuChart, h("p", { class: "muted" }, "Memory"), memChart);
}

// The view keeps the newest 1 MiB of characters it read; reads go in 256 KiB steps, so a
// command with gigabytes of output neither hangs the page nor is read whole.
const kOutputShown = 1 << 20;
const kOutputStep = 256 << 10;

function commandsPanel(id, err) {
  const list = h("tbody");
  const out = h("pre", { class: "output", id: "command-output", tabindex: "0", "aria-label": "Command output" });
  const note = h("p", { class: "muted", id: "command-output-note", "aria-live": "polite" });
  const form = h("form", { class: "inline", "aria-label": "Run a command" },
    h("label", {}, "Command", h("input", { name: "cmd", id: "run-cmd", size: 40, required: true })),
    h("button", { type: "submit" }, "Run"));
  // Which stream a command's output view reads, and from which byte ("-N": the last N bytes).
  const streamSel = h("select", { name: "stream", id: "output-stream" }, h("option", { value: "stdout" }, "stdout"), h("option", { value: "stderr" }, "stderr"));
  const fromInput = h("input", { name: "from", id: "output-from", size: 10, inputmode: "numeric", placeholder: "0", "aria-describedby": "output-from-help" });
  const viewForm = h("form", { class: "inline", "aria-label": "Output to show" },
    h("label", {}, "Stream", streamSel),
    h("label", {}, "From byte", fromInput),
    h("button", { type: "submit" }, "Show"),
    h("span", { class: "muted", id: "output-from-help" }, "empty: from the start; -N: the last N bytes"));
  let streaming = null;
  let current = null;
  const show = async (c) => {
    if (streaming) streaming.abort();
    const ctl = new AbortController();
    streaming = ctl;
    current = c;
    const stream = streamSel.value;
    let off;
    try {
      off = L.outputStart(fromInput.value, stream === "stderr" ? c.stderr_size : c.stdout_size);
    } catch (e) {
      showError(err, e);
      return;
    }
    out.textContent = "";
    note.textContent = `${c.id}, ${stream} from byte ${off}`;
    let shown = "";
    let droppedAny = false;
    const decoder = new TextDecoder();
    // Stored output from the chosen offset, then live (long polls) until the command ends.
    for (;;) {
      let r;
      try {
        r = await api("GET", `${sbPath(id)}/commands/${c.id}/output?stream=${stream}&offset=${off}&limit=${kOutputStep}&wait=20s`, { raw: true });
      } catch (e) {
        if (!ctl.signal.aborted) showError(err, e);
        return;
      }
      if (ctl.signal.aborted) return;
      const bytes = new Uint8Array(await r.arrayBuffer());
      if (ctl.signal.aborted) return;
      const next = Number(r.headers.get("Space-Next-Offset") || off + bytes.length);
      const b = L.boundedAppend(shown, decoder.decode(bytes, { stream: true }), kOutputShown);
      shown = b.text;
      if (b.dropped) droppedAny = true;
      out.textContent = shown;
      if (droppedAny) note.textContent = `${c.id}, ${stream}: only the newest ${L.formatBytes(kOutputShown)} read is shown; set "From byte" to see an earlier part`;
      const state = r.headers.get("Space-Command-State");
      const ended = state && state !== "running" && state !== "starting";
      // More stored bytes past this chunk are read at once, without waiting.
      if (ended && next === off + bytes.length && bytes.length === kOutputStep) {
        off = next;
        continue;
      }
      off = next;
      if (ended) {
        const code = r.headers.get("Space-Exit-Code");
        out.append(h("span", { class: "muted" }, `\n[${state}${code !== null ? ", exit " + code : ""}]`));
        refresh();
        return;
      }
    }
  };
  viewForm.addEventListener("submit", (ev) => {
    ev.preventDefault();
    if (current) show(current);
    else showError(err, new Error("choose a command first"));
  });
  const refresh = async () => {
    try {
      const r = await api("GET", `${sbPath(id)}/commands`);
      list.replaceChildren(...r.commands.slice(-50).reverse().map((c) => h("tr", { "data-command-id": c.id },
        h("td", {}, h("button", { type: "button", onclick: () => show(c) }, c.id)),
        h("td", {}, c.cmd ?? (c.argv || []).join(" ")),
        h("td", {}, c.state + (c.exit_code !== null && c.exit_code !== undefined ? ` (${c.exit_code})` : "")),
        h("td", { class: "hide-narrow" }, L.formatBytes(c.stdout_size)),
        h("td", { class: "hide-narrow" }, L.formatBytes(c.stderr_size)))));
    } catch (e) {
      showError(err, e);
    }
  };
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const r = await api("POST", `${sbPath(id)}/commands`, { json: { cmd: new FormData(form).get("cmd") } });
      refresh();
      show(r.command);
    } catch (e) {
      showError(err, e);
    }
  });
  refresh();
  return h("section", { "aria-labelledby": "commands-h" }, h("h2", { id: "commands-h" }, "Commands"), form,
    h("div", { class: "table-wrap" }, h("table", { id: "commands" }, h("thead", {}, h("tr", {}, ...["Command", "What", "State", "stdout", "stderr"].map((t, i) => h("th", { scope: "col", class: i >= 3 ? "hide-narrow" : undefined }, t)))), list)),
    viewForm, note, out);
}

function filesPanel(id, err) {
  let dir = "/";
  const tbody = h("tbody");
  const where = h("p", { id: "files-path" });
  const view = h("pre", { class: "output", id: "file-view", tabindex: "0", "aria-label": "File content", hidden: true });
  const upload = h("input", { type: "file", id: "upload-input", "aria-label": "File to upload" });
  const uploadForm = h("form", { class: "inline", "aria-label": "Upload a file" }, h("label", {}, "Upload into this folder", upload), h("button", { type: "submit" }, "Upload"));
  const status = h("p", { "aria-live": "polite", id: "files-status" });
  const fileUrl = (p) => `${sbPath(id)}/files${q({ path: p })}`;
  const load = async (p) => {
    try {
      const r = await api("GET", `${sbPath(id)}/files:list${q({ path: p, depth: 1 })}`);
      dir = p;
      where.textContent = `Folder ${p}`;
      const rows = [];
      if (p !== "/") rows.push(h("tr", {}, h("td", {}, h("button", { type: "button", onclick: () => load(L.parentPath(p)) }, "..")), h("td", {}, "dir"), h("td", {}), h("td", {})));
      for (const e of r.entries) {
        const full = e.path || L.joinPath(p, e.name);
        rows.push(h("tr", { "data-path": full },
          h("td", {}, e.type === "dir" ? h("button", { type: "button", onclick: () => load(full) }, e.name + "/")
                                       : h("button", { type: "button", onclick: () => viewFile(full) }, e.name)),
          h("td", {}, e.type),
          h("td", { class: "hide-narrow" }, e.type === "file" ? L.formatBytes(e.size) : ""),
          h("td", {}, e.type === "file" ? h("a", { href: fileUrl(full), download: e.name, "aria-label": `download ${e.name}` }, "download") : null, " ",
            h("button", { type: "button", "aria-label": `delete ${e.name}`, onclick: () => remove(full, e.type === "dir") }, "delete"))));
      }
      tbody.replaceChildren(...rows);
    } catch (e) {
      showError(err, e);
    }
  };
  const viewFile = async (p) => {
    try {
      const r = await api("GET", fileUrl(p), { raw: true });
      const text = await r.text();
      view.hidden = false;
      view.textContent = text.length > 200000 ? text.slice(0, 200000) + "\n[…]" : text;
    } catch (e) {
      showError(err, e);
    }
  };
  const remove = async (p, recursive) => {
    if (!confirm(`Delete ${p}?`)) return;
    try {
      await api("DELETE", `${sbPath(id)}/files${q({ path: p, recursive: recursive ? 1 : "" })}`);
      status.textContent = `deleted ${p}`;
      load(dir);
    } catch (e) {
      showError(err, e);
    }
  };
  uploadForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const f = upload.files[0];
    if (!f) return;
    try {
      const target = L.joinPath(dir, f.name);
      await api("PUT", fileUrl(target), { body: f, headers: { "Content-Type": "application/octet-stream" } });
      status.textContent = `uploaded ${target}`;
      load(dir);
    } catch (e) {
      showError(err, e);
    }
  });
  load("/");
  return h("section", { "aria-labelledby": "files-h" }, h("h2", { id: "files-h" }, "Files"), where, uploadForm, status,
    h("div", { class: "table-wrap" }, h("table", { id: "files" }, h("thead", {}, h("tr", {}, ...["Name", "Type", "Size", ""].map((t) => h("th", { scope: "col" }, t)))), tbody)), view);
}

function snapshotsPanel(id, err) {
  const tbody = h("tbody");
  const load = async () => {
    try {
      const r = await api("GET", `${sbPath(id)}/snapshots`);
      tbody.replaceChildren(...r.snapshots.map((s) => h("tr", {}, h("td", {}, s.id), h("td", {}, s.kind), h("td", {}, s.state), h("td", {}, L.formatBytes(s.size)), h("td", {}, s.created_at))));
    } catch (e) {
      showError(err, e);
    }
  };
  load();
  return h("section", { "aria-labelledby": "snap-h" }, h("h2", { id: "snap-h" }, "Snapshots"), h("button", { type: "button", onclick: load }, "Refresh"),
    h("div", { class: "table-wrap" }, h("table", {}, h("thead", {}, h("tr", {}, ...["Snapshot", "Kind", "State", "Size", "Taken"].map((t) => h("th", { scope: "col" }, t)))), tbody)));
}

function portsPanel(id, sb, err) {
  const out = h("p", { id: "port-link" });
  const form = h("form", { class: "inline", "aria-label": "Open a port" },
    h("label", {}, "Port", h("input", { name: "port", type: "number", min: 1, max: 65535, required: true, size: 6 })),
    h("button", { type: "submit" }, "Link"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const r = await api("POST", `${sbPath(id)}/urls`, { json: { port: Number(new FormData(form).get("port")) } });
      out.replaceChildren(h("a", { href: r.url, target: "_blank", rel: "noopener noreferrer" }, r.url), h("span", { class: "muted" }, ` (until ${r.expires_at})`));
    } catch (e) {
      showError(err, e);
    }
  });
  return h("section", { "aria-labelledby": "ports-h" }, h("h2", { id: "ports-h" }, "Ports"),
    h("p", { class: "muted" }, sb.network?.mode && sb.network.mode !== "none" ? "A signed link to a server listening inside the sandbox." : "This sandbox has no network: its ports are reachable only once it is created with one."),
    form, out);
}

// ---------------------------------------------------------------- terminal

export async function terminal(root, route) {
  const id = route.id;
  const err = errorBox();
  const status = h("span", { id: "terminal-status", role: "status" }, "starting…");
  const box = h("div", { id: "terminal", "aria-label": `Terminal of ${id}` });
  const closeBtn = h("button", { type: "button", id: "terminal-close" }, "End session");
  root.append(h("h1", {}, "Terminal ", h("a", { href: `/ui/sandboxes/${encodeURIComponent(id)}` }, id), " ", status), err,
    h("p", { class: "muted", id: "terminal-help" }, "Keys, Tab included, go to the terminal while it has focus; Escape then Tab moves the focus out."), closeBtn, box);
  if (!window.Terminal) {
    showError(err, new Error("xterm.js did not load"));
    return;
  }
  const term = new window.Terminal({ cursorBlink: true, convertEol: false, screenReaderMode: true, fontSize: 14 });
  const fit = new window.FitAddon.FitAddon();
  term.loadAddon(fit);
  term.open(box);
  try { fit.fit(); } catch {}
  let cmd;
  try {
    cmd = await api("POST", `${sbPath(id)}/commands`, {
      json: { cmd: "if [ -x /bin/bash ]; then exec /bin/bash -l; else exec /bin/sh -l; fi", pty: { cols: term.cols, rows: term.rows }, env: { TERM: "xterm-256color" } },
    });
  } catch (e) {
    showError(err, e);
    term.dispose();
    return;
  }
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  const session = new TerminalSession({
    url: `${proto}//${location.host}${sbPath(id)}/commands/${cmd.id}/terminal`,
    makeSocket: (u, p) => new WebSocket(u, p),
    onOutput: (bytes) => term.write(bytes),
    onStatus: (s) => (status.textContent = s),
    onExit: (info) => {
      term.write(`\r\n[exited${info.exit_code !== null ? " with " + info.exit_code : ""}]\r\n`);
      announce("terminal session ended");
    },
  });
  window.spaceTerminal = session;  // for tests: drop() simulates a lost connection
  // Escape then Tab leaves the terminal (which otherwise keeps Tab for the shell).
  let escaped = false;
  term.attachCustomKeyEventHandler((ev) => {
    if (ev.type !== "keydown") return true;
    if (ev.key === "Tab" && escaped) {
      escaped = false;
      ev.preventDefault();
      closeBtn.focus();
      return false;
    }
    escaped = ev.key === "Escape";
    return true;
  });
  term.textarea?.setAttribute("aria-describedby", "terminal-help");
  term.onData((d) => session.input(d));
  term.onResize(({ cols, rows }) => session.resize(cols, rows));
  const onWin = () => { try { fit.fit(); } catch {} };
  window.addEventListener("resize", onWin);
  closeBtn.addEventListener("click", () => session.close());
  term.focus();
  return () => {
    window.removeEventListener("resize", onWin);
    session.close();
    term.dispose();
    delete window.spaceTerminal;
  };
}

// ---------------------------------------------------------------- templates, operations, keys

export async function templates(root) {
  const err = errorBox();
  const tbody = h("tbody");
  const log = h("pre", { class: "output", id: "build-log", tabindex: "0", "aria-label": "Build log", hidden: true });
  const status = h("p", { "aria-live": "polite", id: "build-status" });
  const form = h("form", { "aria-label": "Build a template" },
    h("div", { class: "inline" },
      h("label", {}, "Name", h("input", { name: "name", required: true, pattern: "[a-z0-9][a-z0-9._-]*", size: 16 })),
      h("label", {}, "Tag", h("input", { name: "tag", placeholder: "latest", size: 10 }))),
    h("label", {}, "Spacefile", h("textarea", { name: "spec", rows: 6, cols: 60, required: true }, "FROM base\nRUN echo hello > /hello.txt\n")),
    h("p", {}, h("button", { type: "submit" }, "Build")));
  const load = async () => {
    try {
      const r = await api("GET", "/v1/templates");
      tbody.replaceChildren(...r.templates.map((t) => h("tr", {}, h("td", {}, t.ref || `${t.name}:${t.tag}`), h("td", { class: "hide-narrow" }, (t.digest || "").slice(0, 19)), h("td", {}, t.created_at))));
    } catch (e) {
      showError(err, e);
    }
  };
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const f = Object.fromEntries(new FormData(form));
    try {
      const r = await api("POST", "/v1/templates", { json: { name: f.name, tag: f.tag || "latest", spec: f.spec } });
      let op = r.operation;
      status.textContent = L.describeOperation(op);
      log.hidden = false;
      while (!op.done) {
        op = await api("GET", `/v1/operations/${op.id}?wait=2s`);
        status.textContent = L.describeOperation(op);
        try {
          log.textContent = await (await api("GET", `/v1/templates/builds/${op.id}/log`, { raw: true })).text();
        } catch {}
      }
      log.textContent = await (await api("GET", `/v1/templates/builds/${op.id}/log`, { raw: true })).text();
      load();
    } catch (e) {
      showError(err, e);
    }
  });
  load();
  root.append(h("h1", {}, "Templates"), err,
    h("div", { class: "table-wrap" }, h("table", {}, h("thead", {}, h("tr", {}, ...["Template", "Digest", "Built"].map((t) => h("th", { scope: "col" }, t)))), tbody)),
    h("h2", {}, "Build from a Spacefile"), form, status, log);
}

export async function operations(root) {
  const err = errorBox();
  const tbody = h("tbody");
  const load = async () => {
    try {
      const r = await api("GET", "/v1/operations?limit=100");
      tbody.replaceChildren(...r.operations.map((o) => h("tr", { "data-operation-id": o.id }, h("td", {}, o.id), h("td", {}, o.kind), h("td", {}, o.target),
        h("td", { class: o.state === "failed" ? "error" : null }, o.state + (o.error ? ` (${o.error.code}: ${o.error.message})` : "")), h("td", { class: "hide-narrow" }, o.created_at))));
    } catch (e) {
      showError(err, e);
    }
  };
  load();
  const t = setInterval(load, 5000);
  root.append(h("h1", {}, "Operations"), err, h("div", { class: "table-wrap" }, h("table", {}, h("thead", {}, h("tr", {}, ...["Operation", "Kind", "Target", "State", "Started"].map((x) => h("th", { scope: "col" }, x)))), tbody)));
  return () => clearInterval(t);
}

export async function keys(root) {
  const err = errorBox();
  const tbody = h("tbody");
  const shown = h("p", { "aria-live": "polite", id: "new-key" });
  const load = async () => {
    try {
      const r = await api("GET", "/v1/keys");
      tbody.replaceChildren(...r.keys.map((k) => h("tr", {}, h("td", {}, k.name), h("td", {}, k.id), h("td", {}, k.hint), h("td", { class: "hide-narrow" }, k.created_at),
        h("td", {}, h("button", { type: "button", "aria-label": `revoke ${k.name}`, onclick: async () => {
          if (!confirm(`Revoke key ${k.name}?`)) return;
          try { await api("DELETE", `/v1/keys/${encodeURIComponent(k.id)}`); load(); } catch (e) { showError(err, e); }
        } }, "revoke")))));
    } catch (e) {
      showError(err, e);
    }
  };
  const form = h("form", { class: "inline", "aria-label": "Create an API key" }, h("label", {}, "Name", h("input", { name: "name", required: true, size: 16 })), h("button", { type: "submit" }, "Create key"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const r = await api("POST", "/v1/keys", { json: { name: new FormData(form).get("name") } });
      shown.replaceChildren("New key (shown once): ", h("code", {}, r.key));
      load();
    } catch (e) {
      showError(err, e);
    }
  });
  const tokenOut = h("p", { "aria-live": "polite" });
  const tokenForm = h("form", { class: "inline", "aria-label": "Mint a sandbox token" },
    h("label", {}, "Sandbox", h("input", { name: "sandbox", required: true, size: 16 })),
    h("label", {}, "Scopes", h("input", { name: "scopes", placeholder: "all", size: 24 })),
    h("label", {}, "TTL (s)", h("input", { name: "ttl", type: "number", min: 1, size: 8 })),
    h("button", { type: "submit" }, "Mint token"));
  tokenForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const f = Object.fromEntries(new FormData(tokenForm));
    const body = {};
    if (f.scopes) body.scopes = f.scopes.split(/[\s,]+/).filter(Boolean);
    if (f.ttl) body.ttl_s = Number(f.ttl);
    try {
      const r = await api("POST", `${sbPath(f.sandbox)}/tokens`, { json: body });
      tokenOut.replaceChildren("Token: ", h("code", {}, r.token), ` (until ${r.expires_at})`);
    } catch (e) {
      showError(err, e);
    }
  });
  load();
  root.append(h("h1", {}, "Keys and tokens"), err,
    h("div", { class: "table-wrap" }, h("table", {}, h("thead", {}, h("tr", {}, ...["Name", "Id", "Hint", "Created", ""].map((x) => h("th", { scope: "col" }, x)))), tbody)),
    form, shown, h("h2", {}, "Sandbox tokens"), tokenForm, tokenOut);
}

export async function notfound(root) {
  root.append(h("h1", {}, "Not found"), h("p", {}, h("a", { href: "/ui/" }, "Back to the sandboxes")));
}
