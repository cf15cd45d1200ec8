"""The unmodified E2B Python SDK's AsyncSandbox against spaced: the same surface with
await (create, commands in the foreground and background, files, pause and connect, kill)."""

import asyncio

import pytest
from e2b import AsyncSandbox, CommandExitException, SandboxQuery, SandboxState

from conftest import FileNotFoundException

from conftest import RUN

pytestmark = pytest.mark.anyio


async def test_async_sandbox_end_to_end():
    sbx = await AsyncSandbox.create("base:latest", timeout=300, metadata={"suite": RUN, "role": "async"},
                                    envs={"WHO": "async"})
    try:
        assert sbx.sandbox_id.startswith("sb-") and await sbx.is_running()
        r = await sbx.commands.run('echo "hi $WHO"; echo e >&2')
        assert (r.stdout, r.stderr, r.exit_code) == ("hi async\n", "e\n", 0)
        with pytest.raises(CommandExitException) as e:
            await sbx.commands.run("exit 5")
        assert e.value.exit_code == 5
        rs = await asyncio.gather(*(sbx.commands.run(f"sleep 0.2; echo {i}") for i in range(3)))
        assert [x.stdout for x in rs] == ["0\n", "1\n", "2\n"]

        out = []
        h = await sbx.commands.run("cat", background=True, stdin=True, on_stdout=out.append)
        await sbx.commands.send_stdin(h.pid, "via stdin\n")
        await sbx.commands.close_stdin(h.pid)
        assert (await h.wait()).stdout == "via stdin\n"
        assert "".join(out) == "via stdin\n"

        await sbx.files.write("/tmp/a/x.txt", "async file")
        assert await sbx.files.read("/tmp/a/x.txt") == "async file"
        assert [e.name for e in await sbx.files.list("/tmp/a")] == ["x.txt"]
        await sbx.files.remove("/tmp/a")
        with pytest.raises(FileNotFoundException):
            await sbx.files.read("/tmp/a/x.txt")

        assert await sbx.pause() is True
        paused = await AsyncSandbox.list(query=SandboxQuery(metadata={"suite": RUN, "role": "async"},
                                                            state=[SandboxState.PAUSED])).next_items()
        assert [s.sandbox_id for s in paused] == [sbx.sandbox_id]
        again = await AsyncSandbox.connect(sbx.sandbox_id)
        assert (await again.get_info()).state == SandboxState.RUNNING
        assert (await again.commands.run("echo back")).stdout == "back\n"
    finally:
        assert await sbx.kill() is True
    assert await sbx.is_running() is False


# e2b-base runs commands as `user`: the volume's root must be writable by it.
async def test_async_volume_mounted_into_an_async_sandbox(monkeypatch):
    import os
    import time

    from e2b import AsyncVolume

    monkeypatch.setenv("E2B_VOLUME_API_URL", os.environ["E2B_API_URL"])  # the content API is spaced
    vol = await AsyncVolume.create(f"py-async-{os.getpid()}-{int(time.time() * 1000)}")
    await vol.write_file("/in.txt", "async volume")
    sbx = await AsyncSandbox.create("base", timeout=300, metadata={"suite": RUN, "role": "async-volume"},
                                    volume_mounts={"/vol": vol})
    try:
        r = await sbx.commands.run("cat /vol/in.txt; echo out > /vol/out.txt")
        assert r.stdout == "async volume"
        assert await vol.read_file("/out.txt") == "out\n"
    finally:
        await sbx.kill()
    assert await AsyncVolume.destroy(vol.volume_id) is True
