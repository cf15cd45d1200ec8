"""space_sandbox.AsyncSandbox against a real spaced: the same request layer with await,
concurrency on one event loop, async callbacks and streams."""

import asyncio
import io
import os
from datetime import datetime, timezone

import pytest

from conftest import RUN
from space_sandbox import (
    AsyncSandbox,
    AuthenticationException,
    CommandExitException,
    ConflictException,
    FileType,
    NotFoundException,
    TimeoutException,
)

pytestmark = pytest.mark.anyio


async def test_lifecycle_commands_and_files():
    async with await AsyncSandbox.create(timeout=300, metadata={"suite": RUN, "role": "async"},
                                         envs={"WHO": "async"}) as sb:
        assert sb.id.startswith("sb-")
        info = await sb.get_info()
        assert (info.state, info.metadata, info.envs) == ("running", {"suite": RUN, "role": "async"},
                                                          {"WHO": "async"})
        assert 200 < (info.end_at - datetime.now(timezone.utc)).total_seconds() <= 301
        assert [s.id for s in await AsyncSandbox.list(metadata={"suite": RUN, "role": "async"})] == [sb.id]

        r = await sb.commands.run('echo "hi $WHO"; echo e >&2')
        assert (r.stdout, r.stderr, r.exit_code) == ("hi async\n", "e\n", 0)
        with pytest.raises(CommandExitException) as e:
            await sb.commands.run("echo so far; exit 7")
        assert (e.value.exit_code, e.value.stdout) == (7, "so far\n")
        with pytest.raises(TimeoutException):
            await sb.commands.run("sleep 30", timeout=1)
        assert (await sb.commands.run("tr a-z A-Z", stdin="shout\n")).stdout == "SHOUT\n"

        # Several commands at once on one event loop.
        rs = await asyncio.gather(*(sb.commands.run(f"sleep 0.3; echo {i}") for i in range(4)))
        assert [x.stdout for x in rs] == [f"{i}\n" for i in range(4)]

        # Files: text, bytes, a file object, a stream.
        await sb.files.write("/tmp/a/t.txt", "text")
        assert await sb.files.read("/tmp/a/t.txt") == "text"
        blob = os.urandom(3 * 1024 * 1024 + 7)
        assert (await sb.files.write("/tmp/a/b.bin", io.BytesIO(blob))).size == len(blob)
        assert await sb.files.read("/tmp/a/b.bin", format="bytes") == blob
        got = bytearray()
        async with await sb.files.read("/tmp/a/b.bin", format="stream") as s:
            async for piece in s:
                got += piece
        assert bytes(got) == blob
        assert await sb.files.make_dir("/tmp/a/d") is True
        assert await sb.files.make_dir("/tmp/a/d") is False
        entries = {e.name: e for e in await sb.files.list("/tmp/a")}
        assert sorted(entries) == ["b.bin", "d", "t.txt"]
        assert entries["d"].type == FileType.DIR and entries["t.txt"].size == 4
        assert (await sb.files.rename("/tmp/a/t.txt", "/tmp/a/u.txt")).path == "/tmp/a/u.txt"
        assert await sb.files.exists("/tmp/a/u.txt") and not await sb.files.exists("/tmp/a/t.txt")
        await sb.files.remove("/tmp/a")
        with pytest.raises(NotFoundException):
            await sb.files.read("/tmp/a/u.txt")

        # Lifecycle.
        assert (await sb.set_timeout(900)).timeout == 900
        assert (await sb.pause()).state == "paused"
        with pytest.raises(ConflictException):
            await sb.pause()
        again = await AsyncSandbox.connect(sb.id)
        try:
            assert (await again.get_info()).state == "running"
        finally:
            await again.close()
        snap = await sb.snapshot()
        assert snap.sandbox_id == sb.id
        forks = await sb.fork(1)
        try:
            assert (await forks[0].commands.run("echo forked")).stdout == "forked\n"
        finally:
            for f in forks:
                assert await f.kill()
                await f.close()
        sid = sb.id
    # The context manager killed it.
    with pytest.raises(NotFoundException):
        await AsyncSandbox.connect(sid)


async def test_background_callbacks_stdin_kill_and_reattach():
    sb = await AsyncSandbox.create(timeout=300, metadata={"suite": RUN, "role": "async-bg"})
    try:
        out, err = [], []

        async def on_err(text):  # callbacks may be coroutine functions
            err.append(text)

        h = await sb.commands.run("for i in 1 2 3; do echo o$i; echo e$i >&2; sleep 0.05; done",
                                  background=True, on_stdout=out.append, on_stderr=on_err)
        r = await h.wait()
        assert (r.stdout, r.stderr) == ("o1\no2\no3\n", "e1\ne2\ne3\n")
        assert "".join(out) == r.stdout and "".join(err) == r.stderr

        cat = await sb.commands.run("cat", background=True, stdin=True, timeout=0)
        await cat.send_stdin("one\n")
        await sb.commands.send_stdin(cat.id, b"two\n", eof=True)
        assert (await cat.wait()).stdout == "one\ntwo\n"

        sleeper = await sb.commands.run("echo started; sleep 120", background=True, timeout=0)
        chunk = await sleeper.read_output("stdout", 0, wait=10)
        assert chunk.data == b"started\n" and chunk.state == "running"
        assert any(c.id == sleeper.id for c in await sb.commands.list())
        # Re-attach from a second client while it runs, then kill it.
        other = await AsyncSandbox.connect(sb.id)
        try:
            attached = await other.commands.connect(sleeper.id)
            waiter = asyncio.ensure_future(attached.wait())
            await asyncio.sleep(0.2)
            assert await sleeper.kill() is True
            with pytest.raises(CommandExitException) as e:
                await waiter
            assert e.value.exit_code == -1 and e.value.signal == 9 and e.value.stdout == "started\n"
            assert await sleeper.kill() is False
            tail = await other.commands.connect(sleeper.id, stdout_offset=3)
            with pytest.raises(CommandExitException) as e:
                await tail.wait()
            assert e.value.stdout == "rted\n"
        finally:
            await other.close()
    finally:
        await sb.kill()
        await sb.close()


async def test_async_errors():
    with pytest.raises(AuthenticationException):
        await AsyncSandbox.list(api_key="sk-wrong")
    with pytest.raises(NotFoundException):
        await AsyncSandbox.connect("sb-doesnotexist")
    with pytest.raises(NotFoundException):
        await AsyncSandbox.create(template="no-such-template-xyz")
