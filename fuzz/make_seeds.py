#!/usr/bin/env python3
"""Writes the seed corpora under fuzz/corpus/ (rerun after changing it; output is deterministic).

Binary formats follow docs/agent-protocol.md (frames: u32 len LE | u8 type | u32 stream LE) and
docs/api.md (mux records: u8 kind | u32 len LE | bytes). Targets that split their input take a
u32 split seed first (see the target sources).
"""
import json
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def write(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def frame(t, stream, payload):
    return struct.pack("<IBI", len(payload), t, stream) + payload


def message(obj, body=b""):
    j = json.dumps(obj, separators=(",", ":")).encode()
    return struct.pack("<I", len(j)) + j + body


def data(offset, b):
    return struct.pack("<Q", offset) + b


def ack(fd, offset):
    return struct.pack("<BQ", fd, offset)


SEED = struct.pack("<I", 0x07030105)
HELLO = {"version": 1, "pid": 1, "agent": "space-agent 0.1",
         "commands": [{"stream": 3, "id": "cmd-1", "running": True, "pid": 42,
                       "stdout_acked": 0, "stderr_acked": 0, "stdout_produced": 10,
                       "stderr_produced": 0}]}
REQUESTS = [
    {"op": "ping"},
    {"op": "exec", "stream": 3, "id": "cmd-1", "argv": ["/bin/echo", "hi"], "env": {"A": "b"},
     "cwd": "/", "user": "root", "stdin": True, "timeout_ms": 0},
    {"op": "exec", "stream": 5, "id": "cmd-2", "shell": "echo a; echo b >&2", "user": 1000},
    {"op": "signal", "stream": 3, "signal": 15},
    {"op": "stat", "path": "/etc/passwd"},
    {"op": "list", "path": "/", "depth": 2},
    {"op": "read", "path": "/etc/hostname", "offset": 0, "length": 2097152},
    {"op": "mkdir", "path": "/tmp/a/b", "parents": True, "mode": 493},
    {"op": "remove", "path": "/tmp/a", "recursive": True},
    {"op": "rename", "from": "/tmp/x", "to": "/tmp/y"},
]
RESPONSES = [
    {"ok": True, "time_ns": 123456789},
    {"ok": True, "pid": 42},
    {"ok": False, "error": {"code": "not_found", "message": "no such file"}},
    {"ok": True, "entry": {"path": "/etc/passwd", "name": "passwd", "type": "file", "size": 1200,
                           "mode": 420, "mtime_ms": 1700000000000, "uid": 0, "gid": 0}},
    {"ok": True, "entries": [{"path": "/bin", "name": "bin", "type": "symlink",
                              "link_target": "usr/bin"}], "truncated": True},
    {"ok": True, "size": 5, "eof": True},
]
EXIT = {"exit_code": 0, "signal": 0, "timed_out": False, "stdout_end": 3, "stderr_end": 2}


def agent_seeds():
    t = "agent_frames"
    write(t, "hello", SEED + frame(1, 0, json.dumps(HELLO).encode()))
    write(t, "request_exec", SEED + frame(2, 1, message(REQUESTS[1])))
    write(t, "request_write", SEED + frame(2, 9, message(
        {"op": "write", "path": "/tmp/f", "offset": 0, "truncate": True, "mode": 420,
         "create_parents": True}, b"hello world\n")))
    write(t, "response_read", SEED + frame(3, 7, message({"ok": True, "size": 5, "eof": True},
                                                         b"hello")))
    write(t, "response_error", SEED + frame(3, 2, message(RESPONSES[2])))
    write(t, "stdout_stderr", SEED + frame(4, 3, data(0, b"a\n")) + frame(5, 3, data(0, b"b\n"))
          + frame(4, 3, data(2, b"c\n")))
    write(t, "exit", SEED + frame(6, 3, json.dumps(EXIT).encode()))
    write(t, "ack", SEED + frame(7, 3, ack(1, 4096)) + frame(7, 3, ack(2, 0))
          + frame(7, 3, ack(0, 0)))
    write(t, "stdin", SEED + frame(8, 3, b"input line\n") + frame(8, 3, b""))
    # A whole session: hello, exec request/response, output, exit, acks, one partial frame.
    session = (frame(1, 0, json.dumps(HELLO).encode()) + frame(2, 1, message(REQUESTS[1]))
               + frame(3, 1, message(RESPONSES[1])) + frame(4, 3, data(0, b"hi\n"))
               + frame(7, 3, ack(1, 3)) + frame(6, 3, json.dumps(EXIT).encode())
               + frame(7, 3, ack(0, 0)))
    write(t, "session", struct.pack("<I", 0x01000001) + session + session[:13])
    write(t, "bad_type", SEED + frame(4, 3, data(0, b"x")) + frame(9, 1, b"zz"))
    write(t, "oversized", SEED + struct.pack("<IBI", (4 << 20) + 1, 4, 3))

    t = "agent_message"
    for i, r in enumerate(REQUESTS):
        write(t, "request_%02d_%s" % (i, r["op"]), message(r))
    write(t, "request_write_body", message({"op": "write", "path": "/f", "offset": 3}, b"\0\1\2"))
    for i, r in enumerate(RESPONSES):
        write(t, "response_%02d" % i, message(r))
    write(t, "response_body", message({"ok": True, "size": 5, "eof": False}, b"hello"))
    write(t, "hello", message(HELLO))
    write(t, "bad_len", struct.pack("<I", 1000) + b"{}")
    write(t, "not_object", message([1, 2, 3]))


SPEC = """# A realistic template spec.
FROM debian:12-slim
ARG DEBIAN_FRONTEND=noninteractive
ENV LANG=C.UTF-8 PATH=/usr/local/bin:/usr/bin:/bin
RUN apt-get update && \\
    apt-get install -y --no-install-recommends python3 python3-pip git curl && \\
    rm -rf /var/lib/apt/lists/*
WORKDIR /workspace
COPY requirements.txt /workspace/requirements.txt
COPY src/ /workspace/src/
RUN ["pip3", "install", "--break-system-packages", "-r", "/workspace/requirements.txt"]
USER 1000
ENV HOME=/home/agent
"""


def template_seeds():
    t = "template_spec"
    write(t, "realistic", SPEC)
    write(t, "minimal", "FROM base:latest\n")
    write(t, "digest", "FROM base@sha256:" + "ab" * 32 + "\nRUN true\n")
    write(t, "copy_many", "FROM alpine:3\nCOPY a b c/d /opt/\nWORKDIR /opt\nUSER nobody\n")
    write(t, "json_run", 'FROM x:y\nRUN ["sh", "-c", "echo \\"hi\\""]\nENV A="b c" D=e\n')
    write(t, "bad_escape", "FROM x:y\nCOPY ../etc/passwd /x\n")
    write(t, "comments_blank", "\n# c\n\nFROM  x:y  \n  # indented\nRUN echo a \\\n  b\n")
    write(t, "no_from", "RUN echo\n")


API_BODIES = {
    "create_template": {"template": "base:latest", "runtime": "oci",
                        "limits": {"memory_bytes": 536870912, "pids": 256, "cpus": 1.5,
                                   "disk_bytes": 1073741824},
                        "env": {"A": "b"}, "metadata": {"owner": "me"}, "network": False,
                        "timeout": 300, "on_timeout": "delete", "idle_timeout": 0,
                        "snapshot_every": 0, "keep_last": 0},
    "create_snapshot": {"snapshot": "snap-0123456789abcdef", "timeout": 12.5,
                        "on_timeout": "suspend"},
    "exec_argv": {"argv": ["python3", "-c", "print(1)"], "env": {"X": "1"}, "cwd": "/",
                  "user": "root", "stdin": False, "timeout": 30},
    "exec_cmd": {"cmd": "echo hi && ls / | wc -l", "stdin": True},
    "signal_name": {"signal": "TERM"},
    "signal_number": {"signal": 15},
    "rename": {"from": "/tmp/a", "to": "/tmp/b"},
    "timeout": {"timeout": 0, "on_timeout": "pause"},
    "fork": {"count": 4},
    "empty": {},
    "error": {"error": {"code": "not_found", "message": "sandbox sb-1 not found"}},
}


def json_seeds():
    t = "json_body"
    for name, body in API_BODIES.items():
        write(t, name, json.dumps(body))
    write(t, "odd_types", '{"limits":{"cpus":1e308,"pids":-1,"memory_bytes":18446744073709551615},'
                          '"timeout":1e400,"argv":[1,null,"a"],"env":{"A":1},"network":"yes"}')
    write(t, "unicode", '{"cmd":"echo \\u00e9\\ud83d\\ude00","metadata":{"k\\u0000":"v"}}')
    write(t, "nested", "[" * 64 + "]" * 64)
    write(t, "truncated", '{"argv":["a"')


def mux_record(kind, b):
    return struct.pack("<BI", kind, len(b)) + b


def mux_seeds():
    t = "mux_stream"
    cmd = json.dumps({"id": "cmd-1", "state": "exited", "exit_code": 0, "timed_out": False})
    write(t, "simple", SEED + mux_record(1, b"hello\n") + mux_record(2, b"warn\n")
          + mux_record(3, cmd.encode()))
    write(t, "many", struct.pack("<I", 0x1f000003) + b"".join(
        mux_record(1 + i % 2, (b"line %d\n" % i) * (i + 1)) for i in range(20))
          + mux_record(3, cmd.encode()))
    write(t, "empty_records", SEED + mux_record(1, b"") + mux_record(2, b"")
          + mux_record(3, b"{}"))
    write(t, "no_exit", SEED + mux_record(1, b"partial"))
    write(t, "mid_record", SEED + mux_record(1, b"abc")[:6])
    write(t, "after_exit", SEED + mux_record(3, b"{}") + mux_record(1, b"late"))
    write(t, "bad_kind", SEED + mux_record(7, b"x"))


def http_seeds():
    t = "http_request"
    body = json.dumps(API_BODIES["create_template"])
    write(t, "post_json", SEED + (
        "POST /v1/sandboxes?wait=30s HTTP/1.1\r\nHost: localhost:8080\r\n"
        "Authorization: Bearer tok-abc\r\nContent-Type: application/json\r\n"
        "Content-Length: %d\r\n\r\n%s" % (len(body), body)).encode())
    write(t, "get_keepalive", SEED + (
        "GET /v1/sandboxes?label=a=b&state=running HTTP/1.1\r\nHost: x\r\n\r\n"
        "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").encode())
    write(t, "chunked_put", SEED + (
        "PUT /v1/sandboxes/sb-1/files?path=/tmp/f&mode=0644 HTTP/1.1\r\nHost: x\r\n"
        "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n"
        "Trailer: v\r\n\r\n").encode())
    write(t, "sse_get", SEED + (
        "GET /v1/sandboxes/sb-1/commands/cmd-1/output?stdout_offset=0&stderr_offset=0 HTTP/1.1\r\n"
        "Host: x\r\nAccept: text/event-stream\r\n\r\n").encode())
    write(t, "http10", SEED + b"DELETE /v1/sandboxes/sb-1?wait=30s HTTP/1.0\r\n\r\n")
    write(t, "bad_length",
          SEED + b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n")
    write(t, "too_large", SEED + b"POST / HTTP/1.1\r\nContent-Length: 1048577\r\n\r\n{}")


if __name__ == "__main__":
    agent_seeds()
    template_seeds()
    json_seeds()
    mux_seeds()
    http_seeds()
