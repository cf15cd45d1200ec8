"""space_sandbox.Sandbox against a real spaced: lifecycle, commands, files, errors."""

import io
import os
import threading
import time
from datetime import datetime, timezone

import httpx
import pytest

from conftest import MAX_FILE_BYTES, RUN, spaced_flag, wait_for
from space_sandbox import (
    AuthenticationException,
    CommandExitException,
    ConflictException,
    FileType,
    InvalidArgumentException,
    NotFoundException,
    RateLimitException,
    Sandbox,
    TimeoutException,
    TooLargeException,
)


# ---------------------------------------------------------------- sandbox


def test_create_info_and_envs(sb):
    assert sb.id.startswith("sb-") and sb.sandbox_id == sb.id
    assert sb.token and sb.token.startswith("st1.")
    info = sb.get_info()
    assert info.id == sb.id
    assert info.state == "running"
    assert info.template == "base:latest"
    assert info.metadata == {"suite": RUN, "role": "shared"}
    assert info.envs == {"GREETING": "hello from envs"}
    assert info.runtime == "oci"
    left = (info.end_at - datetime.now(timezone.utc)).total_seconds()
    assert 500 < left <= 601, info.end_at
    assert sb.is_running()
    assert sb.commands.run('echo "$GREETING"').stdout == "hello from envs\n"


def test_create_passes_runtime_and_network_through(make_sandbox):
    box = make_sandbox(metadata={"role": "net"}, runtime="oci", network=False)
    info = box.get_info()
    assert info.runtime == "oci"
    assert info.network["mode"] == "none", info.network
    # The policy object passes through as given; a sandbox without a route out cannot be
    # given one later (409).
    none = make_sandbox(metadata={"role": "net-none"}, network={"mode": "none"})
    assert none.get_network()["mode"] == "none"
    with pytest.raises(ConflictException):
        none.update_network({"mode": "internet", "allow_out": ["203.0.113.0/24"]})
    # With a route out (no traffic is sent here): the rules are stored and replaced.
    out = make_sandbox(metadata={"role": "net-out"},
                       network={"mode": "internet", "deny_out": ["198.51.100.0/24"]})
    n = out.get_network()
    assert n["mode"] == "internet" and n["deny_out"] == ["198.51.100.0/24"], n
    n = out.update_network({"allow_out": ["203.0.113.0/24"], "deny_out": []})
    assert n["allow_out"] == ["203.0.113.0/24"] and n["deny_out"] == [], n
    assert out.get_network()["allow_out"] == ["203.0.113.0/24"]
    # Whatever the caller gives is sent as it is: spaced judges it, and nothing is created.
    before = {s.id for s in Sandbox.list(metadata={"suite": RUN})}
    with pytest.raises(InvalidArgumentException):
        Sandbox.create(network="bogus", metadata={"suite": RUN})
    with pytest.raises(InvalidArgumentException):
        Sandbox.create(network={"mode": "sideways"}, metadata={"suite": RUN})
    with pytest.raises(InvalidArgumentException):
        Sandbox.create(runtime="no-such-runtime", metadata={"suite": RUN})
    assert {s.id for s in Sandbox.list(metadata={"suite": RUN})} == before


def test_set_timeout_moves_the_end(sb):
    info = sb.set_timeout(1200)
    assert info.timeout == 1200
    left = (sb.get_info().end_at - datetime.now(timezone.utc)).total_seconds()
    assert 1100 < left <= 1201


def test_list_filters_by_metadata(make_sandbox):
    a = make_sandbox(metadata={"role": "list-a"})
    b = make_sandbox(metadata={"role": "list-b", "odd key": "a&b=c"})
    only = Sandbox.list(metadata={"suite": RUN, "role": "list-a"})
    assert [s.id for s in only] == [a.id]
    assert only[0].state == "running"
    assert [s.id for s in Sandbox.list(metadata={"odd key": "a&b=c"})] == [b.id]
    every = {s.id for s in Sandbox.list(metadata={"suite": RUN})}
    assert {a.id, b.id} <= every
    assert Sandbox.list(metadata={"suite": "no-such-run"}) == []
    assert [s.id for s in Sandbox.list(metadata={"suite": RUN, "role": "list-b"}, state="running")] == [b.id]


def test_context_manager_kills():
    with Sandbox.create(timeout=120, metadata={"suite": RUN, "role": "with"}) as box:
        assert box.commands.run("echo in").stdout == "in\n"
        sid = box.id
    with pytest.raises(NotFoundException):
        Sandbox.connect(sid)


def test_pause_resume_and_connect(make_sandbox):
    box = make_sandbox(metadata={"role": "pause"})
    box.files.write("/tmp/state.txt", "kept")
    bg = box.commands.run("sleep 300", background=True, timeout=0)
    assert box.pause().state == "paused"
    assert not box.is_running()
    with pytest.raises(ConflictException):
        box.pause()
    assert [s.id for s in Sandbox.list(metadata={"suite": RUN, "role": "pause"}, state="paused")] == [box.id]
    assert box.resume().state == "running"
    with pytest.raises(ConflictException):
        box.resume()
    assert box.pause().state == "paused"
    again = Sandbox.connect(box.id)  # resumes a paused sandbox
    try:
        assert again.get_info().state == "running"
        assert again.files.read("/tmp/state.txt") == "kept"
        assert again.commands.get(bg.id).state == "running", "the process survived the pause"
        assert again.commands.run("echo resumed").stdout == "resumed\n"
        assert bg.kill()
    finally:
        again.close()


def test_suspend_and_wake(make_sandbox):
    box = make_sandbox(metadata={"role": "suspend"})
    box.files.write("/tmp/kept.txt", "on disk")
    assert box.suspend().state == "suspended"
    assert box.wake().state == "running"
    assert box.files.read("/tmp/kept.txt") == "on disk"
    assert box.suspend().state == "suspended"
    again = Sandbox.connect(box.id)  # wakes a suspended sandbox
    try:
        assert again.get_info().state == "running"
        assert again.commands.run("cat /tmp/kept.txt").stdout == "on disk"
    finally:
        again.close()


def test_snapshot_and_create_from_it(make_sandbox):
    box = make_sandbox(metadata={"role": "snap"})
    box.files.write("/data/in-snapshot.txt", "snapped")
    snap = box.snapshot()
    assert snap.id.startswith("snap-") and snap.sandbox_id == box.id and snap.state == "ready"
    box.files.write("/data/in-snapshot.txt", "changed later")
    child = make_sandbox(snapshot=snap.id, metadata={"role": "from-snap"})
    assert child.files.read("/data/in-snapshot.txt") == "snapped"


def test_fork(make_sandbox):
    box = make_sandbox(metadata={"role": "fork"})
    box.files.write("/data/parent.txt", "from the parent")
    forks = box.fork(2)
    try:
        assert len(forks) == 2 and len({f.id for f in forks} | {box.id}) == 3
        for i, f in enumerate(forks):
            assert f.get_info().state == "running"
            assert f.files.read("/data/parent.txt") == "from the parent"
            f.files.write("/data/child.txt", str(i))
        assert not box.files.exists("/data/child.txt")
    finally:
        for f in forks:
            f.kill()
            f.close()


def test_kill_and_not_found_after(make_sandbox):
    box = make_sandbox(metadata={"role": "kill"})
    assert box.kill() is True
    assert box.kill() is False
    assert not box.is_running()
    with pytest.raises(NotFoundException):
        box.get_info()
    with pytest.raises(NotFoundException):
        Sandbox.connect(box.id)
    with pytest.raises(NotFoundException):
        box.commands.run("true")
    with pytest.raises(NotFoundException):
        box.files.read("/etc/passwd")
    assert Sandbox.list(metadata={"suite": RUN, "role": "kill"}) == []


# ---------------------------------------------------------------- commands


def test_run_foreground(sb):
    r = sb.commands.run("echo out; echo err >&2")
    assert (r.stdout, r.stderr, r.exit_code, r.error) == ("out\n", "err\n", 0, None)
    assert r.id.startswith("cmd-")
    assert sb.commands.run("pwd", cwd="/tmp").stdout == "/tmp\n"
    assert sb.commands.run("id -u", user="root").stdout == "0\n"
    assert sb.commands.run("id -u", user="nobody", cwd="/tmp").stdout.strip() not in ("", "0")
    assert sb.commands.run('echo "$A-$B"', envs={"A": "1", "B": "two"}).stdout == "1-two\n"
    assert sb.commands.run(["printf", "%s|", "a b", "c"]).stdout == "a b|c|"


def test_run_callbacks_and_binary_safe_output(sb):
    out, err = [], []
    r = sb.commands.run("for i in 1 2 3; do echo o$i; echo e$i >&2; done; printf '\\303\\251t\\303\\251'",
                        on_stdout=out.append, on_stderr=err.append)
    assert "".join(out) == r.stdout == "o1\no2\no3\nété"
    assert "".join(err) == r.stderr == "e1\ne2\ne3\n"


def test_large_output(sb):
    r = sb.commands.run("head -c 3000000 /dev/zero | tr '\\0' x")
    assert len(r.stdout) == 3_000_000 and set(r.stdout) == {"x"}


def test_non_zero_exit_raises_with_output(sb):
    with pytest.raises(CommandExitException) as e:
        sb.commands.run("echo partial; echo oops >&2; exit 3")
    assert (e.value.exit_code, e.value.stdout, e.value.stderr) == (3, "partial\n", "oops\n")
    assert e.value.command_id.startswith("cmd-")


def test_stdin_data_and_timeout(sb):
    assert sb.commands.run("cat; echo end", stdin="line one\nline two\n").stdout == "line one\nline two\nend\n"
    assert sb.commands.run("wc -c", stdin=bytes(range(256)) * 10).stdout.strip() == "2560"
    # Without stdin, a reader sees EOF at once.
    assert sb.commands.run("cat").stdout == ""
    t0 = time.monotonic()
    with pytest.raises(TimeoutException) as e:
        sb.commands.run("echo before; sleep 30", timeout=1)
    assert time.monotonic() - t0 < 15
    assert e.value.stdout == "before\n"


def test_background_wait_and_callbacks(sb):
    out, err = [], []
    h = sb.commands.run("for i in 1 2 3; do echo o$i; echo e$i >&2; sleep 0.05; done",
                        background=True, on_stdout=out.append, on_stderr=err.append)
    assert h.id.startswith("cmd-") and h.pid and h.pid > 0
    r = h.wait()
    assert (r.exit_code, r.stdout, r.stderr) == (0, "o1\no2\no3\n", "e1\ne2\ne3\n")
    assert "".join(out) == "o1\no2\no3\n" and "".join(err) == "e1\ne2\ne3\n"
    assert h.wait().stdout == r.stdout  # a second wait answers the same
    plain = sb.commands.run("echo later; exit 4", background=True)
    with pytest.raises(CommandExitException) as e:
        plain.wait()
    assert (e.value.exit_code, e.value.stdout) == (4, "later\n")


def test_background_stdin(sb):
    h = sb.commands.run('read line; echo "got:$line"; cat', background=True, stdin=True, timeout=0)
    sb.commands.send_stdin(h.id, "typed line\n")
    h.send_stdin(b"more\n")
    h.close_stdin()
    assert h.wait().stdout == "got:typed line\nmore\n"


def test_background_kill(sb):
    h = sb.commands.run("sleep 120", background=True, timeout=0)
    assert any(c.id == h.id and c.state == "running" for c in sb.commands.list())
    assert h.kill() is True
    with pytest.raises(CommandExitException) as e:
        h.wait()
    assert e.value.exit_code == -1 and e.value.signal == 9
    assert h.kill() is False
    assert sb.commands.kill("cmd-doesnotexist") is False


def test_reattach_and_read_from_any_offset(sb):
    h = sb.commands.run("echo first; sleep 0.5; echo second; echo warn >&2", background=True)
    # Another client (a fresh connection) re-attaches by id and reads it all from the start.
    other = Sandbox.connect(sb.id)
    try:
        seen = []
        again = other.commands.connect(h.id)
        r = again.wait(on_stdout=seen.append)
        assert r.stdout == "first\nsecond\n" and "".join(seen) == "first\nsecond\n"
        assert r.stderr == "warn\n"
        # From an offset: the bytes after it only.
        late = other.commands.connect(h.id, stdout_offset=len("first\n"))
        assert late.wait().stdout == "second\n"
        chunk = other.commands.read_output(h.id, "stdout", offset=6)
        assert (chunk.data, chunk.next_offset, chunk.state, chunk.exit_code) == (b"second\n", 13, "exited", 0)
        assert other.commands.read_output(h.id, "stderr").data == b"warn\n"
        assert other.commands.read_output(h.id, "stdout", offset=2, limit=3).data == b"rst"
    finally:
        other.close()
    # A long poll: read_output with wait returns as soon as new bytes arrive.
    slow = sb.commands.run("sleep 0.3; echo late", background=True)
    chunk = slow.read_output("stdout", 0, wait=10)
    assert chunk.data == b"late\n"
    slow.wait()


# ---------------------------------------------------------------- files


def test_files_read_write_formats(sb):
    w = sb.files.write("/tmp/py/hello.txt", "hello, files\n")
    assert (w.path, w.name, w.size) == ("/tmp/py/hello.txt", "hello.txt", 13)
    assert sb.files.read("/tmp/py/hello.txt") == "hello, files\n"
    binary = bytes((i * 7) % 256 for i in range(768))
    sb.files.write("/tmp/py/bin.dat", binary)
    assert sb.files.read("/tmp/py/bin.dat", format="bytes") == binary
    # Larger than one agent round trip both ways, streamed from a file object and as a stream.
    big = os.urandom(5 * 1024 * 1024 + 123)
    assert sb.files.write("/tmp/py/big.dat", io.BytesIO(big)).size == len(big)
    assert sb.files.read("/tmp/py/big.dat", format="bytes") == big
    with sb.files.read("/tmp/py/big.dat", format="stream") as s:
        assert s.size == len(big)
        pieces = list(s)
    assert b"".join(pieces) == big
    assert sb.commands.run("wc -c < /tmp/py/big.dat").stdout.strip() == str(len(big))
    sb.files.write("/tmp/py/empty.txt", "")
    assert sb.files.read("/tmp/py/empty.txt") == ""
    sb.files.write("/tmp/py/run.sh", "#!/bin/sh\necho ran\n", mode=0o755)
    assert sb.files.get_info("/tmp/py/run.sh").permissions == "-rwxr-xr-x"
    assert sb.commands.run("/tmp/py/run.sh").stdout == "ran\n"


def test_files_list_exists_rename_remove_make_dir(sb):
    assert sb.files.make_dir("/tmp/py/dir/sub") is True
    assert sb.files.make_dir("/tmp/py/dir/sub") is False
    sb.files.write("/tmp/py/dir/f.txt", "12345")
    sb.files.write("/tmp/py/dir/sub/deep.txt", "x")
    entries = {e.name: e for e in sb.files.list("/tmp/py/dir")}
    assert sorted(entries) == ["f.txt", "sub"]
    f = entries["f.txt"]
    assert (f.type, f.size, f.path, f.permissions) == (FileType.FILE, 5, "/tmp/py/dir/f.txt", "-rw-r--r--")
    assert f.type == "file" and isinstance(f.modified_time, datetime)
    assert entries["sub"].type == FileType.DIR
    deep = {e.path for e in sb.files.list("/tmp/py/dir", depth=2)}
    assert "/tmp/py/dir/sub/deep.txt" in deep
    assert sb.files.exists("/tmp/py/dir/f.txt") and not sb.files.exists("/tmp/py/dir/nope")
    moved = sb.files.rename("/tmp/py/dir/f.txt", "/tmp/py/dir/g.txt")
    assert (moved.path, moved.size) == ("/tmp/py/dir/g.txt", 5)
    assert not sb.files.exists("/tmp/py/dir/f.txt")
    sb.files.remove("/tmp/py/dir")
    assert not sb.files.exists("/tmp/py/dir")
    with pytest.raises(NotFoundException):
        sb.files.read("/tmp/py/dir/g.txt")
    with pytest.raises(NotFoundException):
        sb.files.list("/tmp/py/no-such-dir")
    with pytest.raises(NotFoundException):
        sb.files.read("/tmp/py/no-such-file", format="stream")


@pytest.mark.skipif(not MAX_FILE_BYTES, reason="SPACE_MAX_FILE_BYTES not set")
def test_oversize_upload_is_refused(sb):
    with pytest.raises(TooLargeException):
        sb.files.write("/tmp/too-big.bin", b"\0" * (MAX_FILE_BYTES + 1))
    assert sb.commands.run("echo ok").stdout == "ok\n"


# ---------------------------------------------------------------- errors


def test_auth_errors(sb):
    with pytest.raises(AuthenticationException):
        Sandbox.list(api_key="sk-wrong")
    with pytest.raises(AuthenticationException):
        Sandbox.create(api_key="sk-wrong")
    with pytest.raises(AuthenticationException):
        Sandbox.connect(sb.id, api_key="sk-wrong")
    key = os.environ.pop("SPACE_API_KEY")
    try:
        with pytest.raises(AuthenticationException, match="SPACE_API_KEY"):
            Sandbox.list()
    finally:
        os.environ["SPACE_API_KEY"] = key
    # The sandbox's own token works for its own routes.
    scoped = Sandbox.connect(sb.id, api_key=sb.token)
    try:
        assert scoped.commands.run("echo via token").stdout == "via token\n"
    finally:
        scoped.close()


def test_unknown_template_and_sandbox():
    with pytest.raises(NotFoundException):
        Sandbox.create(template="no-such-template-xyz")
    with pytest.raises(NotFoundException):
        Sandbox.connect("sb-doesnotexist")


@pytest.mark.skipif(not spaced_flag("--max-inflight"), reason="spaced runs without --max-inflight")
def test_rate_limit_retry_after_is_honoured(sb):
    """At --max-inflight, spaced answers 429 with Retry-After: 1 before doing any work; the
    SDK waits what it says and retries (for retry_busy_for, default 30 s)."""
    limit = spaced_flag("--max-inflight")
    impatient = Sandbox.connect(sb.id, retry_busy_for=0)
    h = sb.commands.run("sleep 600", background=True, timeout=0)
    url = f"{os.environ['SPACE_URL']}/v1/sandboxes/{sb.id}/commands/{h.id}"
    auth = {"Authorization": f"Bearer {os.environ['SPACE_API_KEY']}"}
    ready = threading.Barrier(limit + 1)

    def hold():  # a long poll that takes one of spaced's request slots for 3 s
        with httpx.Client(trust_env=False) as c:
            ready.wait()
            c.get(url, params={"wait": "3s"}, headers=auth, timeout=30)

    threads = [threading.Thread(target=hold) for _ in range(limit)]
    try:
        for t in threads:
            t.start()
        ready.wait()
        time.sleep(0.5)  # the long polls are in flight
        with pytest.raises(RateLimitException) as e:
            impatient.get_info()
        assert e.value.status_code == 429 and e.value.retry_after == 1
        t0 = time.monotonic()
        assert sb.get_info().state == "running"  # retried until a slot was free
        waited = time.monotonic() - t0
        assert 1.0 <= waited < 10, waited
    finally:
        for t in threads:
            t.join()
        impatient.close()
        h.kill()
