"""The HTTP side: E2B's code-interpreter protocol over TCP and a unix socket.

Routes (docs/code-interpreter.md): GET /health; POST /execute (NDJSON stream);
GET/POST /contexts; POST /contexts/{id}/restart; POST /contexts/{id}/interrupt;
DELETE /contexts/{id}; POST /executions/{id}/interrupt. Errors answer
{"error":{"code","message"}} with a 4xx/5xx status. One thread per connection
(http.server), HTTP/1.1 keep-alive, chunked streaming.
"""

import http.server
import json
import logging
import os
import re
import select
import socket
import socketserver
import threading
import time

from space_kernel.lang import RequestError, normalize_language
from space_kernel.jobs import Job

log = logging.getLogger("space-kernel")

MAX_BODY = 64 << 20
KEEPALIVE_S = 5.0  # as E2B: an idle stream gets {"type":"keepalive"} lines
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def dumps(obj):
    """JSON that strict parsers (JSON.parse) accept: NaN and infinities become null."""
    try:
        return json.dumps(obj, allow_nan=False)
    except ValueError:
        return json.dumps(_finite(obj), allow_nan=False)


def _finite(obj):
    if isinstance(obj, float) and (obj != obj or obj in (float("inf"), float("-inf"))):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


class App:
    def __init__(self, registry):
        self.registry = registry
        self._jobs = {}  # execution id -> Job, while it streams
        self._lock = threading.Lock()

    def track(self, job):
        with self._lock:
            self._jobs[job.id] = job

    def untrack(self, job):
        with self._lock:
            self._jobs.pop(job.id, None)

    def job(self, job_id):
        with self._lock:
            return self._jobs.get(job_id)


def parse_execute(body):
    if not isinstance(body, dict):
        raise RequestError(400, "invalid_argument", "the body must be a JSON object")
    code = body.get("code")
    if not isinstance(code, str):
        raise RequestError(400, "invalid_argument", "code (a string) is required")
    context_id = body.get("context_id")
    language = body.get("language")
    if context_id is not None and not isinstance(context_id, str):
        raise RequestError(400, "invalid_argument", "context_id must be a string")
    if context_id and language:
        raise RequestError(400, "invalid_argument",
                           "Only one of context_id or language can be provided")
    env = body.get("env_vars")
    if env is None:
        env = {}
    if not isinstance(env, dict):
        raise RequestError(400, "invalid_argument", "env_vars must be an object of strings")
    for k, v in env.items():
        if not ENV_NAME.match(k):
            raise RequestError(400, "invalid_argument", "invalid env var name %r" % k)
        if not isinstance(v, str) or "\0" in v:
            raise RequestError(400, "invalid_argument", "env var %s must be a string" % k)
    timeout = body.get("timeout")
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise RequestError(400, "invalid_argument", "timeout must be a positive number of seconds")
    if language is not None:
        normalize_language(language)
    return code, context_id or None, language, env, timeout


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "space-kernel"
    sys_version = ""

    def address_string(self):
        return self.client_address[0] if isinstance(self.client_address, tuple) else "unix"

    def log_message(self, fmt, *args):
        log.debug("%s %s", self.address_string(), fmt % args)

    @property
    def app(self):
        return self.server.app

    # --- helpers ---
    def _cors(self):
        self.send_header("Access-Control-Allow-Origin", "*")

    def _send_json(self, status, obj, extra_headers=()):
        data = dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self._cors()
        for k, v in extra_headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _send_error(self, status, code, message, extra_headers=()):
        self._send_json(status, {"error": {"code": code, "message": message}}, extra_headers)

    def _read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks, total = [], 0
            while True:
                line = self.rfile.readline(1024)
                try:
                    size = int(line.split(b";")[0].strip(), 16)
                except ValueError:
                    raise RequestError(400, "invalid_argument", "bad chunked body")
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                total += size
                if total > MAX_BODY:
                    self.close_connection = True
                    raise RequestError(413, "too_large", "the body is over %d bytes" % MAX_BODY)
                chunks.append(self.rfile.read(size))
                self.rfile.readline(1024)
            return b"".join(chunks)
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise RequestError(400, "invalid_argument", "bad Content-Length")
        if length < 0:
            raise RequestError(400, "invalid_argument", "bad Content-Length")
        if length > MAX_BODY:
            self.close_connection = True
            raise RequestError(413, "too_large", "the body is over %d bytes" % MAX_BODY)
        return self.rfile.read(length) if length else b""

    def _json_body(self, required=True):
        raw = self._read_body()
        if not raw.strip():
            if required:
                raise RequestError(400, "invalid_argument", "a JSON body is required")
            return {}
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise RequestError(400, "invalid_argument", "malformed JSON: %s" % e)

    # --- routing ---
    ROUTES = [
        (re.compile(r"^/health$"), {"GET": "health"}),
        (re.compile(r"^/execute$"), {"POST": "execute"}),
        (re.compile(r"^/contexts$"), {"GET": "list_contexts", "POST": "create_context"}),
        (re.compile(r"^/contexts/([^/]+)$"), {"DELETE": "delete_context"}),
        (re.compile(r"^/contexts/([^/]+)/restart$"), {"POST": "restart_context"}),
        (re.compile(r"^/contexts/([^/]+)/interrupt$"), {"POST": "interrupt_context"}),
        (re.compile(r"^/executions/([^/]+)/interrupt$"), {"POST": "interrupt_execution"}),
    ]

    def _dispatch(self, method):
        path = self.path.split("?", 1)[0]
        try:
            for pattern, methods in self.ROUTES:
                m = pattern.match(path)
                if not m:
                    continue
                if method == "OPTIONS":
                    self.send_response(204)
                    self._cors()
                    self.send_header("Access-Control-Allow-Methods", ", ".join(methods))
                    self.send_header("Access-Control-Allow-Headers", "*")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if method not in methods:
                    self._read_body()
                    self._send_error(405, "invalid_argument", "%s is not allowed on %s"
                                     % (method, path), [("Allow", ", ".join(methods))])
                    return
                getattr(self, "do_" + methods[method])(*m.groups())
                return
            self._read_body()
            self._send_error(404, "not_found", "no route %s %s" % (method, path))
        except RequestError as e:
            self._send_error(e.status, e.code, e.message)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_DELETE(self):
        self._dispatch("DELETE")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_PATCH(self):
        self._dispatch("PATCH")

    def do_OPTIONS(self):
        self._dispatch("OPTIONS")

    # --- endpoints ---
    def do_health(self):
        self._send_json(200, "OK")

    def do_list_contexts(self):
        self._send_json(200, self.app.registry.list())

    def do_create_context(self):
        body = self._json_body(required=False)
        if not isinstance(body, dict):
            raise RequestError(400, "invalid_argument", "the body must be a JSON object")
        ctx = self.app.registry.create(body.get("language"), body.get("cwd"))
        self._send_json(200, ctx.to_json())

    def do_delete_context(self, cid):
        self._read_body()
        self.app.registry.delete(cid)
        self._send_json(200, None)

    def do_restart_context(self, cid):
        self._read_body()
        ctx = self.app.registry.get(cid)
        try:
            ctx.restart()
        except Exception as e:
            raise RequestError(500, "internal", "Failed to restart context %s: %s" % (cid, e))
        self._send_json(200, None)

    def do_interrupt_context(self, cid):
        self._read_body()
        self.app.registry.get(cid).interrupt()
        self._send_json(200, None)

    def do_interrupt_execution(self, eid):
        self._read_body()
        job = self.app.job(eid)
        if job is None:
            raise RequestError(404, "not_found", "Execution %s not found (or already finished)" % eid)
        job.request_interrupt("interrupt")
        self._send_json(200, None)

    def do_execute(self):
        code, context_id, language, env, timeout = parse_execute(self._json_body())
        reg = self.app.registry
        ctx = reg.get(context_id) if context_id else reg.default(language)
        job = Job(code, env, timeout)
        self.app.track(job)
        try:
            ctx.submit(job)
            self._stream(job)
        finally:
            self.app.untrack(job)

    def _client_gone(self, state):
        """True once the peer closed its end (checked without consuming a pipelined
        request)."""
        if state["peeked_data"]:
            return False
        sock = self.connection
        try:
            r, _, _ = select.select([sock], [], [], 0)
            if not r:
                return False
            data = sock.recv(1, socket.MSG_PEEK)
        except (OSError, ValueError):
            return True
        if data:
            state["peeked_data"] = True
            return False
        return True

    def _stream(self, job):
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Space-Execution-Id", job.id)
        self.send_header("Space-Context-Id", job.context_id or "")
        self.send_header("Cache-Control", "no-store")
        self._cors()
        self.end_headers()
        state = {"peeked_data": False}
        last_write = time.monotonic()

        def write(obj):
            line = (dumps(obj) + "\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.flush()

        try:
            while True:
                ev = job.next_event(0.25)
                if ev is None:
                    if self._client_gone(state):
                        raise BrokenPipeError
                    if time.monotonic() - last_write >= KEEPALIVE_S:
                        write({"type": "keepalive"})
                        last_write = time.monotonic()
                    continue
                write(ev)
                last_write = time.monotonic()
                if ev["type"] == "end_of_execution":
                    break
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            # The client went away (E2B's SDKs do that on their timeout): interrupt the cell
            # so the context is free for the next one.
            log.info("execution %s: client gone, interrupting", job.id)
            job.request_interrupt("client")
            self.close_connection = True


class TCPServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def server_bind(self):
        # HTTPServer.server_bind resolves the host's FQDN, which can hang in a sandbox
        # without DNS; the name is unused.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]


class UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self):
        conn, _ = self.socket.accept()
        return conn, ("unix", 0)


def make_servers(app, host, port, socket_path):
    servers = []
    if socket_path:
        if os.path.exists(socket_path):
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(socket_path)
            except OSError:
                os.unlink(socket_path)  # stale: nobody listens
            else:
                probe.close()
                raise OSError("another space-kernel already serves %s" % socket_path)
            finally:
                probe.close()
        os.makedirs(os.path.dirname(os.path.abspath(socket_path)), exist_ok=True)
        us = UnixServer(socket_path, Handler)
        os.chmod(socket_path, 0o666)
        us.app = app
        servers.append(us)
    if port:
        try:
            ts = TCPServer((host, port), Handler)
        except OSError:
            for s in servers:
                s.server_close()
            if socket_path:
                os.unlink(socket_path)
            raise
        ts.app = app
        servers.append(ts)
    return servers
