"""The unmodified E2B Python SDK against spaced: the coverage of tests/e2b/e2b.test.mjs
(the JS SDK suite), through the Python SDK's own API."""

import base64
import io
import json
import os
import socket
import struct
import time
from datetime import datetime, timezone

import httpx
import pytest
from e2b import (
    AuthenticationException,
    CommandExitException,
    NotFoundException,
    PtySize,
    Sandbox,
    SandboxException,
    SandboxQuery,
    SandboxState,
    TimeoutException,
)

from conftest import (CREATED, MAX_FILE_BYTES, RUN, TLS_CA, VERIFY, FileNotFoundException,
                      SandboxNotFoundException, create, wait_for)

API = os.environ["E2B_API_URL"]
KEY = os.environ["E2B_API_KEY"]


def listed(**query):
    return Sandbox.list(query=SandboxQuery(**query)).next_items()


@pytest.fixture(scope="module")
def sbx() -> Sandbox:
    return create(metadata={"role": "main"}, envs={"GREETING": "hello from envs"})


# ---------------------------------------------------------------- sandbox


def test_create_returns_a_running_sandbox_with_envs(sbx):
    assert sbx.sandbox_id.startswith("sb-")
    assert sbx.is_running() is True
    assert sbx.commands.run('echo "$GREETING"').stdout == "hello from envs\n"


def test_get_info_reports_template_metadata_state_and_timeout(sbx):
    info = sbx.get_info()
    assert info.sandbox_id == sbx.sandbox_id
    assert info.template_id == "base"
    assert info.state == SandboxState.RUNNING
    assert info.metadata == {"suite": RUN, "role": "main"}
    left = (info.end_at - datetime.now(timezone.utc)).total_seconds()
    assert 500 < left <= 601, info.end_at


def test_set_timeout_moves_the_end(sbx):
    sbx.set_timeout(1200)
    left = (sbx.get_info().end_at - datetime.now(timezone.utc)).total_seconds()
    assert 1100 < left <= 1201


def test_commands_run_in_the_foreground(sbx):
    r = sbx.commands.run('echo out; echo err >&2; printf "%s" "$0"')
    assert r.exit_code == 0
    assert r.stderr == "err\n"
    assert r.stdout.startswith("out\n")
    assert sbx.commands.run("id -u", user="root", cwd="/tmp").stdout == "0\n"
    assert sbx.commands.run("pwd", cwd="/tmp").stdout == "/tmp\n"
    out, err = [], []
    sbx.commands.run("echo a; echo b >&2", on_stdout=out.append, on_stderr=err.append)
    assert "".join(out) == "a\n" and "".join(err) == "b\n"


def test_a_non_zero_exit_raises_command_exit_exception(sbx):
    with pytest.raises(CommandExitException) as e:
        sbx.commands.run("echo partial; echo oops >&2; exit 3")
    assert (e.value.exit_code, e.value.stdout, e.value.stderr) == (3, "partial\n", "oops\n")


def test_background_commands_callbacks_and_wait(sbx):
    out, err = [], []
    h = sbx.commands.run("for i in 1 2 3; do echo o$i; echo e$i >&2; sleep 0.05; done",
                         background=True)
    assert h.pid > 0
    r = h.wait(on_stdout=out.append, on_stderr=err.append)
    assert r.exit_code == 0
    assert r.stdout == "o1\no2\no3\n"
    assert "".join(out) == "o1\no2\no3\n"
    assert "".join(err) == "e1\ne2\ne3\n"


def test_send_stdin_and_close_stdin(sbx):
    h = sbx.commands.run('read line; echo "got:$line"; cat', background=True, stdin=True)
    sbx.commands.send_stdin(h.pid, "typed line\n")
    h.send_stdin("more\n")
    h.close_stdin()
    assert h.wait().stdout == "got:typed line\nmore\n"


def test_commands_list_and_kill(sbx):
    h = sbx.commands.run("sleep 120", background=True)
    procs = sbx.commands.list()
    p = next((x for x in procs if x.pid == h.pid), None)
    assert p is not None, procs
    assert "sleep 120" in p.args, p
    assert sbx.commands.kill(h.pid) is True
    with pytest.raises(CommandExitException) as e:
        h.wait()
    assert e.value.exit_code == -1
    assert "killed" in (e.value.error or "")
    wait_for(lambda: not any(x.pid == h.pid for x in sbx.commands.list()), "the list to drop it")
    # A killed process is gone: kill says so, input is refused with NotFoundException.
    assert sbx.commands.kill(h.pid) is False
    with pytest.raises(NotFoundException):
        sbx.commands.send_stdin(h.pid, "x")


def test_files_write_and_read_text_bytes_several_octet_stream(sbx):
    info = sbx.files.write("/tmp/e2b/hello.txt", "hello, files\n")
    assert (info.path, info.name) == ("/tmp/e2b/hello.txt", "hello.txt")
    assert sbx.files.read("/tmp/e2b/hello.txt") == "hello, files\n"

    binary = bytes((i * 7) % 256 for i in range(256 * 3))
    sbx.files.write("/tmp/e2b/bin.dat", binary)
    assert bytes(sbx.files.read("/tmp/e2b/bin.dat", format="bytes")) == binary

    many = sbx.files.write_files([
        {"path": "/tmp/e2b/many/a.txt", "data": "A"},
        {"path": "/tmp/e2b/many/b.txt", "data": b"BB"},
    ])
    assert sorted(f.path for f in many) == ["/tmp/e2b/many/a.txt", "/tmp/e2b/many/b.txt"]
    assert sbx.files.read("/tmp/e2b/many/a.txt") == "A"
    assert sbx.files.read("/tmp/e2b/many/b.txt") == "BB"

    sbx.files.write("/tmp/e2b/octet.txt", "via octet-stream", use_octet_stream=True)
    assert sbx.files.read("/tmp/e2b/octet.txt") == "via octet-stream"

    # Larger than one agent round trip (2 MiB) both ways, a file object, and an empty file.
    big = bytes((i * 31 + (i >> 12)) % 251 for i in range(5 * 1024 * 1024 + 123))
    sbx.files.write("/tmp/e2b/big.dat", big)
    sbx.files.write("/tmp/e2b/big2.dat", big, use_octet_stream=True)
    sbx.files.write("/tmp/e2b/big3.dat", io.BytesIO(big))
    for p in ("/tmp/e2b/big.dat", "/tmp/e2b/big2.dat", "/tmp/e2b/big3.dat"):
        assert bytes(sbx.files.read(p, format="bytes")) == big, p
    streamed = b"".join(sbx.files.read("/tmp/e2b/big.dat", format="stream"))
    assert streamed == big
    sbx.files.write("/tmp/e2b/empty.txt", "")
    assert sbx.files.read("/tmp/e2b/empty.txt") == ""
    assert sbx.commands.run("wc -c < /tmp/e2b/big.dat").stdout.strip() == str(len(big))


def test_files_list_exists_make_dir_rename_remove_get_info(sbx):
    assert sbx.files.make_dir("/tmp/e2b/dir/sub") is True
    assert sbx.files.make_dir("/tmp/e2b/dir/sub") is False
    sbx.files.write("/tmp/e2b/dir/f.txt", "12345")
    by_name = {e.name: e for e in sbx.files.list("/tmp/e2b/dir")}
    assert sorted(by_name) == ["f.txt", "sub"]
    f = by_name["f.txt"]
    assert f.type == "file" or f.type.value == "file"
    assert (f.size, f.path, f.permissions) == (5, "/tmp/e2b/dir/f.txt", "-rw-r--r--")
    assert isinstance(f.modified_time, datetime)
    assert by_name["sub"].type.value == "dir"
    deep = sbx.files.list("/tmp/e2b/dir", depth=2)
    assert any(e.path == "/tmp/e2b/dir/sub" for e in deep)

    assert sbx.files.exists("/tmp/e2b/dir/f.txt") is True
    assert sbx.files.exists("/tmp/e2b/dir/nope") is False
    moved = sbx.files.rename("/tmp/e2b/dir/f.txt", "/tmp/e2b/dir/g.txt")
    assert moved.path == "/tmp/e2b/dir/g.txt"
    assert sbx.files.exists("/tmp/e2b/dir/f.txt") is False
    assert sbx.files.get_info("/tmp/e2b/dir/g.txt").size == 5
    sbx.files.remove("/tmp/e2b/dir")
    assert sbx.files.exists("/tmp/e2b/dir") is False
    with pytest.raises(FileNotFoundException):
        sbx.files.read("/tmp/e2b/dir/g.txt")
    with pytest.raises(FileNotFoundException):
        sbx.files.list("/tmp/e2b/no-such-dir")


def test_files_written_through_envd_belong_to_the_sandbox_user():
    # E2B's `base` (SPACE's e2b-base) runs commands as `user`: what envd writes or makes is
    # theirs too, so their own commands can change it, and entries name the owner.
    # (The first create of `base` may import it from the template cache, or build it.)
    sbx = Sandbox.create("base", timeout=600, metadata={"suite": RUN, "role": "owners"}, request_timeout=1500)
    CREATED.append(sbx)
    info = sbx.files.write("notes/todo.txt", "one\n")
    assert info.path == "/home/user/notes/todo.txt"
    entry = sbx.files.get_info("notes/todo.txt")
    assert (entry.owner, entry.group) == ("user", "user")
    assert sbx.files.get_info("notes").owner == "user"
    sbx.commands.run("echo two >> notes/todo.txt && touch notes/new")
    assert sbx.files.read("notes/todo.txt") == "one\ntwo\n"
    assert sbx.files.make_dir("made/deep") is True
    assert sbx.files.get_info("made/deep").owner == "user"
    assert {e.name: e.owner for e in sbx.files.list("notes")} == {"todo.txt": "user", "new": "user"}
    # A call that names another user acts as them.
    sbx.files.write("/tmp/as-root.txt", "r", user="root")
    assert sbx.files.get_info("/tmp/as-root.txt").owner == "root"
    with pytest.raises(Exception):
        sbx.files.write("/tmp/nobody.txt", "x", user="no-such-user-here")
    assert sbx.files.exists("/tmp/nobody.txt") is False
    # Passwordless sudo, as on E2B's base (its template allows setuid programs).
    assert sbx.commands.run("id -u").stdout == "1000\n"
    assert sbx.commands.run("sudo id -u").stdout == "0\n"
    assert sbx.commands.run("sudo -u user id -un").stdout == "user\n"
    sbx.commands.run("sudo touch /etc/by-sudo")
    assert sbx.files.get_info("/etc/by-sudo").owner == "root"


def test_file_metadata_signed_urls_symlinks_and_watch_entries_as_envd():
    # envd 0.6.x features on E2B's `base` (it has python3, to set an attribute by hand).
    sbx = Sandbox.create("base", timeout=600, metadata={"suite": RUN, "role": "envd-0.6"}, request_timeout=1500)
    CREATED.append(sbx)
    meta = {"author": "mish", "purpose": "upload"}
    assert sbx.files.write("m/a.txt", "content", metadata=meta).metadata == meta
    assert sbx.files.get_info("m/a.txt").metadata == meta
    assert [e.metadata for e in sbx.files.list("m")] == [meta]
    assert sbx.files.write("m/a.txt", "again").metadata is None
    assert sbx.files.get_info("m/a.txt").metadata is None
    # An attribute set inside, out of band, in envd's namespace is metadata too.
    r = sbx.commands.run("python3 -c \"import os; os.setxattr('m/a.txt', 'user.e2b.by', b'hand')\"")
    assert r.exit_code == 0, r.stderr
    assert sbx.files.get_info("m/a.txt").metadata == {"by": "hand"}

    # Signed URLs: nothing but the URL is needed; expired ones are refused.
    url = sbx.download_url("m/a.txt", use_signature_expiration=60)
    res = httpx.get(url)
    assert res.status_code == 200 and res.text == "again"
    res = httpx.get(sbx.download_url("m/a.txt", use_signature_expiration=-10))
    assert res.status_code == 401
    assert res.json() == {"code": 401, "message": "signature is already expired"}
    res = httpx.post(sbx.upload_url("m/up.txt"), files={"file": ("up.txt", b"by url")})
    assert res.status_code == 200, res.text
    assert sbx.files.read("m/up.txt") == "by url"

    # A symlink is reported as what it leads to, with where that is.
    sbx.commands.run("ln -s a.txt m/link", cwd="/home/user")
    link = sbx.files.get_info("m/link")
    assert link.type.value == "file"
    assert link.symlink_target == "/home/user/m/a.txt"

    # Watch events carry their entry when asked.
    h = sbx.files.watch_dir("m", include_entry=True)
    sbx.files.write("m/new.txt", "n")
    events = []
    wait_for(lambda: events.extend(h.get_new_events()) or any(e.name == "new.txt" for e in events), "the event")
    ev = next(e for e in events if e.name == "new.txt")
    assert ev.entry is not None and ev.entry.path == "/home/user/m/new.txt"
    h.stop()


def test_relative_cwd_and_set_timeout_zero_as_on_e2b():
    sbx = create(metadata={"role": "timeout-0"})
    # A relative cwd starts where envd's relative file paths do: the user's home.
    written = sbx.files.write("work/x.txt", "1").path
    assert written.endswith("/work/x.txt") and written.startswith("/")
    assert sbx.commands.run("pwd", cwd="work").stdout == written[: -len("/x.txt")] + "\n"
    # E2B's set_timeout(0) ends the sandbox now (SPACE's own 0 would mean no timeout).
    sbx.set_timeout(0)
    wait_for(lambda: not sbx.is_running(), "the sandbox to end", 30)
    with pytest.raises(SandboxNotFoundException):
        Sandbox.connect(sbx.sandbox_id)


def test_pty_create_type_resize_exit(sbx):
    out = bytearray()
    term = sbx.pty.create(PtySize(rows=24, cols=80))
    assert term.pid > 0
    sbx.pty.send_stdin(term.pid, b"echo pty-$((6*7)); stty size; tty; exit 0\n")
    r = term.wait(on_pty=lambda d: out.extend(d))
    text = out.decode(errors="replace")
    assert r.exit_code == 0
    assert "pty-42" in text and "24 80" in text and "/dev/pts/" in text, text

    out.clear()
    term = sbx.pty.create(PtySize(rows=24, cols=80))
    sbx.pty.resize(term.pid, PtySize(rows=43, cols=132))
    sbx.pty.send_stdin(term.pid, b"stty size; exit 0\n")
    term.wait(on_pty=lambda d: out.extend(d))
    assert "43 132" in out.decode(errors="replace")


# ---------------------------------------------------------------- lifecycle and listing


def test_list_filters_by_metadata():
    a = create(metadata={"role": "list-a"})
    b = create(metadata={"role": "list-b", "odd key": "a&b=c"})
    only = listed(metadata={"suite": RUN, "role": "list-a"})
    assert [s.sandbox_id for s in only] == [a.sandbox_id]
    assert only[0].state == SandboxState.RUNNING
    assert [s.sandbox_id for s in listed(metadata={"odd key": "a&b=c"})] == [b.sandbox_id]
    every = {s.sandbox_id for s in listed(metadata={"suite": RUN})}
    assert {a.sandbox_id, b.sandbox_id} <= every
    assert listed(metadata={"suite": "no-such-run"}) == []


def test_pause_then_connect_resumes():
    sbx = create(metadata={"role": "pause"})
    sbx.files.write("/tmp/state.txt", "kept")
    bg = sbx.commands.run("sleep 300", background=True, timeout=0)
    assert sbx.pause() is True
    assert sbx.get_info().state == SandboxState.PAUSED
    assert sbx.is_running() is False
    assert sbx.pause() is False, "pausing a paused sandbox"
    paused = listed(metadata={"suite": RUN, "role": "pause"}, state=[SandboxState.PAUSED])
    assert [s.sandbox_id for s in paused] == [sbx.sandbox_id]
    # While paused, the sandbox's envd is not there (as behind E2B's proxy): the Python
    # SDK reports a timed-out sandbox for commands and files alike.
    with pytest.raises(TimeoutException):
        sbx.commands.run("true")
    with pytest.raises(TimeoutException):
        sbx.files.read("/tmp/state.txt")

    again = Sandbox.connect(sbx.sandbox_id)
    assert again.sandbox_id == sbx.sandbox_id
    assert again.is_running() is True
    assert again.get_info().state == SandboxState.RUNNING
    assert again.files.read("/tmp/state.txt") == "kept"
    assert any(p.pid == bg.pid for p in again.commands.list()), "the process survived the pause"
    assert again.commands.run("echo resumed").stdout == "resumed\n"
    again.commands.kill(bg.pid)


def test_kill_is_running_and_not_found_after():
    sbx = create(metadata={"role": "kill"})
    assert sbx.kill() is True
    assert sbx.is_running() is False
    assert Sandbox.kill(sbx.sandbox_id) is False
    with pytest.raises(SandboxNotFoundException):
        sbx.get_info()
    with pytest.raises(SandboxNotFoundException):
        Sandbox.connect(sbx.sandbox_id)
    with pytest.raises(TimeoutException):
        sbx.commands.run("true")
    with pytest.raises(TimeoutException):
        sbx.files.read("/etc/passwd")
    with pytest.raises(TimeoutException):
        sbx.files.list("/")
    assert listed(metadata={"suite": RUN, "role": "kill"}) == []


def test_killed_while_a_command_runs_says_so():
    # The command's stream is reset when its sandbox goes (as envd's connection drops), so
    # the SDK probes the sandbox, finds it gone (502) and says it was killed, rather than
    # reporting a protocol error (what a clean end of the connection mid-chunk gives).
    sbx = create(metadata={"role": "killed-mid-run"})
    cmd = sbx.commands.run("sleep 60", background=True)
    sbx.kill()
    with pytest.raises(TimeoutException) as e:
        cmd.wait()
    assert "sandbox was killed or reached its end of life" in str(e.value)


# ---------------------------------------------------------------- ports over https

@pytest.mark.skipif(not TLS_CA, reason="spaced serves no TLS here (SPACE_TLS_CA is unset)")
def test_get_host_over_https():
    """The SDK's port URLs are https://{get_host(port)}: spaced serves TLS on its own port."""
    sbx = create(metadata={"role": "https"}, network={"allow_public_traffic": False})
    host = sbx.get_host(3003)
    name, _, port = host.rpartition(":")
    try:
        socket.getaddrinfo(name, int(port), type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        pytest.fail(f"{name} does not resolve ({e}): *.localhost must resolve to loopback; "
                    "on Debian install libnss-myhostname (scripts/install-deps.sh)")
    made = sbx.commands.run("mkdir -p /w && echo port-ok-tls > /w/hostname && busybox httpd -p 3003 -h /w")
    assert made.exit_code == 0, made.stderr
    headers = {"e2b-traffic-access-token": sbx.traffic_access_token}
    with httpx.Client(verify=VERIFY, trust_env=False, timeout=30) as client:
        for _ in range(50):
            res = client.get(f"https://{host}/hostname", headers=headers)
            if res.status_code == 200:
                break
            time.sleep(0.05)
        assert res.status_code == 200, res.text
        assert res.text == "port-ok-tls\n"
        assert client.get(f"https://{host}/hostname").status_code == 401


# ---------------------------------------------------------------- bad input


def test_unknown_template():
    with pytest.raises(SandboxException) as e:
        Sandbox.create("no-such-template-xyz")
    assert e.value.status_code == 404, repr(e.value)


def test_unknown_sandbox():
    with pytest.raises(SandboxNotFoundException):
        Sandbox.connect("sb-doesnotexist")
    with pytest.raises(SandboxNotFoundException):
        Sandbox.get_info("sb-doesnotexist")
    assert Sandbox.kill("sb-doesnotexist") is False


def test_a_wrong_api_key_is_an_authentication_exception():
    with pytest.raises(AuthenticationException):
        Sandbox.list(api_key="wrong-key").next_items()
    with pytest.raises(AuthenticationException):
        Sandbox.create("base:latest", api_key="wrong-key")


@pytest.fixture(scope="module")
def live() -> Sandbox:
    return create(metadata={"role": "bad-input"})


@pytest.mark.skipif(not MAX_FILE_BYTES, reason="SPACE_MAX_FILE_BYTES not set")
def test_oversize_upload(live):
    data = b"\0" * (MAX_FILE_BYTES + 1)
    for opts in ({}, {"use_octet_stream": True}):
        with pytest.raises(SandboxException) as e:
            live.files.write("/tmp/too-big.bin", data, **opts)
        assert "413" in str(e.value) and "larger than" in str(e.value), repr(e.value)
    assert live.commands.run("echo ok").stdout == "ok\n"


def envd(live: Sandbox, path: str, body: bytes, content_type: str, token=None, method="POST"):
    headers = {
        "E2b-Sandbox-Id": live.sandbox_id,
        "X-Access-Token": token if token is not None else live._envd_access_token,
        "Connect-Protocol-Version": "1",
        "Content-Type": content_type,
    }
    return httpx.request(method, os.environ["E2B_SANDBOX_URL"] + path, content=body,
                         headers=headers, timeout=30, trust_env=False, verify=VERIFY)


def frame(flags: int, payload: bytes, length=None) -> bytes:
    return struct.pack(">BI", flags, len(payload) if length is None else length) + payload


def test_malformed_connect_envelopes_end_with_invalid_argument(live):
    good = b'{"process":{"cmd":"/bin/echo","args":["hi"]}}'
    for body in (b"{}", frame(0, good, len(good) + 10), frame(1, good), frame(0, good) * 2,
                 frame(0, b"{not json")):
        res = envd(live, "/process.Process/Start", body, "application/connect+json")
        assert res.status_code == 200
        assert res.headers["content-type"] == "application/connect+json"
        buf = res.content
        assert buf[0] == 2, "an end-stream envelope"
        end = json.loads(buf[5:5 + struct.unpack(">I", buf[1:5])[0]])
        assert end["error"]["code"] == "invalid_argument", end
    # The well-formed one works: start, the output, and an empty end-stream message.
    buf = envd(live, "/process.Process/Start", frame(0, good), "application/connect+json").content
    msgs, o = [], 0
    while o < len(buf):
        n = struct.unpack(">I", buf[o + 1:o + 5])[0]
        msgs.append((buf[o], json.loads(buf[o + 5:o + 5 + n])))
        o += 5 + n
    assert msgs[0][1]["event"]["start"]["pid"] > 0
    assert base64.b64decode(msgs[1][1]["event"]["data"]["stdout"]) == b"hi\n"
    assert msgs[-1] == (2, {})


def test_malformed_unary_requests_and_auth_on_envd(live):
    res = envd(live, "/filesystem.Filesystem/Stat", b'{"path":', "application/json")
    assert res.status_code == 400 and res.json()["code"] == "invalid_argument"
    res = envd(live, "/filesystem.Filesystem/Stat", b'{"path":"/"}', "application/json", token="wrong")
    assert res.status_code == 401 and res.json()["code"] == "unauthenticated"
    res = envd(live, "/filesystem.Filesystem/Stat", b'{"path":"/"}', "application/json")
    assert res.status_code == 200 and res.json()["entry"]["type"] == "FILE_TYPE_DIRECTORY"
    other = next(s for s in CREATED if s is not live and s.is_running())
    res = envd(live, "/filesystem.Filesystem/Stat", b'{"path":"/"}', "application/json",
               token=other._envd_access_token)
    assert res.status_code == 401


def test_control_plane_errors_carry_e2b_codes():
    res = httpx.get(f"{API}/sandboxes/sb-doesnotexist", headers={"X-API-KEY": KEY}, trust_env=False,
                    verify=VERIFY)
    assert res.status_code == 404
    assert res.json()["code"] == 404 and "sb-doesnotexist" in res.json()["message"]
    bad = httpx.post(f"{API}/v2/sandboxes", headers={"X-API-KEY": KEY}, trust_env=False, verify=VERIFY,
                     json={"templateID": "base:latest", "volumeMounts": [{"name": "v", "path": "not-absolute"}]})
    assert bad.status_code == 400 and bad.json()["code"] == 400


# ---------------------------------------------------------------- network


def space_network(sandbox_id: str) -> dict:
    """The SPACE policy behind an E2B sandbox (SPACE's own API, same key)."""
    res = httpx.get(f"{API}/v1/sandboxes/{sandbox_id}/network",
                    headers={"Authorization": f"Bearer {KEY}"}, trust_env=False, verify=VERIFY, timeout=30)
    res.raise_for_status()
    return res.json()


def test_network_options_map_onto_space_policies():
    # No traffic leaves any of these sandboxes; only the stored policies are checked.
    closed = create(metadata={"role": "net-closed"}, allow_internet_access=False)
    assert space_network(closed.sandbox_id)["mode"] == "none"
    deny = create(metadata={"role": "net-deny"}, allow_internet_access=True,
                  network={"deny_out": ["198.51.100.0/24"]})
    n = space_network(deny.sandbox_id)
    assert n["mode"] == "internet" and n["deny_out"] == ["198.51.100.0/24"], n
    only = create(metadata={"role": "net-only"},
                  network={"allow_out": ["203.0.113.0/24"], "deny_out": ["0.0.0.0/0"]})
    n = space_network(only.sandbox_id)
    assert n["mode"] == "internet" and n["allow_out"] == ["203.0.113.0/24"], n
    assert only.commands.run("echo up").stdout == "up\n"


# ---------------------------------------------------------------- volumes (docs/volumes.md)


def test_volume_files_mount_and_destroy(monkeypatch):
    from e2b import Volume, VolumeException

    monkeypatch.setenv("E2B_VOLUME_API_URL", API)  # E2B's content API is spaced itself
    name = f"py-{os.getpid()}-{int(time.time() * 1000)}"
    vol = Volume.create(name)
    assert vol.name == name
    vol.write_file("/dir/hello.txt", "from python")
    assert vol.read_file("/dir/hello.txt") == "from python"
    assert any(e.name == "hello.txt" for e in vol.list("/dir"))
    assert not vol.exists("/nope")
    assert any(v.volume_id == vol.volume_id for v in Volume.list())
    sbx = create(volume_mounts={"/data": vol})
    r = sbx.commands.run("cat /data/dir/hello.txt && echo from-sandbox > /data/back.txt")
    assert r.stdout == "from python"
    assert vol.read_file("/back.txt") == "from-sandbox\n"
    with pytest.raises(VolumeException):
        Volume.destroy(vol.volume_id)  # mounted: 409
    sbx.kill()
    assert Volume.destroy(vol.volume_id) is True
    assert Volume.destroy(vol.volume_id) is False
