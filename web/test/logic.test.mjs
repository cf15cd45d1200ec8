// The console's own logic (web/src/logic.js), under node's test runner.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as L from "../src/logic.js";

test("label filters parse and refuse what is not key=value", () => {
  assert.deepEqual(L.parseLabelFilter(""), {});
  assert.deepEqual(L.parseLabelFilter("a=1, b=2 c="), { a: "1", b: "2", c: "" });
  assert.deepEqual(L.parseLabelFilter("k=v=w"), { k: "v=w" });
  assert.throws(() => L.parseLabelFilter("novalue"), /want key=value/);
  assert.throws(() => L.parseLabelFilter("=x"), /want key=value/);
});

test("filters match on state and every label", () => {
  const sb = { id: "sb-1", state: "running", metadata: { team: "a", env: "ci" } };
  assert.ok(L.matchesFilter(sb, { labels: {}, state: "" }));
  assert.ok(L.matchesFilter(sb, { labels: { team: "a" }, state: "running" }));
  assert.ok(!L.matchesFilter(sb, { labels: { team: "b" }, state: "" }));
  assert.ok(!L.matchesFilter(sb, { labels: { team: "a", other: "x" }, state: "" }));
  assert.ok(!L.matchesFilter(sb, { labels: {}, state: "paused" }));
  assert.ok(!L.matchesFilter({ id: "x", state: "running" }, { labels: { team: "a" } }));
});

test("events keep the list as the server has it", () => {
  const m = new Map([["sb-old", { id: "sb-old", state: "running" }]]);
  let changed = L.applyEvent(m, "snapshot", { sandboxes: [{ id: "sb-1", state: "running" }, { id: "sb-2", state: "paused" }] });
  assert.deepEqual([...m.keys()].sort(), ["sb-1", "sb-2"]);
  assert.deepEqual(changed.sort(), ["sb-1", "sb-2", "sb-old"]);
  L.applyEvent(m, "sandbox.created", { type: "sandbox.created", sandbox: { id: "sb-3", state: "creating" } });
  L.applyEvent(m, "sandbox.state", { from: "creating", to: "running", sandbox: { id: "sb-3", state: "running" } });
  assert.equal(m.get("sb-3").state, "running");
  changed = L.applyEvent(m, "sandbox.deleted", { id: "sb-1" });
  assert.deepEqual(changed, ["sb-1"]);
  assert.ok(!m.has("sb-1"));
  assert.deepEqual(L.applyEvent(m, "operation", { operation: { id: "op-1" } }), []);
  assert.equal(m.size, 2);
});

test("sorted list: newest first, filtered", () => {
  const m = new Map();
  for (const [id, t, st] of [["a", "2026-01-01T00:00:00Z", "running"], ["b", "2026-01-02T00:00:00Z", "paused"], ["c", "2026-01-03T00:00:00Z", "running"]])
    m.set(id, { id, created_at: t, state: st, metadata: {} });
  assert.deepEqual(L.sortedSandboxes(m, { labels: {}, state: "" }).map((s) => s.id), ["c", "b", "a"]);
  assert.deepEqual(L.sortedSandboxes(m, { labels: {}, state: "running" }).map((s) => s.id), ["c", "a"]);
});

test("actions follow the lifecycle", () => {
  assert.deepEqual(L.actionsFor("running"), ["pause", "suspend", "snapshot", "fork", "delete"]);
  assert.ok(L.actionsFor("paused").includes("resume"));
  assert.deepEqual(L.actionsFor("suspended"), ["wake", "delete"]);
  assert.deepEqual(L.actionsFor("creating"), []);
  assert.deepEqual(L.actionRequest("sb-1", "pause"), ["POST", "/v1/sandboxes/sb-1/pause", undefined]);
  assert.deepEqual(L.actionRequest("sb-1", "snapshot"), ["POST", "/v1/sandboxes/sb-1/snapshots", undefined]);
  assert.deepEqual(L.actionRequest("sb-1", "fork"), ["POST", "/v1/sandboxes/sb-1/fork", { count: 1 }]);
  assert.deepEqual(L.actionRequest("sb/1", "delete"), ["DELETE", "/v1/sandboxes/sb%2F1", undefined]);
  assert.throws(() => L.actionRequest("sb-1", "explode"));
});

test("routes of the console's paths", () => {
  assert.deepEqual(L.routeOf("/ui/"), { page: "sandboxes" });
  assert.deepEqual(L.routeOf("/ui"), { page: "sandboxes" });
  assert.deepEqual(L.routeOf("/ui/login"), { page: "login" });
  assert.deepEqual(L.routeOf("/ui/sandboxes/sb-12"), { page: "sandbox", id: "sb-12" });
  assert.deepEqual(L.routeOf("/ui/sandboxes/sb-12/terminal"), { page: "terminal", id: "sb-12" });
  assert.deepEqual(L.routeOf("/ui/templates/"), { page: "templates" });
  assert.deepEqual(L.routeOf("/ui/keys"), { page: "keys" });
  assert.deepEqual(L.routeOf("/ui/nope/x"), { page: "notfound" });
});

test("create form to request body", () => {
  assert.deepEqual(L.createRequest({ template: "", runtime: "", cpus: "", memory_mib: "", timeout: "", network: "", labels: "" }), {});
  assert.deepEqual(L.createRequest({ template: "base", runtime: "oci", cpus: "0.5", memory_mib: "256", timeout: "600", network: "internet", labels: "team=a" }), {
    template: "base", runtime: "oci", limits: { cpus: 0.5, memory_bytes: 268435456 }, timeout: 600, network: { mode: "internet" }, metadata: { team: "a" },
  });
  assert.throws(() => L.createRequest({ cpus: "-1" }), /positive/);
  assert.throws(() => L.createRequest({ memory_mib: "abc" }), /positive/);
  assert.throws(() => L.createRequest({ timeout: "1.5" }), /whole number/);
  assert.throws(() => L.createRequest({ labels: "bad" }), /key=value/);
});

test("formatting", () => {
  assert.equal(L.formatAge(5000), "5 s");
  assert.equal(L.formatAge(5 * 60000), "5 min");
  assert.equal(L.formatAge(3 * 3600000), "3 h");
  assert.equal(L.formatAge(-1), "—");
  assert.equal(L.formatBytes(512), "512 B");
  assert.equal(L.formatBytes(536870912), "512 MiB");
  assert.equal(L.formatBytes(1536), "1.5 KiB");
  assert.equal(L.formatBytes(undefined), "—");
  assert.equal(L.formatExpiry(null, 0), "never");
  assert.equal(L.formatExpiry("2026-01-01T00:10:00Z", Date.parse("2026-01-01T00:00:00Z")), "in 10 min");
  assert.equal(L.formatExpiry("2026-01-01T00:00:00Z", Date.parse("2026-01-02T00:00:00Z")), "now");
  assert.equal(L.describeOperation({ kind: "pause", state: "running" }), "pause: running");
  assert.equal(L.describeOperation({ kind: "create", state: "failed", error: { code: "not_found", message: "no template x" } }),
    "create: failed (not_found: no template x)");
  assert.equal(L.parentPath("/a/b/"), "/a");
  assert.equal(L.parentPath("/a"), "/");
  assert.equal(L.joinPath("/", "x"), "/x");
  assert.equal(L.joinPath("/a", "x"), "/a/x");
});

test("the output view starts where the from-byte field says", () => {
  assert.equal(L.outputStart("", 500), 0);
  assert.equal(L.outputStart(undefined, 500), 0);
  assert.equal(L.outputStart(" 120 ", 500), 120);
  assert.equal(L.outputStart("9999", 500), 9999); // past the end: the read waits for more
  assert.equal(L.outputStart("-100", 500), 400);
  assert.equal(L.outputStart("-1000", 500), 0);
  assert.equal(L.outputStart("-5", undefined), 0);
  assert.throws(() => L.outputStart("1.5", 10), /whole number/);
  assert.throws(() => L.outputStart("abc", 10), /whole number/);
  assert.throws(() => L.outputStart("99999999999999999999", 10), /too large/);
});

test("the output view keeps only its newest characters", () => {
  assert.deepEqual(L.boundedAppend("ab", "cd", 10), { text: "abcd", dropped: 0 });
  assert.deepEqual(L.boundedAppend("abcdef", "gh", 5), { text: "defgh", dropped: 3 });
  assert.deepEqual(L.boundedAppend("", "0123456789", 4), { text: "6789", dropped: 6 });
});
