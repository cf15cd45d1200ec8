// The API from the page: same origin, the session cookie (HttpOnly: the page never sees it)
// and the CSRF token on every change. The API key is never held here.
let csrf = "";

export function setCsrf(token) {
  csrf = token || "";
}

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// method, path (with query), {json, body (raw), headers, raw: return the Response}
export async function api(method, path, opts = {}) {
  const headers = { Accept: "application/json", ...(opts.headers || {}) };
  let body = opts.body;
  if (opts.json !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(opts.json);
  }
  if (method !== "GET" && method !== "HEAD" && csrf) headers["X-CSRF-Token"] = csrf;
  const r = await fetch(path, { method, headers, body, credentials: "same-origin" });
  if (r.status === 401 && !path.startsWith("/ui/")) {
    window.dispatchEvent(new CustomEvent("space:logged-out"));
  }
  if (!r.ok) {
    let code = "http_" + r.status, message = r.statusText;
    try {
      const j = await r.json();
      if (j.error) ({ code, message } = j.error);
    } catch {}
    throw new ApiError(r.status, code, message);
  }
  if (opts.raw) return r;
  const text = await r.text();
  return text ? JSON.parse(text) : {};
}

export const q = (params) => {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (Array.isArray(v)) v.forEach((x) => u.append(k, x));
    else if (v !== undefined && v !== "") u.append(k, v);
  }
  const s = u.toString();
  return s ? "?" + s : "";
};
