"""space-kernel's command line: serve (the daemon), exec (one cell), contexts (manage).

Exit codes of exec: 0 the cell ran without error, 1 it raised (or timed out, or was
interrupted), 2 usage or connection error. contexts: 0, or 1 for an error answer, 2 usage
or connection error.
"""

import argparse
import fcntl
import http.client
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time

DEFAULT_PORT = 49999
DEFAULT_SOCKET = "/run/space-kernel.sock"
PKG_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class UsageError(Exception):
    pass


class ArgParser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def default_socket():
    return os.environ.get("SPACE_KERNEL_SOCKET") or DEFAULT_SOCKET


def default_port():
    try:
        return int(os.environ.get("SPACE_KERNEL_PORT", DEFAULT_PORT))
    except ValueError:
        return DEFAULT_PORT


def default_cwd():
    for d in ("/home/user", os.environ.get("HOME")):
        if d and os.path.isdir(d):
            return d
    return "/"


# ---------------------------------------------------------------- serve
def cmd_serve(args):
    from space_kernel.contexts import Registry
    from space_kernel.server import App, make_servers

    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s space-kernel %(levelname)s %(message)s")
    state_dir = args.state_dir or os.path.join(
        os.path.dirname(os.path.abspath(args.socket)) if args.socket else "/tmp",
        "space-kernel.d")
    os.makedirs(state_dir, mode=0o700, exist_ok=True)
    env = dict(os.environ)
    env.pop("SPACE_KERNEL_SOCKET", None)
    registry = Registry(args.cwd or default_cwd(), env, state_dir, spares=not args.no_spare)
    app = App(registry)
    try:
        servers = make_servers(app, args.host, args.port, args.socket)
    except OSError as e:
        print("space-kernel serve: %s" % e, file=sys.stderr)
        return 2
    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    for s in servers:
        threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.2},
                         daemon=True).start()
    logging.getLogger("space-kernel").info(
        "serving on %s%s", "tcp %s:%d " % (args.host, args.port) if args.port else "",
        "unix %s" % args.socket if args.socket else "")
    pid_file = args.socket + ".pid" if args.socket else None
    if pid_file:
        with open(pid_file, "w") as f:
            f.write("%d\n" % os.getpid())
    if not args.no_default_contexts:
        registry.boot()
    while not stop.wait(1.0):
        pass
    for s in servers:
        s.shutdown()
        s.server_close()
    registry.shutdown()
    for path in (args.socket, pid_file):
        if path:
            try:
                os.unlink(path)
            except OSError:
                pass
    return 0


# ---------------------------------------------------------------- client side
class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=None):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if self.timeout is not None:
            s.settimeout(self.timeout)
        s.connect(self._path)
        self.sock = s


def request(sock_path, method, path, body=None, timeout=None):
    """One request over the unix socket: (status, parsed JSON or None, raw)."""
    conn = UnixConnection(sock_path, timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else {}
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        return resp.status, parsed, raw
    finally:
        conn.close()


def can_connect(sock_path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(sock_path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def ensure_daemon(sock_path, wait_s=60.0):
    """Connects, or starts `space-kernel serve` (under a lock, so two clients start one)
    and waits for its socket. Raises OSError with the reason."""
    if can_connect(sock_path):
        return
    lock_path = sock_path + ".lock"
    os.makedirs(os.path.dirname(os.path.abspath(sock_path)), exist_ok=True)
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if can_connect(sock_path):
            return
        log_path = sock_path + ".log"
        env = dict(os.environ)
        env["PYTHONPATH"] = PKG_PARENT + (os.pathsep + env["PYTHONPATH"]
                                          if env.get("PYTHONPATH") else "")
        with open(log_path, "ab") as logf:
            proc = subprocess.Popen(
                [sys.executable, "-m", "space_kernel", "serve", "--socket", sock_path,
                 "--port", str(default_port())],
                stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, env=env,
                start_new_session=True, cwd="/")
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if can_connect(sock_path):
                return
            if proc.poll() is not None:
                raise OSError("space-kernel serve exited with %s (log: %s)"
                              % (proc.returncode, log_path))
            time.sleep(0.05)
        raise OSError("space-kernel serve did not listen on %s within %gs (log: %s)"
                      % (sock_path, wait_s, log_path))


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def fail(msg):
    print("space-kernel: %s" % msg, file=sys.stderr)
    return 2


def error_message(raw):
    try:
        return json.loads(raw)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return raw.decode("utf-8", "replace").strip()


# ---------------------------------------------------------------- exec
def cmd_exec(args):
    env = {}
    for item in args.env or []:
        if "=" not in item:
            raise UsageError("--env takes K=V, got %r" % item)
        k, v = item.split("=", 1)
        env[k] = v
    if args.timeout is not None and args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    if args.context and args.rm:
        raise UsageError("--rm applies to the new context made when --context is not given")
    code = sys.stdin.buffer.read().decode("utf-8", "replace")
    sock = args.socket
    try:
        ensure_daemon(sock)
    except OSError as e:
        return fail("cannot reach the daemon: %s" % e)

    # Interrupts from here on (SIGINT/SIGTERM) ask the daemon to interrupt the cell; we
    # exit once it reports the cell's end.
    state = {"execution": None, "signals": 0}

    def on_signal(signum, frame):
        state["signals"] += 1
        eid = state["execution"]
        if eid is None:
            state["pending"] = True
            return
        try:
            request(sock, "POST", "/executions/%s/interrupt" % eid, timeout=5)
        except OSError:
            pass

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    try:
        language = args.language
        context_id = args.context
        new_context = None
        made_context = False
        if context_id == "default":
            context_id = None
            language = language or "python"
        elif context_id is None:
            status, ctx, raw = request(sock, "POST", "/contexts",
                                       {"language": language or "python", "cwd": args.cwd})
            if status != 200:
                return fail("cannot create a context: %s" % error_message(raw))
            new_context = ctx
            made_context = True
            context_id = ctx["id"]
        else:
            language = None
        if state.get("pending"):
            return 1
        body = {"code": code, "env_vars": env}
        if context_id:
            body["context_id"] = context_id
        else:
            body["language"] = language
        if args.timeout:
            body["timeout"] = args.timeout
        conn = UnixConnection(sock)
        conn.request("POST", "/execute", body=json.dumps(body).encode(),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raw = resp.read()
            return fail("execute: %d %s" % (resp.status, error_message(raw)))
        state["execution"] = resp.getheader("Space-Execution-Id")
        cid = resp.getheader("Space-Context-Id") or context_id
        if new_context is None:
            new_context = {"id": cid}
            try:
                status, listed, _ = request(sock, "GET", "/contexts", timeout=10)
                for c in listed if status == 200 else []:
                    if c.get("id") == cid:
                        new_context = c
            except OSError:
                pass
        emit({"type": "context", **new_context})
        if state.get("pending"):
            on_signal(signal.SIGINT, None)
        errored, ended = False, False
        while True:
            line = resp.readline()
            if not line:
                break
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev.get("type") == "keepalive":
                continue
            if ev.get("type") == "error":
                errored = True
            emit(ev)
            if ev.get("type") == "end_of_execution":
                ended = True
                break
        conn.close()
        if args.rm and made_context:
            try:
                request(sock, "DELETE", "/contexts/%s" % new_context["id"], timeout=30)
            except OSError:
                pass
        if not ended:
            return fail("the daemon closed the stream before the cell ended")
        return 1 if errored else 0
    except (OSError, http.client.HTTPException) as e:
        return fail("connection to the daemon failed: %s" % e)


# ---------------------------------------------------------------- contexts
def cmd_contexts(args):
    sock = args.socket
    try:
        ensure_daemon(sock)
        if args.action == "list":
            status, obj, raw = request(sock, "GET", "/contexts", timeout=30)
        elif args.action == "create":
            status, obj, raw = request(sock, "POST", "/contexts",
                                       {"language": args.language, "cwd": args.cwd}, timeout=120)
        elif args.action == "restart":
            status, obj, raw = request(sock, "POST", "/contexts/%s/restart" % args.id, timeout=120)
            obj = {"id": args.id, "restarted": True}
        elif args.action == "interrupt":
            status, obj, raw = request(sock, "POST", "/contexts/%s/interrupt" % args.id, timeout=30)
            obj = {"id": args.id, "interrupted": True}
        else:
            status, obj, raw = request(sock, "DELETE", "/contexts/%s" % args.id, timeout=30)
            obj = {"id": args.id, "deleted": True}
    except OSError as e:
        return fail("cannot reach the daemon: %s" % e)
    if status != 200:
        try:
            print(json.dumps(json.loads(raw)))
        except ValueError:
            print(json.dumps({"error": {"code": "unknown", "message": raw.decode("utf-8", "replace")}}))
        return 1
    print(json.dumps(obj))
    return 0


def build_parser():
    p = ArgParser(prog="space-kernel", description="SPACE's code-interpreter daemon and client")
    sub = p.add_subparsers(dest="command", parser_class=ArgParser)

    s = sub.add_parser("serve", help="run the daemon (foreground)")
    s.add_argument("--port", type=int, default=default_port(),
                   help="TCP port on --host (default 49999; 0: no TCP)")
    s.add_argument("--host", default="0.0.0.0")
    s.add_argument("--socket", default=default_socket(), help="unix socket ('' for none)")
    s.add_argument("--cwd", help="default working directory of contexts (default /home/user, "
                   "else $HOME, else /)")
    s.add_argument("--state-dir", help="kernel connection files and bash cells "
                   "(default: space-kernel.d beside the socket)")
    s.add_argument("--no-default-contexts", action="store_true",
                   help="do not start the default python and javascript contexts at boot")
    s.add_argument("--no-spare", action="store_true",
                   help="do not keep a python context started ahead for the next create")
    s.add_argument("-v", "--verbose", action="store_true")

    e = sub.add_parser("exec", help="run one cell read from stdin; events as NDJSON on stdout")
    e.add_argument("--language", "-l", help="python (default), javascript/js, bash")
    e.add_argument("--context", "-c", help="context id, or 'default' for the language's "
                   "default context (default: a new context)")
    e.add_argument("--cwd", help="working directory of the new context")
    e.add_argument("--rm", action="store_true", help="delete the new context after the cell")
    e.add_argument("--timeout", type=float, help="seconds; then the cell is interrupted "
                   "and reports TimeoutError")
    e.add_argument("--env", action="append", metavar="K=V", help="env var for this cell")
    e.add_argument("--socket", default=default_socket())

    c = sub.add_parser("contexts", help="list, create, restart, interrupt or delete contexts")
    c.add_argument("--socket", default=default_socket())
    csub = c.add_subparsers(dest="action", parser_class=ArgParser)
    csub.add_parser("list")
    cc = csub.add_parser("create")
    cc.add_argument("--language", "-l", default="python")
    cc.add_argument("--cwd")
    for name in ("restart", "interrupt", "delete"):
        csub.add_parser(name).add_argument("id")
    return p


def main(argv):
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            raise UsageError("a command is required: serve, exec or contexts")
        if args.command == "serve":
            return cmd_serve(args)
        if args.command == "exec":
            if args.language:
                from space_kernel.lang import RequestError, normalize_language
                try:
                    args.language = normalize_language(args.language)
                except RequestError as err:
                    raise UsageError(err.message)
            return cmd_exec(args)
        if args.action is None:
            raise UsageError("contexts needs an action: list, create, restart, interrupt, delete")
        return cmd_contexts(args)
    except UsageError as e:
        print("space-kernel: %s" % e, file=sys.stderr)
        parser.print_usage(sys.stderr)
        return 2
