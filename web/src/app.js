// The console's shell: session, navigation (history API under /ui), the page of each route.
import { api, setCsrf } from "./api.js";
import { routeOf } from "./logic.js";
import * as pages from "./pages.js";

const main = document.getElementById("main");
let cleanup = null;
let session = null;

export function navigate(path, replace = false) {
  if (replace) history.replaceState(null, "", path);
  else history.pushState(null, "", path);
  render();
}
window.spaceNavigate = navigate;

async function loadSession() {
  try {
    session = await api("GET", "/ui/session");
    setCsrf(session.csrf);
  } catch {
    session = null;
  }
}

async function render() {
  if (cleanup) {
    try { cleanup(); } catch {}
    cleanup = null;
  }
  const route = routeOf(location.pathname);
  const top = document.getElementById("top");
  if (route.page !== "login" && !session) await loadSession();
  if (route.page !== "login" && !session) {
    history.replaceState(null, "", "/ui/login");
    return render();
  }
  top.hidden = route.page === "login";
  if (session) {
    document.getElementById("whoami").textContent = `key: ${session.key_name}`;
    document.getElementById("logout-csrf").value = session.csrf;
  }
  for (const a of document.querySelectorAll("[data-nav]")) {
    const current = a.dataset.nav === route.page || (a.dataset.nav === "sandboxes" && ["sandbox", "terminal"].includes(route.page));
    if (current) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  main.replaceChildren();
  const page = pages[route.page] || pages.notfound;
  cleanup = (await page(main, route, { session, navigate })) || null;
  if (route.page !== "login") main.focus({ preventScroll: true });
}

// Links inside the app stay in the app.
document.addEventListener("click", (ev) => {
  const a = ev.target.closest && ev.target.closest("a[href^='/ui']");
  if (!a || a.target || a.hasAttribute("download") || ev.ctrlKey || ev.metaKey || ev.shiftKey || ev.button !== 0) return;
  ev.preventDefault();
  navigate(a.getAttribute("href"));
});
window.addEventListener("popstate", render);
window.addEventListener("space:logged-out", () => {
  session = null;
  navigate("/ui/login", true);
});
render();
