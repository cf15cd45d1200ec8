"""The asyncio SDK: :class:`AsyncSandbox`, the same calls as :class:`Sandbox` with ``await``
(the same request layer, ``_api``, over httpx's AsyncClient). Callbacks may be plain
functions or coroutine functions."""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from typing import IO, Any, AsyncIterator, Dict, List, Literal, Mapping, Optional, Union, overload

from . import _api
from ._code import AsyncCodeMixin
from ._api import EXIT, STDERR, STDOUT, Callback, ConnectionConfig, MuxParser, OutputCollector
from ._transport import AsyncTransport
from .exceptions import (
    ConflictException,
    ForkException,
    NotFoundException,
    SandboxException,
    UnavailableException,
)
from .models import (
    CommandInfo,
    CommandResult,
    EntryInfo,
    OutputChunk,
    SandboxInfo,
    SnapshotInfo,
    WriteInfo,
)

__all__ = ["AsyncSandbox", "AsyncCommands", "AsyncCommandHandle", "AsyncFiles", "AsyncFileStream"]


async def _call(cb: Optional[Callback], text: str) -> None:
    if cb and text:
        r = cb(text)
        if inspect.isawaitable(r):
            await r


async def _finish_operation(t: AsyncTransport, answer: Dict[str, Any]) -> Dict[str, Any]:
    op = answer.get("operation") or {}
    while op and not _api.operation_done(op):
        op = await t.json(_api.operation_request(op["id"]))
    if op.get("state") == "failed":
        raise _api.operation_error(op)
    return op


async def _follow(
    t: AsyncTransport,
    sandbox_id: str,
    command_id: Optional[str],
    col: OutputCollector,
    on_stdout: Optional[Callback],
    on_stderr: Optional[Callback],
    start: Optional[_api.Request] = None,
) -> Dict[str, Any]:
    """As ``sandbox._follow``: the output into ``col`` until the exit record, resuming a
    dropped stream from its offsets."""
    last_progress, backoff = time.monotonic(), 0.05
    while True:
        before = dict(col.offsets)
        try:
            req = start if command_id is None and start is not None else _api.follow_request(
                sandbox_id, command_id or "", col)
            async with t.stream(req) as resp:
                if command_id is None:
                    command_id = resp.headers.get("space-command-id")
                    if not command_id:
                        raise SandboxException("spaced sent no Space-Command-Id")
                parser = MuxParser()
                async for piece in resp.aiter_raw():
                    for kind, payload in parser.feed(piece):
                        if kind == EXIT:
                            await _call(on_stdout, col.flush(STDOUT))
                            await _call(on_stderr, col.flush(STDERR))
                            return json.loads(payload)
                        text = col.add(kind, payload)
                        await _call(on_stdout if kind == STDOUT else on_stderr, text)
            raise UnavailableException(f"output stream of {command_id} ended before its exit record")
        except UnavailableException:
            if command_id is None:
                raise
            now = time.monotonic()
            if col.offsets != before:
                last_progress, backoff = now, 0.05
            if now - last_progress >= _api.FOLLOW_GIVE_UP_S:
                raise
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)


class AsyncCommandHandle:
    """A background command (``run(background=True)``, ``commands.connect``)."""

    def __init__(
        self,
        sandbox: "AsyncSandbox",
        info: CommandInfo,
        on_stdout: Optional[Callback] = None,
        on_stderr: Optional[Callback] = None,
        stdout_offset: int = 0,
        stderr_offset: int = 0,
    ) -> None:
        self._sandbox = sandbox
        self.info = info
        self._col = OutputCollector(stdout_offset, stderr_offset)
        self._task: Optional[asyncio.Task] = None
        if on_stdout or on_stderr:
            # Callbacks fire as output arrives, from a task that follows the stream.
            self._task = asyncio.ensure_future(self._follow(on_stdout, on_stderr))

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def pid(self) -> Optional[int]:
        return self.info.pid

    @property
    def stdout(self) -> str:
        return self._col.text(STDOUT)

    @property
    def stderr(self) -> str:
        return self._col.text(STDERR)

    async def _follow(self, on_stdout: Optional[Callback], on_stderr: Optional[Callback]) -> Dict[str, Any]:
        return await _follow(self._sandbox._t, self._sandbox.id, self.id, self._col, on_stdout, on_stderr)

    async def wait(self, on_stdout: Optional[Callback] = None, on_stderr: Optional[Callback] = None) -> CommandResult:
        """As ``CommandHandle.wait``."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._follow(on_stdout, on_stderr))
        command = await asyncio.shield(self._task)
        self.info = CommandInfo.from_json(command)
        result, exc = _api.command_outcome(command, self._col)
        if exc is not None:
            raise exc
        return result

    async def kill(self, signal: Union[str, int] = "KILL") -> bool:
        return await self._sandbox.commands.kill(self.id, signal)

    async def send_stdin(self, data: Union[str, bytes], eof: bool = False) -> None:
        await self._sandbox.commands.send_stdin(self.id, data, eof=eof)

    async def close_stdin(self) -> None:
        await self._sandbox.commands.send_stdin(self.id, b"", eof=True)

    async def refresh(self) -> CommandInfo:
        self.info = await self._sandbox.commands.get(self.id)
        return self.info

    async def read_output(self, stream: str = "stdout", offset: int = 0, limit: Optional[int] = None,
                          wait: Optional[float] = None) -> OutputChunk:
        return await self._sandbox.commands.read_output(self.id, stream, offset, limit, wait)


class AsyncCommands:
    """``sb.commands`` of an :class:`AsyncSandbox`."""

    def __init__(self, sandbox: "AsyncSandbox") -> None:
        self._sb = sandbox

    @overload
    async def run(self, cmd: Union[str, List[str]], background: Literal[False] = False, envs: Optional[Mapping[str, str]] = None,
                  cwd: Optional[str] = None, user: Optional[str] = None, timeout: Optional[float] = 60,
                  on_stdout: Optional[Callback] = None, on_stderr: Optional[Callback] = None,
                  stdin: Union[bool, str, bytes, None] = None) -> CommandResult: ...

    @overload
    async def run(self, cmd: Union[str, List[str]], background: Literal[True], envs: Optional[Mapping[str, str]] = None,
                  cwd: Optional[str] = None, user: Optional[str] = None, timeout: Optional[float] = 60,
                  on_stdout: Optional[Callback] = None, on_stderr: Optional[Callback] = None,
                  stdin: Union[bool, str, bytes, None] = None) -> AsyncCommandHandle: ...

    async def run(
        self,
        cmd: Union[str, List[str]],
        background: bool = False,
        envs: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        timeout: Optional[float] = 60,
        on_stdout: Optional[Callback] = None,
        on_stderr: Optional[Callback] = None,
        stdin: Union[bool, str, bytes, None] = None,
    ) -> Union[CommandResult, AsyncCommandHandle]:
        """As ``Commands.run``."""
        data = stdin if isinstance(stdin, (str, bytes)) else None
        body = _api.command_body(cmd, envs, cwd, user, timeout, stdin_open=bool(stdin))
        t, sid = self._sb._t, self._sb.id
        if background or data is not None:
            answer = await t.json(_api.Request("POST", _api.sandbox_path(sid) + "/commands", json=body))
            info = CommandInfo.from_json(answer.get("command") or {"id": answer.get("id", "")})
            if data is not None:
                await self.send_stdin(info.id, data, eof=True)
            if background:
                return AsyncCommandHandle(self._sb, info, on_stdout, on_stderr)
            col = OutputCollector()
            command = await _follow(t, sid, info.id, col, on_stdout, on_stderr)
        else:
            col = OutputCollector()
            command = await _follow(t, sid, None, col, on_stdout, on_stderr,
                                    start=_api.start_stream_request(sid, body))
        result, exc = _api.command_outcome(command, col)
        if exc is not None:
            raise exc
        return result

    async def connect(self, command_id: str, on_stdout: Optional[Callback] = None,
                      on_stderr: Optional[Callback] = None, stdout_offset: int = 0,
                      stderr_offset: int = 0) -> AsyncCommandHandle:
        return AsyncCommandHandle(self._sb, await self.get(command_id), on_stdout, on_stderr,
                                  stdout_offset, stderr_offset)

    async def get(self, command_id: str) -> CommandInfo:
        return CommandInfo.from_json(await self._sb._t.json(
            _api.Request("GET", _api.command_path(self._sb.id, command_id))))

    async def list(self) -> List[CommandInfo]:
        answer = await self._sb._t.json(_api.Request("GET", _api.sandbox_path(self._sb.id) + "/commands"))
        return [CommandInfo.from_json(c) for c in answer.get("commands", [])]

    async def kill(self, command_id: str, signal: Union[str, int] = "KILL") -> bool:
        try:
            await self._sb._t.json(_api.signal_request(self._sb.id, command_id, signal))
            return True
        except (NotFoundException, ConflictException):
            return False

    async def send_stdin(self, command_id: str, data: Union[str, bytes], eof: bool = False) -> None:
        await self._sb._t.json(_api.stdin_request(self._sb.id, command_id, data, eof))

    async def read_output(self, command_id: str, stream: str = "stdout", offset: int = 0,
                          limit: Optional[int] = None, wait: Optional[float] = None) -> OutputChunk:
        resp = await self._sb._t.send(_api.read_output_request(self._sb.id, command_id, stream, offset, limit, wait))
        return _api.output_chunk(resp.headers, resp.content, offset)


class AsyncFileStream:
    """A file's content as an async iterator of byte chunks; use ``async with`` or exhaust it."""

    def __init__(self, cm: Any, resp: Any) -> None:
        self._cm = cm
        self._resp = resp
        self._it = resp.aiter_bytes()

    @classmethod
    async def open(cls, cm: Any) -> "AsyncFileStream":
        return cls(cm, await cm.__aenter__())

    @property
    def size(self) -> Optional[int]:
        v = self._resp.headers.get("space-file-size")
        return int(v) if v is not None else None

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        try:
            return await self._it.__anext__()
        except StopAsyncIteration:
            await self.aclose()
            raise
        except BaseException as e:
            cm, self._cm = self._cm, None
            if cm is not None:
                await cm.__aexit__(type(e), e, e.__traceback__)
            raise

    async def aclose(self) -> None:
        if self._cm is not None:
            cm, self._cm = self._cm, None
            await cm.__aexit__(None, None, None)

    async def __aenter__(self) -> "AsyncFileStream":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


class AsyncFiles:
    """``sb.files`` of an :class:`AsyncSandbox`."""

    def __init__(self, sandbox: "AsyncSandbox") -> None:
        self._sb = sandbox

    @overload
    async def read(self, path: str, format: Literal["text"] = "text") -> str: ...
    @overload
    async def read(self, path: str, format: Literal["bytes"]) -> bytes: ...
    @overload
    async def read(self, path: str, format: Literal["stream"]) -> AsyncFileStream: ...

    async def read(self, path: str, format: str = "text") -> Union[str, bytes, AsyncFileStream]:
        req = _api.files_request("GET", self._sb.id, "files", path, timeout=None)
        if format == "stream":
            return await AsyncFileStream.open(self._sb._t.stream(req))
        if format not in ("text", "bytes"):
            raise ValueError("format must be 'text', 'bytes' or 'stream'")
        data = (await self._sb._t.send(req)).content
        return data.decode("utf-8") if format == "text" else data

    async def write(self, path: str, data: Union[str, bytes, IO[Any]], mode: Optional[int] = None) -> WriteInfo:
        """As ``Files.write``. A file object is read in pieces (its reads block briefly)."""
        params = [("mode", f"{mode:04o}")] if mode is not None else []
        content = _api.file_content(data)
        if not isinstance(content, bytes):
            sync_pieces = content

            async def pieces() -> AsyncIterator[bytes]:
                for p in sync_pieces:
                    yield p
            content = pieces()
        answer = await self._sb._t.json(_api.files_request(
            "PUT", self._sb.id, "files", path, params, content=content,
            headers={"Content-Type": "application/octet-stream"}, timeout=300.0))
        p = answer.get("path", path)
        return WriteInfo(path=p, name=p.rstrip("/").rsplit("/", 1)[-1], size=int(answer.get("size", 0)))

    async def list(self, path: str = "/", depth: int = 1) -> List[EntryInfo]:
        answer = await self._sb._t.json(_api.files_request("GET", self._sb.id, "files:list", path,
                                                           [("depth", str(int(depth)))]))
        return [EntryInfo.from_json(e) for e in answer.get("entries", [])]

    async def get_info(self, path: str) -> EntryInfo:
        return EntryInfo.from_json(await self._sb._t.json(
            _api.files_request("GET", self._sb.id, "files:stat", path)))

    async def exists(self, path: str) -> bool:
        try:
            await self.get_info(path)
            return True
        except NotFoundException:
            return False

    async def remove(self, path: str) -> None:
        await self._sb._t.json(_api.files_request("DELETE", self._sb.id, "files", path, [("recursive", "1")]))

    async def rename(self, old_path: str, new_path: str) -> EntryInfo:
        await self._sb._t.json(_api.Request("POST", _api.sandbox_path(self._sb.id) + "/files:rename",
                                            json={"from": old_path, "to": new_path}))
        return await self.get_info(new_path)

    async def make_dir(self, path: str) -> bool:
        if await self.exists(path):
            return False
        await self._sb._t.json(_api.files_request("POST", self._sb.id, "files:mkdir", path))
        return True


class AsyncSandbox(AsyncCodeMixin):
    """A SPACE sandbox for asyncio code; ``async with`` kills it when the block ends.

    >>> async with await AsyncSandbox.create() as sb:
    ...     print((await sb.commands.run("echo hi")).stdout)
    """

    def __init__(self, sandbox_id: str, *, config: ConnectionConfig, info: Optional[SandboxInfo] = None,
                 token: Optional[str] = None) -> None:
        self.id = sandbox_id
        self.config = config
        self.token = token
        self._info = info
        self._t = AsyncTransport(config)
        self.commands = AsyncCommands(self)
        self.files = AsyncFiles(self)

    @property
    def sandbox_id(self) -> str:
        return self.id

    def __repr__(self) -> str:
        return f"AsyncSandbox(id={self.id!r}, api_url={self.config.api_url!r})"

    @classmethod
    async def create(
        cls,
        template: Optional[str] = None,
        timeout: Optional[int] = None,
        metadata: Optional[Mapping[str, str]] = None,
        envs: Optional[Mapping[str, str]] = None,
        runtime: Optional[str] = None,
        network: Any = None,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        snapshot: Optional[str] = None,
        on_timeout: Optional[str] = None,
        request_timeout: Optional[float] = None,
        retry_busy_for: Optional[float] = None,
    ) -> "AsyncSandbox":
        """As ``Sandbox.create``."""
        config = ConnectionConfig.resolve(api_url, api_key, request_timeout, retry_busy_for)
        body = _api.create_body(template, timeout, metadata, envs, runtime, network, snapshot, on_timeout)
        t = AsyncTransport(config)
        try:
            answer = await t.json(_api.create_request(body))
            sb = answer.get("sandbox") or {}
            op = await _finish_operation(t, answer)
            sandbox_id = sb.get("id") or op.get("target", "")
            info = SandboxInfo.from_json(await t.json(_api.Request("GET", _api.sandbox_path(sandbox_id))))
        finally:
            await t.close()
        return cls(sandbox_id, config=config, info=info, token=answer.get("token"))

    @classmethod
    async def connect(cls, sandbox_id: str, api_url: Optional[str] = None, api_key: Optional[str] = None,
                      request_timeout: Optional[float] = None, retry_busy_for: Optional[float] = None) -> "AsyncSandbox":
        sb = cls(sandbox_id, config=ConnectionConfig.resolve(api_url, api_key, request_timeout, retry_busy_for))
        try:
            info = await sb.get_info()
            if info.state == "paused":
                await sb.resume()
            elif info.state == "suspended":
                await sb.wake()
            elif info.state in ("deleting", "deleted"):
                raise NotFoundException(f"sandbox {sandbox_id} is {info.state}", status_code=404,
                                        code="not_found")
        except BaseException:
            await sb.close()
            raise
        return sb

    @classmethod
    async def list(cls, metadata: Optional[Mapping[str, str]] = None, state: Optional[str] = None,
                   api_url: Optional[str] = None, api_key: Optional[str] = None) -> List[SandboxInfo]:
        t = AsyncTransport(ConnectionConfig.resolve(api_url, api_key))
        try:
            answer = await t.json(_api.list_request(metadata, state))
        finally:
            await t.close()
        return [SandboxInfo.from_json(s) for s in answer.get("sandboxes", [])]

    async def get_info(self) -> SandboxInfo:
        self._info = SandboxInfo.from_json(await self._t.json(_api.Request("GET", _api.sandbox_path(self.id))))
        return self._info

    async def is_running(self) -> bool:
        try:
            return (await self.get_info()).state == "running"
        except NotFoundException:
            return False

    async def kill(self, delete_snapshots: bool = False) -> bool:
        try:
            await _finish_operation(self._t, await self._t.json(_api.delete_request(self.id, delete_snapshots)))
            return True
        except NotFoundException:
            return False

    async def _transition(self, action: str) -> SandboxInfo:
        await _finish_operation(self._t, await self._t.json(_api.lifecycle_request(self.id, action)))
        return await self.get_info()

    async def pause(self) -> SandboxInfo:
        return await self._transition("pause")

    async def resume(self) -> SandboxInfo:
        return await self._transition("resume")

    async def suspend(self) -> SandboxInfo:
        return await self._transition("suspend")

    async def wake(self) -> SandboxInfo:
        return await self._transition("wake")

    async def snapshot(self) -> SnapshotInfo:
        answer = await self._t.json(_api.lifecycle_request(self.id, "snapshots"))
        if answer.get("snapshot"):
            return SnapshotInfo.from_json(answer["snapshot"])
        op = await _finish_operation(self._t, answer)
        sid = (op.get("result") or {}).get("snapshot_id", "")
        return SnapshotInfo.from_json(await self._t.json(_api.Request("GET", "/v1/snapshots/" + _api.seg(sid))))

    async def fork(self, n: int = 1) -> List["AsyncSandbox"]:
        answer = await self._t.json(_api.fork_request(self.id, n))
        op = await _finish_operation(self._t, answer)
        results = (op.get("result") or {}).get("sandboxes") or [
            {"id": s.get("id"), "state": s.get("state"), "error": ""} for s in answer.get("sandboxes", [])]
        ok = [AsyncSandbox(r["id"], config=self.config) for r in results if not r.get("error")]
        errors = [f"{r.get('id')}: {r['error']}" for r in results if r.get("error")]
        if errors:
            raise ForkException(f"{len(errors)} of {n} forks failed: " + "; ".join(errors),
                                sandboxes=ok, errors=errors)
        return ok

    async def set_timeout(self, timeout: int, on_timeout: Optional[str] = None) -> SandboxInfo:
        body: Dict[str, Any] = {"timeout": int(timeout)}
        if on_timeout:
            body["on_timeout"] = on_timeout
        self._info = SandboxInfo.from_json(await self._t.json(
            _api.Request("POST", _api.sandbox_path(self.id) + "/timeout", json=body)))
        return self._info

    async def get_network(self) -> Dict[str, Any]:
        """The sandbox's network policy (``mode``, ``allow_out``, ``deny_out``…; secret
        values never appear), its addresses, open flows and recent decisions."""
        return await self._t.json(_api.Request("GET", _api.sandbox_path(self.id) + "/network"))

    async def update_network(self, policy: Mapping[str, Any]) -> Dict[str, Any]:
        """Replaces the egress rules of a running sandbox (``{"allow_out": [...],
        "deny_out": [...]}``, passed as given); new flows follow at once. A sandbox created
        with mode ``none`` cannot be given a route out (:class:`ConflictException`)."""
        return await self._t.json(_api.Request("PUT", _api.sandbox_path(self.id) + "/network",
                                         json=dict(policy)))

    async def close(self) -> None:
        await self._t.close()

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await self.kill()
        finally:
            await self.close()
