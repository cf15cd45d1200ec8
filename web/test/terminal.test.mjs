// The terminal protocol's client (web/src/terminal.js) against a scripted socket: the browser's
// WebSocket is the boundary here; the protocol state (offsets, held input, reconnects,
// debounced resizes) is ours.
import { test } from "node:test";
import assert from "node:assert/strict";
import { TerminalSession, SUBPROTOCOL } from "../src/terminal.js";

class Socket {
  constructor(url, protocols) {
    this.url = url;
    this.protocols = protocols;
    this.sent = [];
    this.closed = false;
  }
  send(x) { this.sent.push(typeof x === "string" ? JSON.parse(x) : new TextDecoder().decode(x)); }
  close() { this.closed = true; this.onclose && this.onclose(); }
  serverText(obj) { this.onmessage({ data: JSON.stringify(obj) }); }
  serverBytes(s) { this.onmessage({ data: new TextEncoder().encode(s).buffer }); }
}

function harness(extra = {}) {
  const sockets = [], timers = [], out = [], statuses = [], exits = [];
  const s = new TerminalSession({
    url: "ws://127.0.0.1:1/v1/sandboxes/sb-1/commands/cmd-1/terminal",
    makeSocket: (u, p) => { const k = new Socket(u, p); sockets.push(k); return k; },
    onOutput: (b) => out.push(new TextDecoder().decode(b)),
    onStatus: (x) => statuses.push(x),
    onExit: (e) => exits.push(e),
    setTimer: (f, ms) => { const t = { f, ms, live: true }; timers.push(t); return t; },
    clearTimer: (t) => { if (t) t.live = false; },
    ...extra,
  });
  const fire = (ms) => { for (const t of timers.filter((t) => t.live && t.ms === ms)) { t.live = false; t.f(); } };
  return { s, sockets, timers, out, statuses, exits, fire };
}

test("connects with the subprotocol from offset 0 and holds input until ready", () => {
  const { s, sockets, out } = harness();
  assert.equal(sockets.length, 1);
  assert.deepEqual(sockets[0].protocols, [SUBPROTOCOL]);
  assert.match(sockets[0].url, /\/terminal\?offset=0$/);
  s.input("ls\r");
  assert.deepEqual(sockets[0].sent, []);
  sockets[0].serverText({ v: 1, type: "ready", offset: 0 });
  assert.deepEqual(sockets[0].sent, ["ls\r"]);
  sockets[0].serverBytes("hello");
  assert.deepEqual(out, ["hello"]);
  assert.equal(s.offset, 5);
  s.input("x");
  assert.deepEqual(sockets[0].sent, ["ls\r", "x"]);
});

test("a dropped connection reconnects from the bytes it already had", () => {
  const { s, sockets, out, statuses, fire } = harness();
  sockets[0].serverText({ type: "ready" });
  sockets[0].serverBytes("abc");
  s.drop();
  assert.equal(statuses.at(-1), "reconnecting");
  s.input("typed while away");
  fire(1000);
  assert.equal(sockets.length, 2);
  assert.match(sockets[1].url, /offset=3$/);
  sockets[1].serverText({ type: "ready", offset: 3 });
  assert.deepEqual(sockets[1].sent, ["typed while away"]);
  sockets[1].serverBytes("def");
  assert.deepEqual(out, ["abc", "def"]);
  assert.equal(s.offset, 6);
});

test("resizes are debounced and re-sent after a reconnect", () => {
  const { s, sockets, fire } = harness();
  sockets[0].serverText({ type: "ready" });
  s.resize(100, 30);
  s.resize(120, 40);
  assert.deepEqual(sockets[0].sent, []);
  fire(100);
  assert.deepEqual(sockets[0].sent, [{ v: 1, type: "resize", cols: 120, rows: 40 }]);
  s.resize(0, 10);  // ignored
  s.drop();
  fire(1000);
  sockets[1].serverText({ type: "ready" });
  assert.deepEqual(sockets[1].sent, [{ v: 1, type: "resize", cols: 120, rows: 40 }]);
});

test("keepalives go out while connected", () => {
  const { sockets, fire } = harness();
  sockets[0].serverText({ type: "ready" });
  fire(20000);
  fire(20000);
  assert.deepEqual(sockets[0].sent, [{ v: 1, type: "keepalive" }, { v: 1, type: "keepalive" }]);
});

test("exit ends the session without reconnecting; close hangs up", () => {
  const a = harness();
  a.sockets[0].serverText({ type: "ready" });
  a.sockets[0].serverText({ type: "exit", exit_code: 0 });
  assert.deepEqual(a.exits, [{ type: "exit", exit_code: 0 }]);
  a.sockets[0].close();
  a.fire(1000);
  assert.equal(a.sockets.length, 1);
  a.s.input("ignored");
  assert.deepEqual(a.sockets[0].sent, []);

  const b = harness();
  b.sockets[0].serverText({ type: "ready" });
  b.s.close();
  assert.deepEqual(b.sockets[0].sent, [{ v: 1, type: "close" }]);
  b.sockets[0].close();
  b.fire(1000);
  assert.equal(b.sockets.length, 1);
});

test("gives up after maxRetries", () => {
  const { s, sockets, statuses, fire } = harness({ maxRetries: 2 });
  s.drop();
  fire(1000);
  sockets[1].close();
  fire(2000);
  sockets[2].close();
  assert.equal(sockets.length, 3);
  assert.equal(statuses.at(-1), "disconnected");
});
