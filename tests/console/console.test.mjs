// The web console end to end: Debian's chromium (SPACE_CHROMIUM) driven by playwright-core,
// headless, against a real spaced on loopback (SPACE_URL, SPACE_API_KEY). Every request the
// browser makes is recorded, and the run fails if one goes anywhere but 127.0.0.1; the
// browser's own background traffic is off, and a dead proxy on loopback catches anything
// else it might try. Screenshots of each page go to SPACE_ARTIFACTS.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { chromium } from "playwright-core";

const URL_ = process.env.SPACE_URL;
const KEY = process.env.SPACE_API_KEY;
const ART = process.env.SPACE_ARTIFACTS || "artifacts";
mkdirSync(ART, { recursive: true });
const requests = [];
let browser, context, page;
let sandboxId;

async function apiCall(method, path, body) {
  const r = await fetch(URL_ + path, {
    method,
    headers: { Authorization: `Bearer ${KEY}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  return { status: r.status, body: text ? JSON.parse(text) : null };
}

const shot = (name) => page.screenshot({ path: join(ART, `${name}.png`), fullPage: true });

before(async () => {
  browser = await chromium.launch({
    executablePath: process.env.SPACE_CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: [
      "--no-sandbox", // root in CI
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
      "--disable-default-apps", "--disable-domain-reliability", "--disable-client-side-phishing-detection",
      "--no-first-run", "--no-pings", "--metrics-recording-only", "--disable-features=OptimizationHints,MediaRouter,Translate",
      // Anything not on loopback goes to a port where nothing listens.
      "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>;127.0.0.1",
    ],
  });
  context = await browser.newContext({ viewport: { width: 1280, height: 720 }, acceptDownloads: true });
  context.on("request", (r) => requests.push(r.url()));
  page = await context.newPage();
  page.on("dialog", (d) => d.accept());
  page.on("pageerror", (e) => console.error("page error:", e.message));
});

after(async () => {
  if (sandboxId) await apiCall("DELETE", `/v1/sandboxes/${sandboxId}?wait=60s`).catch(() => {});
  await browser?.close();
});

test("a wrong key is refused", async () => {
  await page.goto(URL_ + "/ui/");
  await page.waitForURL(/\/ui\/login/);
  await page.getByLabel("API key").fill("sk-not-a-key");
  await page.getByRole("button", { name: "Log in" }).click();
  await page.waitForURL(/error=invalid-key/);
  await page.locator("#login-error").waitFor();
  await shot("login-refused");
  const cookies = await context.cookies();
  assert.ok(!cookies.some((c) => c.name === "space_session"), "no session after a wrong key");
  // And the API, asked with no credential, stays shut.
  const r = await page.evaluate(async () => (await fetch("/v1/sandboxes")).status);
  assert.equal(r, 401);
});

test("log in: an HttpOnly SameSite=Strict session, the key not in the page", async () => {
  await page.goto(URL_ + "/ui/login");
  await shot("login");
  await page.getByLabel("API key").fill(KEY);
  await page.getByRole("button", { name: "Log in" }).click();
  await page.waitForURL(/\/ui\/$/);
  await page.locator("table#sandboxes").waitFor();
  await page.locator("#events-status", { hasText: "live" }).waitFor();
  const session = (await context.cookies()).find((c) => c.name === "space_session");
  assert.ok(session && session.httpOnly && session.sameSite === "Strict", JSON.stringify(session));
  const html = await page.content();
  assert.ok(!html.includes(KEY), "the API key appears in the page");
  const stored = await page.evaluate(() => JSON.stringify({ ...localStorage }) + JSON.stringify({ ...sessionStorage }) + document.cookie);
  assert.ok(!stored.includes(KEY), "the API key is stored by the page");
  // A change without the CSRF token is refused, even with the cookie.
  const status = await page.evaluate(async () => (await fetch("/v1/keys", { method: "POST", headers: { "Content-Type": "application/json" }, body: '{"name":"csrf-probe"}' })).status);
  assert.equal(status, 403);
});

test("a new sandbox appears without reloading, and reaches running", async () => {
  let navigations = 0;
  page.on("framenavigated", (f) => { if (f === page.mainFrame()) navigations++; });
  const r = await apiCall("POST", "/v1/sandboxes", { template: "base", timeout: 900, metadata: { suite: "console" } });
  assert.equal(r.status, 202, JSON.stringify(r.body));
  sandboxId = r.body.sandbox.id;
  const row = page.locator(`tr[data-sandbox-id="${sandboxId}"]`);
  await row.waitFor({ timeout: 30000 });
  await page.locator(`tr[data-sandbox-id="${sandboxId}"][data-state="running"]`).waitFor({ timeout: 120000 });
  // Filtering by label and state keeps it; another label hides it.
  await page.locator("#filter-labels").fill("suite=console");
  await page.locator("#filter-state").selectOption("running");
  await row.waitFor();
  await page.locator("#filter-labels").fill("suite=other");
  await row.waitFor({ state: "detached" });
  await page.locator("#filter-labels").fill("");
  await page.locator("#filter-state").selectOption("");
  await row.waitFor();
  assert.equal(navigations, 0, "the page reloaded");
  await shot("sandboxes");
  await page.setViewportSize({ width: 420, height: 800 });
  await shot("sandboxes-narrow");
  await page.setViewportSize({ width: 1280, height: 720 });
});

test("create from the form, pause and resume from its row, each operation shown to its end", async () => {
  const made = `form-${Date.now()}`;
  await page.locator('#create-form input[name="labels"]').fill(`suite=console, made=${made}`);
  await page.locator('#create-form input[name="timeout"]').fill("600");
  await page.getByRole("button", { name: "Create sandbox", exact: true }).click();
  await page.locator("#create-status", { hasText: "create: succeeded" }).waitFor({ timeout: 120000 });
  const row = page.locator("tr[data-sandbox-id]", { hasText: `made=${made}` });
  await row.and(page.locator('[data-state="running"]')).waitFor({ timeout: 30000 });
  const id = await row.getAttribute("data-sandbox-id");
  await row.locator('button[data-action="pause"]').click();
  await page.locator(`tr[data-sandbox-id="${id}"][data-state="paused"] .op`, { hasText: "pause: succeeded" }).waitFor({ timeout: 60000 });
  await page.locator(`tr[data-sandbox-id="${id}"] button[data-action="resume"]`).click();
  await page.locator(`tr[data-sandbox-id="${id}"][data-state="running"] .op`, { hasText: "resume: succeeded" }).waitFor({ timeout: 60000 });
  // A bad limit is refused by the form itself, before any request.
  const before = requests.length;
  await page.locator('#create-form input[name="cpus"]').fill("-2");
  await page.getByRole("button", { name: "Create sandbox", exact: true }).click();
  assert.equal(await page.locator('#create-form input[name="cpus"]').evaluate((e) => e.validity.valid), false);
  assert.ok(!requests.slice(before).some((u) => u.endsWith("/v1/sandboxes")), "a create was sent");
  await page.locator('#create-form input[name="cpus"]').fill("");
  await shot("sandboxes-actions");
  const del = await apiCall("DELETE", `/v1/sandboxes/${id}?wait=60s`);
  assert.equal(del.status, 200, JSON.stringify(del.body));
  await page.locator(`tr[data-sandbox-id="${id}"]`).waitFor({ state: "detached", timeout: 30000 });
});

test("terminal: type a command, read its output, survive a dropped connection", async () => {
  await page.locator(`tr[data-sandbox-id="${sandboxId}"] a`, { hasText: "terminal" }).click();
  await page.waitForURL(new RegExp(`/ui/sandboxes/${sandboxId}/terminal$`));
  await page.locator("#terminal-status", { hasText: "connected" }).waitFor({ timeout: 30000 });
  const rows = page.locator("#terminal .xterm-rows");
  await page.locator("#terminal").click();
  await page.keyboard.type("echo hello-$((6*7))\n");
  // Keyboard: Escape then Tab leaves the terminal for the page.
  await page.keyboard.press("Escape");
  await page.keyboard.press("Tab");
  assert.equal(await page.evaluate(() => document.activeElement.id), "terminal-close");
  await page.locator("#terminal").click();
  await rows.filter({ hasText: "hello-42" }).waitFor({ timeout: 20000 });
  await shot("terminal");
  // A drop, then the same PTY again: nothing lost, nothing shown twice.
  await page.evaluate(() => window.spaceTerminal.drop());
  await page.locator("#terminal-status", { hasText: "reconnecting" }).waitFor({ timeout: 10000 });
  await page.locator("#terminal-status", { hasText: "connected" }).waitFor({ timeout: 30000 });
  await page.keyboard.type("echo again-$((1+1))\n");
  await rows.filter({ hasText: "again-2" }).waitFor({ timeout: 20000 });
  const text = await rows.innerText();
  assert.equal(text.split("hello-42").length - 1, 1, text);
  // Resizing reaches the PTY.
  await page.setViewportSize({ width: 900, height: 600 });
  await page.waitForTimeout(500);
  await page.keyboard.type("stty size\n");
  await page.waitForFunction(() => /\n\d+ \d+\s*\n/.test(document.querySelector("#terminal .xterm-rows").innerText), null, { timeout: 20000 });
  await page.setViewportSize({ width: 1280, height: 720 });
  // Ending the session hangs up the shell: the page says it exited.
  await page.locator("#terminal-close").click();
  await page.locator("#terminal-status", { hasText: /exited|closed/ }).waitFor({ timeout: 20000 });
});

test("files: upload, view and download", async () => {
  await page.goto(`${URL_}/ui/sandboxes/${sandboxId}`);
  await page.locator("#files tbody tr").first().waitFor({ timeout: 20000 });
  const content = `uploaded through the console ${Date.now()}\n`;
  await page.locator("#upload-input").setInputFiles({ name: "console-note.txt", mimeType: "text/plain", buffer: Buffer.from(content) });
  await page.getByRole("button", { name: "Upload", exact: true }).click();
  const row = page.locator('tr[data-path="/console-note.txt"]');
  await row.waitFor({ timeout: 20000 });
  const inside = await fetch(`${URL_}/v1/sandboxes/${sandboxId}/files?path=/console-note.txt`, { headers: { Authorization: `Bearer ${KEY}` } });
  assert.equal(await inside.text(), content);
  await row.getByRole("button", { name: "console-note.txt", exact: true }).click();
  await page.locator("#file-view", { hasText: "uploaded through the console" }).waitFor();
  const [download] = await Promise.all([page.waitForEvent("download"), row.getByRole("link", { name: /download/ }).click()]);
  assert.equal(readFileSync(await download.path(), "utf8"), content);
  // A command and its output on the sandbox page.
  await page.locator("#run-cmd").fill("echo from-the-page");
  await page.getByRole("button", { name: "Run", exact: true }).click();
  await page.locator("#command-output", { hasText: "from-the-page" }).waitFor({ timeout: 20000 });
  await page.locator("#metrics-now", { hasText: "CPU" }).waitFor({ timeout: 20000 });
  await shot("sandbox");
  // Stored output from any offset, either stream: a command writes 0..9 to stdout and
  // err0..err9 to stderr; the view then shows stderr from its last 10 bytes only.
  const started = await apiCall("POST", `/v1/sandboxes/${sandboxId}/commands`, { cmd: "for i in 0 1 2 3 4 5 6 7 8 9; do echo $i; echo err$i >&2; done" });
  assert.equal(started.status, 201, JSON.stringify(started.body));
  const cid = started.body.command.id;
  await apiCall("GET", `/v1/sandboxes/${sandboxId}/commands/${cid}?wait=30s`);
  await page.reload();
  const cmdRow = page.locator(`tr[data-command-id="${cid}"]`);
  await cmdRow.waitFor({ timeout: 20000 });
  await cmdRow.getByRole("button", { name: cid }).click();
  await page.locator("#command-output", { hasText: "[exited, exit 0]" }).waitFor({ timeout: 20000 });
  assert.equal((await page.locator("#command-output").innerText()).split("\n[")[0], "0\n1\n2\n3\n4\n5\n6\n7\n8\n9\n");
  await page.getByLabel("Stream").selectOption("stderr");
  await page.getByLabel("From byte").fill("-10");
  await page.getByRole("button", { name: "Show", exact: true }).click();
  await page.locator("#command-output-note", { hasText: "stderr from byte 40" }).waitFor({ timeout: 20000 });
  await page.locator("#command-output", { hasText: "[exited, exit 0]" }).waitFor({ timeout: 20000 });
  assert.equal((await page.locator("#command-output").innerText()).split("\n[")[0], "err8\nerr9\n");
  // A from-byte that is not a number is refused on the page, before any request.
  const sent = requests.length;
  await page.getByLabel("From byte").fill("ten");
  await page.getByRole("button", { name: "Show", exact: true }).click();
  await page.locator('[role="alert"]', { hasText: "want a whole number" }).waitFor({ timeout: 5000 });
  assert.ok(!requests.slice(sent).some((u) => u.includes("/output")), "an output read was sent");
  await row.getByRole("button", { name: "delete console-note.txt" }).click();
  await row.waitFor({ state: "detached", timeout: 20000 });
});

test("templates: build one from a Spacefile and read its log", async () => {
  await page.goto(URL_ + "/ui/templates");
  await page.getByLabel("Name").fill("console-e2e");
  await page.getByLabel("Spacefile").fill("FROM base\nRUN echo built-by-the-console > /made.txt\n");
  await page.getByRole("button", { name: "Build", exact: true }).click();
  await page.locator("#build-status", { hasText: "template_build: succeeded" }).waitFor({ timeout: 180000 });
  await page.locator("#build-log", { hasText: "RUN" }).waitFor();
  await page.locator("main table tbody tr", { hasText: "console-e2e:latest" }).waitFor({ timeout: 20000 });
  await shot("templates-built");
});

test("other pages render", async () => {
  for (const [path, name] of [["/ui/templates", "templates"], ["/ui/operations", "operations"], ["/ui/keys", "keys"]]) {
    await page.goto(URL_ + path);
    await page.locator("main h1").waitFor();
    await page.waitForLoadState("networkidle").catch(() => {});
    await shot(name);
  }
  await page.locator("main table tbody tr").first().waitFor();  // keys: at least the bootstrap key
});

test("delete the sandbox from its row", async () => {
  await page.goto(URL_ + "/ui/");
  const row = page.locator(`tr[data-sandbox-id="${sandboxId}"]`);
  await row.waitFor({ timeout: 20000 });
  await row.locator('button[data-action="delete"]').click();
  await row.waitFor({ state: "detached", timeout: 120000 });
  await shot("sandbox-deleted");
  const r = await apiCall("GET", `/v1/sandboxes/${sandboxId}`);
  assert.ok(r.status === 404 || r.body?.state === "deleted", JSON.stringify(r));
  sandboxId = null;
});

test("logout ends the session", async () => {
  await page.getByRole("button", { name: "Log out" }).click();
  await page.waitForURL(/\/ui\/login/);
  const status = await page.evaluate(async () => (await fetch("/v1/sandboxes")).status);
  assert.equal(status, 401);
});

test("no request left the host", () => {
  assert.ok(requests.length > 10, `only ${requests.length} requests recorded`);
  const off = requests.filter((u) => {
    if (u.startsWith("data:") || u.startsWith("blob:")) return false;
    return new URL(u).hostname !== "127.0.0.1";
  });
  assert.deepEqual(off, []);
});
