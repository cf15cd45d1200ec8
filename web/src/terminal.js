// The terminal protocol's client (docs/console.md, "Terminal protocol"), apart from xterm.js
// and the DOM so that node can test it: WebSocket "space-terminal.v1" to a pty command.
// Binary frames are terminal bytes; text frames are JSON control. It counts the output bytes
// it got, and after a drop reconnects with ?offset= that count, so nothing is lost or shown
// twice. Input typed before `ready` (or while reconnecting) is held and sent once ready.

export const SUBPROTOCOL = "space-terminal.v1";

export class TerminalSession {
  // opts: {url (ws URL without offset), makeSocket(url, protocols) -> WebSocket-like,
  //        onOutput(Uint8Array), onStatus(text), onExit(info), setTimer, clearTimer,
  //        keepaliveMs (20000), resizeDebounceMs (100), retryMs (1000), maxRetries (30)}
  constructor(opts) {
    this.o = {
      keepaliveMs: 20000,
      resizeDebounceMs: 100,
      retryMs: 1000,
      maxRetries: 30,
      setTimer: (f, ms) => setTimeout(f, ms),
      clearTimer: (t) => clearTimeout(t),
      onOutput: () => {},
      onStatus: () => {},
      onExit: () => {},
      ...opts,
    };
    this.offset = opts.offset || 0;  // output bytes received so far
    this.pending = [];               // input not yet sent
    this.ready = false;
    this.closed = false;             // by us (close()) or by the command's exit
    this.retries = 0;
    this.size = null;
    this.resizeTimer = null;
    this.keepaliveTimer = null;
    this.connect();
  }

  connect() {
    const sep = this.o.url.includes("?") ? "&" : "?";
    const ws = this.o.makeSocket(`${this.o.url}${sep}offset=${this.offset}`, [SUBPROTOCOL]);
    ws.binaryType = "arraybuffer";
    this.ws = ws;
    this.ready = false;
    this.o.onStatus(this.retries ? "reconnecting" : "connecting");
    ws.onmessage = (ev) => this.onMessage(ev.data);
    ws.onclose = () => this.onClose(ws);
    ws.onerror = () => {};
  }

  onMessage(data) {
    if (typeof data !== "string") {
      const bytes = data instanceof Uint8Array ? data : new Uint8Array(data);
      this.offset += bytes.length;
      this.o.onOutput(bytes);
      return;
    }
    let msg;
    try {
      msg = JSON.parse(data);
    } catch {
      return;
    }
    if (msg.type === "ready") {
      this.ready = true;
      this.retries = 0;
      this.o.onStatus("connected");
      if (this.size) this.sendControl({ type: "resize", ...this.size });
      for (const p of this.pending.splice(0)) this.ws.send(p);
      this.armKeepalive();
    } else if (msg.type === "exit") {
      this.closed = true;
      this.o.onStatus("exited");
      this.o.onExit(msg);
    } else if (msg.type === "error") {
      this.o.onStatus(`error: ${msg.message}`);
    }
  }

  onClose(ws) {
    if (ws !== this.ws) return;
    this.ready = false;
    if (this.keepaliveTimer) this.o.clearTimer(this.keepaliveTimer);
    if (this.closed) {
      this.o.onStatus(this.exitedStatus || "closed");
      return;
    }
    if (this.retries >= this.o.maxRetries) {
      this.o.onStatus("disconnected");
      return;
    }
    this.retries++;
    this.o.onStatus("reconnecting");
    this.o.setTimer(() => {
      if (!this.closed) this.connect();
    }, Math.min(this.o.retryMs * this.retries, 5000));
  }

  armKeepalive() {
    if (this.keepaliveTimer) this.o.clearTimer(this.keepaliveTimer);
    this.keepaliveTimer = this.o.setTimer(() => {
      if (this.ready) this.sendControl({ type: "keepalive" });
      if (!this.closed) this.armKeepalive();
    }, this.o.keepaliveMs);
  }

  sendControl(obj) {
    this.ws.send(JSON.stringify({ v: 1, ...obj }));
  }

  // Keyboard input (a string, as xterm.js gives it) or bytes.
  input(data) {
    if (this.closed) return;
    const bytes = typeof data === "string" ? new TextEncoder().encode(data) : data;
    if (this.ready) this.ws.send(bytes);
    else this.pending.push(bytes);
  }

  // Resizes are debounced: a window being dragged sends one, not hundreds.
  resize(cols, rows) {
    if (!(cols > 0 && rows > 0)) return;
    this.size = { cols, rows };
    if (this.resizeTimer) this.o.clearTimer(this.resizeTimer);
    this.resizeTimer = this.o.setTimer(() => {
      this.resizeTimer = null;
      if (this.ready) this.sendControl({ type: "resize", cols, rows });
    }, this.o.resizeDebounceMs);
  }

  // Ends the terminal: the command is hung up and the socket closes once it exits.
  close() {
    if (this.closed) return;
    if (this.ready) this.sendControl({ type: "close" });
    else this.ws.close();
    this.closed = true;
  }

  // For tests and the page: drop the connection as a network failure would.
  drop() {
    this.ws.close();
  }
}
