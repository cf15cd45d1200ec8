"""Fixtures for the space-kernel suite: a real daemon on a temp unix socket and a free
loopback TCP port, driven over HTTP as E2B's SDKs drive it. Run with /usr/bin/python3
(Debian's interpreter, which sees python3-ipykernel, python3-jupyter-client and
python3-matplotlib)."""

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KERNEL_DIR = os.path.join(REPO, "templates", "code-interpreter")
SPACE_KERNEL = os.path.join(KERNEL_DIR, "space-kernel")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Daemon:
    def __init__(self, root):
        self.root = root
        self.socket = os.path.join(root, "k.sock")
        self.port = free_port()
        self.cwd = os.path.join(root, "home")
        os.makedirs(self.cwd)
        self.log = open(os.path.join(root, "daemon.log"), "wb")
        self.proc = subprocess.Popen(
            [sys.executable, SPACE_KERNEL, "serve", "--host", "127.0.0.1", "--port",
             str(self.port), "--socket", self.socket, "--cwd", self.cwd, "-v"],
            stdout=self.log, stderr=subprocess.STDOUT, env=self.env())
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if self.get("/health")[0] == 200:
                    break
            except OSError:
                time.sleep(0.05)
        else:
            raise RuntimeError("space-kernel did not start: " + self.read_log())

    def env(self, **extra):
        env = dict(os.environ)
        env["SPACE_KERNEL_SOCKET"] = self.socket
        # ipykernel does not capture fd-level output (os.system) under pytest.
        env.pop("PYTEST_CURRENT_TEST", None)
        env.update(extra)
        return env

    def read_log(self):
        with open(os.path.join(self.root, "daemon.log"), "rb") as f:
            return f.read().decode("utf-8", "replace")

    def conn(self, timeout=120):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def call(self, method, path, body=None, raw=None, headers=None):
        c = self.conn()
        try:
            data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
            c.request(method, path, body=data, headers=headers or {"Content-Type": "application/json"})
            r = c.getresponse()
            text = r.read()
            try:
                obj = json.loads(text) if text else None
            except ValueError:
                obj = text
            return r.status, obj, dict(r.getheaders())
        finally:
            c.close()

    def get(self, path):
        return self.call("GET", path)

    def execute(self, code, **fields):
        """POST /execute; returns the list of events (keepalives dropped)."""
        status, events = self.execute_raw(code, **fields)
        assert status == 200, events
        return events

    def execute_raw(self, code, **fields):
        body = {"code": code}
        body.update(fields)
        c = self.conn()
        try:
            c.request("POST", "/execute", body=json.dumps(body).encode(),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            if r.status != 200:
                return r.status, json.loads(r.read())
            events = []
            while True:
                line = r.readline()
                if not line:
                    break
                ev = json.loads(line)
                if ev["type"] != "keepalive":
                    events.append(ev)
            return 200, events
        finally:
            c.close()

    def create(self, language="python", cwd=None):
        status, ctx, _ = self.call("POST", "/contexts", {"language": language, "cwd": cwd})
        assert status == 200, ctx
        return ctx

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture(scope="session")
def daemon():
    root = tempfile.mkdtemp(prefix="space-kernel-test-")
    d = Daemon(root)
    try:
        yield d
    finally:
        d.stop()
        shutil.rmtree(root, ignore_errors=True)


def of_type(events, kind):
    return [e for e in events if e["type"] == kind]


def stdout(events):
    return "".join(e["text"] for e in of_type(events, "stdout"))


def main_result(events):
    found = [e for e in of_type(events, "result") if e.get("is_main_result")]
    return found[0] if found else None


def error(events):
    found = of_type(events, "error")
    return found[0] if found else None
