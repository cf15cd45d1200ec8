"""The HTTP surface: health, contexts endpoints and bad input (clear 4xx JSON errors)."""

import json
import socket

import pytest

from conftest import error, main_result


def test_health(daemon):
    status, body, headers = daemon.get("/health")
    assert status == 200 and body == "OK"


def test_contexts_create_list_order_and_cwd(daemon, tmp_path):
    ctx = daemon.create("python", cwd=str(tmp_path))
    assert set(ctx) == {"id", "language", "cwd"}
    assert ctx["cwd"] == str(tmp_path) and ctx["language"] == "python"
    status, listed, _ = daemon.get("/contexts")
    assert status == 200 and listed[-1] == ctx
    ev = daemon.execute("import os; os.getcwd()", context_id=ctx["id"])
    assert main_result(ev)["text"] == str(tmp_path)
    # No body at all: python in the default cwd, as E2B.
    status, plain, _ = daemon.call("POST", "/contexts", raw=b"")
    assert status == 200 and plain["language"] == "python" and plain["cwd"] == daemon.cwd


@pytest.mark.parametrize("raw, fragment", [
    (b"{not json", "malformed JSON"),
    (b"[1, 2]", "JSON object"),
    (b"{}", "code"),
    (b'{"code": 5}', "code"),
    (b'{"code": "1", "context_id": "abc", "language": "python"}', "Only one of"),
    (b'{"code": "1", "language": "cobol"}', "unsupported language"),
    (b'{"code": "1", "language": 3}', "language"),
    (b'{"code": "1", "env_vars": {"A": 1}}', "string"),
    (b'{"code": "1", "env_vars": {"A=B": "x"}}', "invalid env var name"),
    (b'{"code": "1", "env_vars": [1]}', "env_vars"),
    (b'{"code": "1", "timeout": -1}', "timeout"),
])
def test_execute_bad_requests(daemon, raw, fragment):
    status, body, _ = daemon.call("POST", "/execute", raw=raw)
    assert status == 400, body
    assert body["error"]["code"] == "invalid_argument"
    assert fragment in body["error"]["message"]


def test_unknown_context_and_routes(daemon):
    status, body = daemon.execute_raw("1", context_id="no-such-context")
    assert status == 404 and "no-such-context" in body["error"]["message"]
    for method, path in [("POST", "/contexts/nope/restart"), ("DELETE", "/contexts/nope"),
                         ("POST", "/executions/nope/interrupt"), ("GET", "/nothing")]:
        status, body, _ = daemon.call(method, path)
        assert status == 404 and body["error"]["code"] == "not_found", (method, path)
    status, body, headers = daemon.call("PUT", "/execute", {"code": "1"})
    assert status == 405 and headers["Allow"] == "POST"


def test_create_context_bad_input(daemon, tmp_path):
    status, body, _ = daemon.call("POST", "/contexts", {"language": "ruby"})
    assert status == 400 and "unsupported language" in body["error"]["message"]
    status, body, _ = daemon.call("POST", "/contexts", {"cwd": str(tmp_path / "missing")})
    assert status == 400 and "not a directory" in body["error"]["message"]
    status, body, _ = daemon.call("POST", "/contexts", raw=b"{oops")
    assert status == 400


def test_keep_alive_connection_serves_several_requests(daemon):
    c = daemon.conn()
    for _ in range(3):
        c.request("POST", "/execute", body=json.dumps({"code": "1 + 2"}).encode(),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        lines = [json.loads(x) for x in r.read().splitlines()]
        assert main_result(lines)["text"] == "3"
        c.request("GET", "/health")
        assert c.getresponse().read() == b'"OK"'
    c.close()


def test_garbage_on_the_socket_does_not_hurt(daemon):
    s = socket.create_connection(("127.0.0.1", daemon.port))
    s.sendall(b"\x00\x01garbage\r\n\r\n")
    s.recv(1000)
    s.close()
    assert daemon.get("/health")[0] == 200


def test_cors_preflight(daemon):
    status, _, headers = daemon.call("OPTIONS", "/execute")
    assert status == 204 and headers["Access-Control-Allow-Origin"] == "*"


def test_unix_socket_speaks_the_same_protocol(daemon):
    import http.client

    class UC(http.client.HTTPConnection):
        def connect(self):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(daemon.socket)

    c = UC("localhost")
    c.request("POST", "/execute", body=b'{"code": "raise KeyError(1)"}',
              headers={"Content-Type": "application/json"})
    lines = [json.loads(x) for x in c.getresponse().read().splitlines()]
    assert error(lines)["name"] == "KeyError"
    c.close()
