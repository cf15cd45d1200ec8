#!/usr/bin/env python3
"""Writes the seed corpora under fuzz/corpus/ (rerun after changing it; output is deterministic).

Binary formats follow docs/agent-protocol.md (frames: u32 len LE | u8 type | u32 stream LE) and
docs/api.md (mux records: u8 kind | u32 len LE | bytes). Targets that split their input take a
u32 split seed first (see the target sources).
"""
import base64
import hashlib
import hmac
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


# auth_token: the fixed key set of auth_token_fuzz.cc (the second key signs).
AUTH_KEYS = {"0a1b2c3d": bytes([0x11]) * 32, "4e5f6a7b": bytes([0x22]) * 32}


def b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def token(claims, kid="4e5f6a7b"):
    payload = claims if isinstance(claims, bytes) else json.dumps(claims).encode()
    signed = "st1.%s.%s" % (kid, b64url(payload))
    return signed + "." + b64url(hmac.new(AUTH_KEYS[kid], signed.encode(), hashlib.sha256).digest())


CLAIMS = {"sb": "sb-0123456789abcdef", "gen": 1700000000123, "sc": ["files:read", "commands:exec"],
          "exp": 1900000000, "iat": 1800000000}


def auth_seeds():
    t = "auth_token"
    write(t, "v_valid", b"\0" + token(CLAIMS).encode())
    write(t, "v_old_key", b"\0" + token(dict(CLAIMS, cmd="cmd-1", sc=["commands:read"]),
                                         kid="0a1b2c3d").encode())
    write(t, "v_all_scopes", b"\0" + token(dict(CLAIMS, sc=["*"])).encode())
    write(t, "v_expired", b"\0" + token(dict(CLAIMS, exp=1700000000)).encode())
    write(t, "v_unknown_kid", b"\0" + token(CLAIMS)[:4].encode() + b"ffffffff" +
          token(CLAIMS)[12:].encode())
    write(t, "v_bad_mac", b"\0" + token(CLAIMS)[:-2].encode() + b"AA")
    write(t, "v_api_key", b"\0sk-" + b"0123456789abcdef" * 3)
    write(t, "v_dots", b"\0st1....")
    write(t, "c_claims", b"\1" + json.dumps(CLAIMS).encode())
    write(t, "c_cmd", b"\1" + json.dumps(dict(CLAIMS, cmd="cmd-7", sc=["sandbox:*", 3])).encode())
    write(t, "c_bad_scope", b"\1" + json.dumps(dict(CLAIMS, sc=["root"])).encode())
    write(t, "c_odd_types", b'\1{"sb":1,"exp":"x","sc":{},"gen":1e400,"iat":-1}')
    write(t, "c_not_json", b"\1[1,2")
    write(t, "k_keys", b"\2" + json.dumps({"keys": [
        {"id": kid, "secret": s.hex(), "created_ms": 5} for kid, s in AUTH_KEYS.items()]}).encode())
    write(t, "k_dup", b"\2" + json.dumps({"keys": [{"id": "a", "secret": "00" * 32}] * 2}).encode())
    write(t, "k_short", b'\2{"keys":[{"id":"a.b","secret":"zz"}]}')
    write(t, "s_scopes", b"\3sandbox:read\nsandbox:lifecycle\ncommands:exec\ncommands:read\n"
          b"commands:write\nfiles:read\nfiles:write\nsnapshots")
    write(t, "s_star", b"\3*")
    write(t, "s_unknown", b"\3files:read\nfiles:execute")
    for i, a in enumerate(["127.0.0.1", "0.0.0.0", "::1", "[::ffff:127.0.0.2]", "localhost", "10.1.2.3"]):
        write(t, "l_%d" % i, b"\4" + a.encode())


# api_bodies: u8 route (api_bodies_fuzz.cc's switch) | body. Realistic bodies of every route
# (docs/api.md) plus edge cases.
ROUTE_BODIES = {
    0: {"create_template": API_BODIES["create_template"],
        "create_snapshot": API_BODIES["create_snapshot"],
        "create_min": {},
        "create_nofile": {"template": "alpine:3", "limits": {"nofile": 1024, "cpus": 0}},
        "create_both": {"template": "a:b", "snapshot": "snap-1"},
        "create_unknown": {"templat": "a:b"},
        "create_bad_limit": {"limits": {"memory_bytes": -1}},
        "create_bad_limit_name": {"limits": {"swap": 1}},
        "create_huge": {"limits": {"cpus": 1e308, "pids": 18446744073709551615},
                        "timeout": 31622400, "idle_timeout": 31622401}},
    1: {"exec_argv": API_BODIES["exec_argv"],
        "exec_cmd": API_BODIES["exec_cmd"],
        "exec_pty": {"cmd": "bash", "pty": {"cols": 120, "rows": 40}, "stdin": True,
                     "user": 1000, "timeout": 0.5},
        "exec_both": {"argv": ["a"], "cmd": "b"},
        "exec_empty_argv": {"argv": []},
        "exec_bad_env": {"cmd": "x", "env": {"A": 1}},
        "exec_neg_user": {"cmd": "x", "user": -1},
        "exec_timeout_big": {"cmd": "x", "timeout": 1e7},
        "exec_pty_null": {"cmd": "x", "pty": None}},
    2: {"signal_name": API_BODIES["signal_name"], "signal_number": API_BODIES["signal_number"],
        "signal_sig": {"signal": "SIGWINCH"}, "signal_65": {"signal": 65},
        "signal_unknown": {"signal": "SIGFOO"}, "signal_missing": {}},
    3: {"resize": {"cols": 80, "rows": 24}, "resize_zero": {"cols": 0, "rows": 24},
        "resize_float": {"cols": 80.5, "rows": 24}},
    4: {"fork": API_BODIES["fork"], "fork_default": {}, "fork_big": {"count": 10 ** 12},
        "fork_neg": {"count": -3}, "fork_str": {"count": "2"}},
    5: {"timeout": API_BODIES["timeout"], "timeout_frac": {"timeout": 12.75},
        "timeout_neg": {"timeout": -1}, "timeout_huge": {"timeout": 1e300, "on_timeout": 5}},
    6: {"rename": API_BODIES["rename"], "rename_missing": {"from": "/a"},
        "rename_types": {"from": 1, "to": []}},
    7: {"build_spec": {"name": "py", "tag": "v1", "spec": SPEC,
                       "context": {"requirements.txt": base64.b64encode(b"requests\n").decode(),
                                   "src/main.py": base64.b64encode(b"print(1)\n").decode()},
                       "build_args": {"V": "1"}, "network": True},
        "build_tarball": {"name": "t", "tarball_path": "/srv/rootfs.tar"},
        "build_oci": {"name": "o", "oci_archive_path": "/srv/img.tar"},
        "build_dir": {"name": "d", "directory": "/srv/rootfs"},
        "build_bad_b64": {"name": "x", "spec": "FROM a:b\n", "context": {"f": "abc"}},
        "build_b64_padding": {"name": "x", "context": {"f": "YQ==", "g": "YWI=", "h": "=YQ="}},
        "build_unknown": {"name": "x", "from": "y"}},
    8: {"mint_files": {"scopes": ["files:read", "files:write"], "ttl_s": 3600},
        "mint_attach": {"scopes": ["commands:read"], "command_id": "cmd-0123456789abcdef"},
        "mint_all": {"scopes": ["*"]}, "mint_empty_scopes": {"scopes": []},
        "mint_bad_cmd": {"command_id": "sb-1"}, "mint_ttl_zero": {"ttl_s": 0}},
    9: {"mint_narrow": {"scopes": ["files:read"]}, "mint_broader": {"scopes": ["files:write"]},
        "mint_default": {}},
    10: {"mint_attach_same": {"scopes": ["commands:write"], "command_id": "cmd-0123456789abcdef"},
         "mint_attach_other": {"command_id": "cmd-fedcba9876543210"}},
    11: {"key": {"name": "ci"}, "key_noname": {}, "key_type": {"name": 7}},
}


def api_bodies_seeds():
    t = "api_bodies"
    for route, bodies in ROUTE_BODIES.items():
        for name, body in bodies.items():
            write(t, name, bytes([route]) + json.dumps(body).encode())
    write(t, "empty_body", b"\x01")
    write(t, "not_object", b"\x00[1,2,3]")
    write(t, "not_json", b"\x01{\"cmd\":")
    write(t, "nested", b"\x00{\"env\":" + b"[" * 64 + b"]" * 64 + b"}")
    write(t, "dup_keys", b'\x01{"cmd":"a","cmd":"b"}')


def http_target_seeds():
    t = "http_target"
    for i, target in enumerate([
            "/v1/sandboxes?wait=30s",
            "/v1/sandboxes?label=team%3Dml&label=env=prod&state=running",
            "/v1/sandboxes/sb-1?wait=1m&delete_snapshots=true",
            "/v1/sandboxes/sb-1/commands/cmd-1?wait=500ms",
            "/v1/sandboxes/sb-1/commands/cmd-1/output?stream=stderr&offset=1024&limit=65536&wait=10s",
            "/v1/sandboxes/sb-1/commands/cmd-1/output?format=mux&stdout_offset=0&stderr_offset=7",
            "/v1/sandboxes/sb-1/commands/cmd-1/stdin?eof=1",
            "/v1/sandboxes/sb-1/commands?stream=mux",
            "/v1/sandboxes/sb-1/files?path=%2Fhome%2Fuser%2Fa%20b.txt&mode=0755",
            "/v1/sandboxes/sb-1/files:list?path=/&depth=16",
            "/v1/sandboxes/sb-1/files?path=/tmp/x&recursive=yes",
            "/v1/operations?limit=10&state=running",
            "/v1/templates?wait=5m",
            "/sandboxes?metadata=user%253Dalice%2526app%253Dprod",
            "/v2/sandboxes?metadata=a%3Db&state=running&state=paused&limit=10",
            "/files?path=~%2Fnotes.md&username=user",
            "/process.Process/Start",
            "/v1/sandboxes/sb-1/commands/cmd-1/output?offset=-1&limit=0&wait=forever",
            "/v1/sandboxes/sb-1/files:list?depth=17&mode=9999",
            "/a//b/%zz/%4/%41%42?&&=&k&k=1&k=2&%00=%ff",
            "/v1/sandboxes/sb-1/commands/cmd-1/output?offset=%2018446744073709551616",
            "*",
            "http://host:7070/v1/sandboxes?wait=1h",
    ]):
        write(t, "t_%02d" % i, target)


def connect_envelope(flags, obj):
    payload = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return struct.pack(">BI", flags, len(payload)) + payload


def e2b_connect_seeds():
    t = "e2b_connect"
    start = {"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "echo hi"],
                         "envs": {"A": "b"}, "cwd": "/home/user"},
             "stdin": False}
    write(t, "s_start", b"\x00" + connect_envelope(0, start))
    write(t, "s_start_pty", b"\x00" + connect_envelope(0, {
        "process": {"cmd": "/bin/bash", "args": ["-i", "-l"], "envs": {"TERM": "xterm"}},
        "pty": {"size": {"cols": 80, "rows": 24}}}))
    write(t, "s_connect", b"\x00" + connect_envelope(0, {"process": {"pid": 42}}))
    write(t, "s_connect_tag", b"\x00" + connect_envelope(0, {"process": {"tag": "t"}}))
    write(t, "s_compressed", b"\x00" + connect_envelope(1, start))
    write(t, "s_end_stream", b"\x00" + connect_envelope(2, {}))
    write(t, "s_two", b"\x00" + connect_envelope(0, {}) + connect_envelope(0, {}))
    write(t, "s_short", b"\x00\x00\x00\x00")
    write(t, "s_len_big", b"\x00\x00\xff\xff\xff\xff{}")
    write(t, "s_empty_msg", b"\x00" + connect_envelope(0, b""))
    for name, msg in {
            "u_list": {},
            "u_send_input": {"process": {"pid": 42}, "input": {"stdin": "aGVsbG8K"}},
            "u_send_pty": {"process": {"pid": 42}, "input": {"pty": "bHMgLWxhDQ=="}},
            "u_send_bad_b64": {"process": {"pid": 42}, "input": {"stdin": "a$b"}},
            "u_signal": {"process": {"pid": 42}, "signal": "SIGNAL_SIGKILL"},
            "u_signal_num": {"process": {"pid": 42}, "signal": 15},
            "u_update": {"process": {"pid": 42}, "pty": {"size": {"cols": 100, "rows": 30}}},
            "u_close_stdin": {"process": {"pid": 42}},
            "u_stat": {"path": "/home/user/file.txt"},
            "u_move": {"source": "a.txt", "destination": "/tmp/b.txt"},
            "u_listdir": {"path": "/", "depth": 3},
            "u_listdir_deep": {"path": "rel", "depth": 1000000},
            "u_make_dir": {"path": "/home/user/new"},
            "u_pid_neg": {"process": {"pid": -1}},
            "u_pid_str": {"process": {"pid": "42"}},
    }.items():
        write(t, name, b"\x01" + json.dumps(msg).encode())
    write(t, "u_not_object", b"\x01[]")
    for name, body in {
            "c_create": {"templateID": "base", "timeout": 300, "metadata": {"user": "alice"},
                         "envVars": {"A": "b"}, "autoPause": False, "secure": True,
                         "allow_internet_access": True},
            "c_create_tag": {"templateID": "python:3.12", "autoResume": {"enabled": False},
                             "mcp": None, "volumeMounts": []},
            "c_create_mcp": {"templateID": "base", "mcp": {"x": 1}},
            "c_create_bad_timeout": {"templateID": "base", "timeout": 1.5},
            "c_create_no_template": {"timeout": 60},
            "c_connect": {"timeout": 600},
            "c_timeout_neg": {"timeout": -5},
    }.items():
        write(t, name, b"\x02" + json.dumps(body).encode())
    for i, h in enumerate([
            "Basic " + base64.b64encode(b"user:").decode(),
            "Basic !!!", "Basic dXNlcg",
            "multipart/form-data; boundary=----WebKitFormBoundary7MA4YWxkTrZu0gW",
            'multipart/form-data; boundary="quoted;b"; charset=utf-8',
            'multipart/form-data; boundary="unterminated',
            "application/connect+json ; charset=utf-8",
            "user%253Dalice%2526app%253Dprod",
            "-_-_AA", "YWJj====",
    ]):
        write(t, "h_%02d" % i, b"\x03" + h.encode())


def multipart_body(boundary, parts, final=True, preamble=b""):
    out = preamble
    for name, data in parts:
        out += b"--" + boundary + b"\r\n"
        disp = b'Content-Disposition: form-data; name="file"'
        if name is not None:
            disp += b'; filename="' + name + b'"'
        out += disp + b"\r\nContent-Type: application/octet-stream\r\n\r\n" + data + b"\r\n"
    if final:
        out += b"--" + boundary + b"--\r\n"
    return out


def e2b_multipart_seeds():
    t = "e2b_multipart"
    b = b"----WebKitFormBoundary7MA4YWxkTrZu0gW"
    ct = b"multipart/form-data; boundary=" + b + b"\n"
    write(t, "one", SEED + ct + multipart_body(b, [(b"/home/user/a.txt", b"hello\n")]))
    write(t, "two", SEED + ct + multipart_body(
        b, [(b"a.txt", b"x" * 300), (b"dir/b.bin", bytes(range(256)))]))
    write(t, "empty_file", SEED + ct + multipart_body(b, [(b"e", b"")]))
    write(t, "near_delim", SEED + ct + multipart_body(
        b, [(b"n", b"\r\n--" + b[:-1] + b"\r\n-" + b"\r\n--")]))
    write(t, "escaped_name", SEED + ct + multipart_body(b, [(b'we\\"ird', b"1")]))
    write(t, "no_filename", SEED + ct + multipart_body(b, [(None, b"1")]))
    write(t, "no_final", SEED + ct + multipart_body(b, [(b"f", b"abc")], final=False))
    write(t, "preamble", SEED + ct + multipart_body(b, [(b"f", b"abc")], preamble=b"ignored\r\n"))
    write(t, "quoted", SEED + b'multipart/form-data; boundary="q b"; x=y\n' +
          multipart_body(b"q b", [(b"f", b"1")]))
    write(t, "short_boundary", struct.pack("<I", 0x0a0b0c0d) + b"multipart/form-data; boundary=x\n" +
          multipart_body(b"x", [(b"f", b"--x--x\r\n-x")]))
    write(t, "no_boundary", SEED + b"multipart/form-data\n--x\r\n")


def mitm_http_seeds():
    t = "mitm_http"
    seed = struct.pack("<I", 0x9e3779b9)
    ph = b"space_secret_K_00112233445566778899aabbccddeeff"
    basic = base64.b64encode(b"x-access-token:" + ph)
    write(t, "get_keepalive", seed + b"GET /v1/models HTTP/1.1\r\nHost: api.example.test\r\n"
          b"Authorization: Bearer " + ph + b"\r\n\r\nGET /2 HTTP/1.1\r\nHost: api.example.test\r\n"
          b"Connection: close\r\n\r\n")
    body = b'{"key":"' + ph + b'"}'
    write(t, "post_json", seed + b"POST /v1/chat HTTP/1.1\r\nHost: api.example.test\r\n"
          b"Content-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: " +
          str(len(body)).encode() + b"\r\n\r\n" + body)
    write(t, "post_chunked", seed + b"POST /up HTTP/1.1\r\nHost: api.example.test:443\r\n"
          b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n3;ext=1\r\n" + ph[:3] +
          b"\r\n0\r\nTrailer: x\r\n\r\n")
    write(t, "basic_auth", seed + b"GET /repo.git/info/refs HTTP/1.1\r\nHost: github.example.test\r\n"
          b"Authorization: Basic " + basic + b"\r\n\r\n")
    write(t, "absolute_form", seed + b"GET https://evil.test/x HTTP/1.1\r\nHost: api.example.test\r\n\r\n")
    write(t, "websocket", seed + b"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\n"
          b"Upgrade: websocket\r\n\r\n")
    write(t, "dup_length", seed + b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\nhello")
    write(t, "huge_length", seed + b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n")
    write(t, "http10", seed + b"GET / HTTP/1.0\r\nX: " + ph + ph + b"\r\n\r\n")
    write(t, "garbage", seed + b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 garbage\r\n\r\n")
    write(t, "response_chunked", seed + b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
          b"6\r\npiece1\r\n0\r\n\r\n")
    write(t, "response_interim", struct.pack("<I", 7) + b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n")
    write(t, "response_eof", seed + b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil close")


if __name__ == "__main__":
    agent_seeds()
    template_seeds()
    json_seeds()
    mux_seeds()
    http_seeds()
    auth_seeds()
    api_bodies_seeds()
    http_target_seeds()
    e2b_connect_seeds()
    e2b_multipart_seeds()
    mitm_http_seeds()
