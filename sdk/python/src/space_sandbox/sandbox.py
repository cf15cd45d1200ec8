"""The synchronous SDK: :class:`Sandbox`, its ``commands`` and ``files``."""

from __future__ import annotations

import json
import threading
import time
from typing import IO, Any, Dict, Iterator, List, Literal, Mapping, Optional, Union, overload

from . import _api
from ._code import CodeMixin
from ._api import EXIT, STDERR, STDOUT, Callback, ConnectionConfig, MuxParser, OutputCollector
from ._transport import SyncTransport
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

__all__ = ["Sandbox", "Commands", "CommandHandle", "Files", "FileStream"]


def _finish_operation(t: SyncTransport, answer: Dict[str, Any]) -> Dict[str, Any]:
    """Follows the answer's operation until it is finished; raises if it failed."""
    op = answer.get("operation") or {}
    while op and not _api.operation_done(op):
        op = t.json(_api.operation_request(op["id"]))
    if op.get("state") == "failed":
        raise _api.operation_error(op)
    return op


def _follow(
    t: SyncTransport,
    sandbox_id: str,
    command_id: Optional[str],
    col: OutputCollector,
    on_stdout: Optional[Callback],
    on_stderr: Optional[Callback],
    start: Optional[_api.Request] = None,
) -> Dict[str, Any]:
    """Streams a command's output into ``col`` (and the callbacks) until its exit record and
    returns the COMMAND. With ``start``, that request starts the command first. A stream
    that drops is resumed from the offsets reached, as long as it makes progress."""
    last_progress, backoff = time.monotonic(), 0.05
    while True:
        before = dict(col.offsets)
        try:
            req = start if command_id is None and start is not None else _api.follow_request(
                sandbox_id, command_id or "", col)
            with t.stream(req) as resp:
                if command_id is None:
                    command_id = resp.headers.get("space-command-id")
                    if not command_id:
                        raise SandboxException("spaced sent no Space-Command-Id")
                parser = MuxParser()
                for piece in resp.iter_raw():
                    for kind, payload in parser.feed(piece):
                        if kind == EXIT:
                            for k, cb in ((STDOUT, on_stdout), (STDERR, on_stderr)):
                                rest = col.flush(k)
                                if cb and rest:
                                    cb(rest)
                            return json.loads(payload)
                        text = col.add(kind, payload)
                        cb = on_stdout if kind == STDOUT else on_stderr
                        if cb and text:
                            cb(text)
            raise UnavailableException(f"output stream of {command_id} ended before its exit record")
        except UnavailableException:
            if command_id is None:
                raise  # the start itself failed: never start a command twice
            now = time.monotonic()
            if col.offsets != before:
                last_progress, backoff = now, 0.05
            if now - last_progress >= _api.FOLLOW_GIVE_UP_S:
                raise
            time.sleep(backoff)
            backoff = min(backoff * 2, 1.0)


class CommandHandle:
    """A command started with ``background=True`` (or re-attached with
    ``commands.connect``). Its output is kept by spaced, so nothing is lost between calls."""

    def __init__(
        self,
        sandbox: "Sandbox",
        info: CommandInfo,
        on_stdout: Optional[Callback] = None,
        on_stderr: Optional[Callback] = None,
        stdout_offset: int = 0,
        stderr_offset: int = 0,
    ) -> None:
        self._sandbox = sandbox
        self.info = info
        self._col = OutputCollector(stdout_offset, stderr_offset)
        self._command: Optional[Dict[str, Any]] = None
        self._failure: Optional[BaseException] = None
        self._thread: Optional[threading.Thread] = None
        if on_stdout or on_stderr:
            # Callbacks fire as output arrives, from a thread that follows the stream.
            self._thread = threading.Thread(
                target=self._run_follow, args=(on_stdout, on_stderr), daemon=True,
                name=f"space-follow-{info.id}")
            self._thread.start()

    @property
    def id(self) -> str:
        """The command's id (``cmd-…``): re-attach with ``commands.connect(id)``."""
        return self.info.id

    @property
    def pid(self) -> Optional[int]:
        return self.info.pid

    @property
    def stdout(self) -> str:
        """What the command printed on stdout so far (as followed by this handle)."""
        return self._col.text(STDOUT)

    @property
    def stderr(self) -> str:
        return self._col.text(STDERR)

    def _run_follow(self, on_stdout: Optional[Callback], on_stderr: Optional[Callback]) -> None:
        try:
            self._command = _follow(self._sandbox._t, self._sandbox.id, self.id, self._col,
                                    on_stdout, on_stderr)
        except BaseException as e:  # handed to wait()
            self._failure = e

    def wait(self, on_stdout: Optional[Callback] = None, on_stderr: Optional[Callback] = None) -> CommandResult:
        """Waits for the command to end and returns its result; raises
        :class:`CommandExitException` for a non-zero exit or a signal and
        :class:`TimeoutException` when its ``timeout`` killed it. The callbacks get the
        output from where this handle has followed it to (unless the handle already has
        callbacks of its own from ``run``)."""
        if self._command is None:
            if self._thread is not None:
                self._thread.join()
            else:
                try:
                    self._command = _follow(self._sandbox._t, self._sandbox.id, self.id, self._col,
                                            on_stdout, on_stderr)
                except BaseException as e:
                    self._failure = e
        if self._failure is not None:
            raise self._failure
        assert self._command is not None
        self.info = CommandInfo.from_json(self._command)
        result, exc = _api.command_outcome(self._command, self._col)
        if exc is not None:
            raise exc
        return result

    def kill(self, signal: Union[str, int] = "KILL") -> bool:
        """Sends ``signal`` (default SIGKILL); ``False`` if the command had already ended."""
        return self._sandbox.commands.kill(self.id, signal)

    def send_stdin(self, data: Union[str, bytes], eof: bool = False) -> None:
        """Writes to the command's stdin (started with ``stdin=True``); ``eof`` closes it after."""
        self._sandbox.commands.send_stdin(self.id, data, eof=eof)

    def close_stdin(self) -> None:
        self._sandbox.commands.send_stdin(self.id, b"", eof=True)

    def refresh(self) -> CommandInfo:
        """The command's current record from spaced."""
        self.info = self._sandbox.commands.get(self.id)
        return self.info

    def read_output(self, stream: str = "stdout", offset: int = 0, limit: Optional[int] = None,
                    wait: Optional[float] = None) -> OutputChunk:
        """Reads stored output of one stream from any ``offset`` (see ``commands.read_output``)."""
        return self._sandbox.commands.read_output(self.id, stream, offset, limit, wait)


class Commands:
    """``sb.commands``: run programs in the sandbox."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    @overload
    def run(self, cmd: Union[str, List[str]], background: Literal[False] = False, envs: Optional[Mapping[str, str]] = None,
            cwd: Optional[str] = None, user: Optional[str] = None, timeout: Optional[float] = 60,
            on_stdout: Optional[Callback] = None, on_stderr: Optional[Callback] = None,
            stdin: Union[bool, str, bytes, None] = None) -> CommandResult: ...

    @overload
    def run(self, cmd: Union[str, List[str]], background: Literal[True], envs: Optional[Mapping[str, str]] = None,
            cwd: Optional[str] = None, user: Optional[str] = None, timeout: Optional[float] = 60,
            on_stdout: Optional[Callback] = None, on_stderr: Optional[Callback] = None,
            stdin: Union[bool, str, bytes, None] = None) -> CommandHandle: ...

    def run(
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
    ) -> Union[CommandResult, CommandHandle]:
        """Runs ``cmd``: a string through the sandbox's shell, a list as an argv.

        :param background: return a :class:`CommandHandle` at once instead of waiting.
        :param envs: extra environment variables; ``cwd``/``user``: where and as whom.
        :param timeout: seconds after which spaced kills the command (``0``/``None``: no
            limit); a timed-out command raises :class:`TimeoutException`.
        :param on_stdout: called with each piece of stdout text as it arrives (and
            ``on_stderr`` for stderr); in the background, from a follower thread.
        :param stdin: ``True`` keeps stdin open for ``send_stdin``; ``str``/``bytes`` are
            written to stdin, which is then closed. By default stdin is empty.
        :returns: a :class:`CommandResult` (``stdout``, ``stderr``, ``exit_code``); a
            non-zero exit raises :class:`CommandExitException` carrying the same fields.
        """
        data = stdin if isinstance(stdin, (str, bytes)) else None
        body = _api.command_body(cmd, envs, cwd, user, timeout, stdin_open=bool(stdin))
        t, sid = self._sb._t, self._sb.id
        if background or data is not None:
            answer = t.json(_api.Request("POST", _api.sandbox_path(sid) + "/commands", json=body))
            info = CommandInfo.from_json(answer.get("command") or {"id": answer.get("id", "")})
            if data is not None:
                self.send_stdin(info.id, data, eof=True)
            if background:
                return CommandHandle(self._sb, info, on_stdout, on_stderr)
            col = OutputCollector()
            command = _follow(t, sid, info.id, col, on_stdout, on_stderr)
        else:
            col = OutputCollector()
            command = _follow(t, sid, None, col, on_stdout, on_stderr,
                              start=_api.start_stream_request(sid, body))
        result, exc = _api.command_outcome(command, col)
        if exc is not None:
            raise exc
        return result

    def connect(self, command_id: str, on_stdout: Optional[Callback] = None,
                on_stderr: Optional[Callback] = None, stdout_offset: int = 0,
                stderr_offset: int = 0) -> CommandHandle:
        """Re-attaches to a command by id (from any client, after any disconnect): the handle
        follows its output from the given offsets (0: from the start)."""
        return CommandHandle(self._sb, self.get(command_id), on_stdout, on_stderr,
                             stdout_offset, stderr_offset)

    def get(self, command_id: str) -> CommandInfo:
        return CommandInfo.from_json(self._sb._t.json(
            _api.Request("GET", _api.command_path(self._sb.id, command_id))))

    def list(self) -> List[CommandInfo]:
        """Every command of the sandbox, running and ended."""
        answer = self._sb._t.json(_api.Request("GET", _api.sandbox_path(self._sb.id) + "/commands"))
        return [CommandInfo.from_json(c) for c in answer.get("commands", [])]

    def kill(self, command_id: str, signal: Union[str, int] = "KILL") -> bool:
        """Sends ``signal`` to the command; ``False`` if it had already ended or is unknown."""
        try:
            self._sb._t.json(_api.signal_request(self._sb.id, command_id, signal))
            return True
        except (NotFoundException, ConflictException):
            return False

    def send_stdin(self, command_id: str, data: Union[str, bytes], eof: bool = False) -> None:
        self._sb._t.json(_api.stdin_request(self._sb.id, command_id, data, eof))

    def read_output(self, command_id: str, stream: str = "stdout", offset: int = 0,
                    limit: Optional[int] = None, wait: Optional[float] = None) -> OutputChunk:
        """Stored output of ``stream`` from byte ``offset`` (any offset: spaced keeps the
        whole log). With ``wait``, blocks up to that many seconds for bytes past ``offset``."""
        resp = self._sb._t.send(_api.read_output_request(self._sb.id, command_id, stream, offset, limit, wait))
        return _api.output_chunk(resp.headers, resp.content, offset)


class FileStream:
    """A file's content as an iterator of byte chunks (``files.read(format="stream")``).
    Use it in a ``with`` block, or exhaust it, so the connection is released."""

    def __init__(self, cm: Any) -> None:
        self._cm = cm
        self._resp = cm.__enter__()
        self._it = self._resp.iter_bytes()

    @property
    def size(self) -> Optional[int]:
        v = self._resp.headers.get("space-file-size")
        return int(v) if v is not None else None

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        try:
            return next(self._it)
        except StopIteration:
            self.close()
            raise
        except BaseException as e:
            self._cm.__exit__(type(e), e, e.__traceback__)
            self._cm = None
            raise

    def close(self) -> None:
        if self._cm is not None:
            cm, self._cm = self._cm, None
            cm.__exit__(None, None, None)

    def __enter__(self) -> "FileStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Files:
    """``sb.files``: the sandbox's filesystem (absolute paths; they cannot leave it)."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    @overload
    def read(self, path: str, format: Literal["text"] = "text") -> str: ...
    @overload
    def read(self, path: str, format: Literal["bytes"]) -> bytes: ...
    @overload
    def read(self, path: str, format: Literal["stream"]) -> FileStream: ...

    def read(self, path: str, format: str = "text") -> Union[str, bytes, FileStream]:
        """Reads a file: ``text`` (UTF-8), ``bytes``, or ``stream`` (a :class:`FileStream`
        of chunks, for large files). A missing file raises :class:`NotFoundException`."""
        req = _api.files_request("GET", self._sb.id, "files", path, timeout=None)
        if format == "stream":
            return FileStream(self._sb._t.stream(req))
        if format not in ("text", "bytes"):
            raise ValueError("format must be 'text', 'bytes' or 'stream'")
        data = self._sb._t.send(req).content
        return data.decode("utf-8") if format == "text" else data

    def write(self, path: str, data: Union[str, bytes, IO[Any]], mode: Optional[int] = None) -> WriteInfo:
        """Writes a file (parents are created): ``str`` as UTF-8, ``bytes``, or a file object
        (streamed). ``mode`` is its permission bits (default 0644)."""
        params = [("mode", f"{mode:04o}")] if mode is not None else []
        answer = self._sb._t.json(_api.files_request(
            "PUT", self._sb.id, "files", path, params, content=_api.file_content(data),
            headers={"Content-Type": "application/octet-stream"}, timeout=300.0))
        p = answer.get("path", path)
        return WriteInfo(path=p, name=p.rstrip("/").rsplit("/", 1)[-1], size=int(answer.get("size", 0)))

    def list(self, path: str = "/", depth: int = 1) -> List[EntryInfo]:
        """The entries under a directory, ``depth`` levels deep (1: its children)."""
        answer = self._sb._t.json(_api.files_request("GET", self._sb.id, "files:list", path,
                                                     [("depth", str(int(depth)))]))
        return [EntryInfo.from_json(e) for e in answer.get("entries", [])]

    def get_info(self, path: str) -> EntryInfo:
        return EntryInfo.from_json(self._sb._t.json(_api.files_request("GET", self._sb.id, "files:stat", path)))

    def exists(self, path: str) -> bool:
        try:
            self.get_info(path)
            return True
        except NotFoundException:
            return False

    def remove(self, path: str) -> None:
        """Removes a file or a directory with everything in it."""
        self._sb._t.json(_api.files_request("DELETE", self._sb.id, "files", path, [("recursive", "1")]))

    def rename(self, old_path: str, new_path: str) -> EntryInfo:
        """Moves ``old_path`` to ``new_path`` and returns the entry at its new place."""
        self._sb._t.json(_api.Request("POST", _api.sandbox_path(self._sb.id) + "/files:rename",
                                      json={"from": old_path, "to": new_path}))
        return self.get_info(new_path)

    def make_dir(self, path: str) -> bool:
        """Creates a directory and its parents; ``False`` if it already existed."""
        if self.exists(path):
            return False
        self._sb._t.json(_api.files_request("POST", self._sb.id, "files:mkdir", path))
        return True


class Sandbox(CodeMixin):
    """A SPACE sandbox. Make one with :meth:`create` or :meth:`connect`; as a context manager
    it is killed when the block ends.

    >>> with Sandbox.create() as sb:
    ...     print(sb.commands.run("echo hi").stdout)
    hi
    """

    def __init__(self, sandbox_id: str, *, config: ConnectionConfig, info: Optional[SandboxInfo] = None,
                 token: Optional[str] = None) -> None:
        self.id = sandbox_id
        self.config = config
        self.token = token
        self._info = info
        self._t = SyncTransport(config)
        self.commands = Commands(self)
        self.files = Files(self)

    @property
    def sandbox_id(self) -> str:
        """The id (E2B's name for it)."""
        return self.id

    def __repr__(self) -> str:
        return f"Sandbox(id={self.id!r}, api_url={self.config.api_url!r})"

    @classmethod
    def create(
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
    ) -> "Sandbox":
        """Creates a sandbox and waits until it runs.

        :param template: ``name[:tag]`` or ``sha256:…`` (spaced's default: ``base:latest``).
        :param timeout: seconds until spaced deletes it (or ``on_timeout``: ``pause``,
            ``suspend``); ``set_timeout`` moves it.
        :param metadata: labels, for ``Sandbox.list(metadata=…)``.
        :param envs: environment of every command.
        :param runtime: ``oci`` (containers) or ``microvm``.
        :param network: passed to spaced as given: ``True``/``False`` or a dict of rules.
        :param snapshot: create from this snapshot instead of a template.
        :param api_url: spaced's URL (default ``$SPACE_URL``, else http://127.0.0.1:7070).
        :param api_key: the API key (default ``$SPACE_API_KEY``).
        """
        config = ConnectionConfig.resolve(api_url, api_key, request_timeout, retry_busy_for)
        body = _api.create_body(template, timeout, metadata, envs, runtime, network, snapshot, on_timeout)
        t = SyncTransport(config)
        try:
            answer = t.json(_api.create_request(body))
            sb = answer.get("sandbox") or {}
            op = _finish_operation(t, answer)
            sandbox_id = sb.get("id") or op.get("target", "")
            info = SandboxInfo.from_json(t.json(_api.Request("GET", _api.sandbox_path(sandbox_id))))
        finally:
            t.close()
        return cls(sandbox_id, config=config, info=info, token=answer.get("token"))

    @classmethod
    def connect(cls, sandbox_id: str, api_url: Optional[str] = None, api_key: Optional[str] = None,
                request_timeout: Optional[float] = None, retry_busy_for: Optional[float] = None) -> "Sandbox":
        """Attaches to an existing sandbox; a paused one is resumed and a suspended one woken."""
        sb = cls(sandbox_id, config=ConnectionConfig.resolve(api_url, api_key, request_timeout, retry_busy_for))
        try:
            info = sb.get_info()
            if info.state == "paused":
                sb.resume()
            elif info.state == "suspended":
                sb.wake()
            elif info.state in ("deleting", "deleted"):
                raise NotFoundException(f"sandbox {sandbox_id} is {info.state}", status_code=404,
                                        code="not_found")
        except BaseException:
            sb.close()
            raise
        return sb

    @classmethod
    def list(cls, metadata: Optional[Mapping[str, str]] = None, state: Optional[str] = None,
             api_url: Optional[str] = None, api_key: Optional[str] = None) -> List[SandboxInfo]:
        """The sandboxes whose metadata has every given key and value (and ``state``)."""
        t = SyncTransport(ConnectionConfig.resolve(api_url, api_key))
        try:
            answer = t.json(_api.list_request(metadata, state))
        finally:
            t.close()
        return [SandboxInfo.from_json(s) for s in answer.get("sandboxes", [])]

    def get_info(self) -> SandboxInfo:
        self._info = SandboxInfo.from_json(self._t.json(_api.Request("GET", _api.sandbox_path(self.id))))
        return self._info

    def is_running(self) -> bool:
        try:
            return self.get_info().state == "running"
        except NotFoundException:
            return False

    def kill(self, delete_snapshots: bool = False) -> bool:
        """Deletes the sandbox and waits until it is gone; ``False`` if it did not exist.
        Its snapshots are kept unless ``delete_snapshots``."""
        try:
            _finish_operation(self._t, self._t.json(_api.delete_request(self.id, delete_snapshots)))
            return True
        except NotFoundException:
            return False

    def _transition(self, action: str) -> SandboxInfo:
        _finish_operation(self._t, self._t.json(_api.lifecycle_request(self.id, action)))
        return self.get_info()

    def pause(self) -> SandboxInfo:
        """Freezes every process in memory. :class:`ConflictException` if not running."""
        return self._transition("pause")

    def resume(self) -> SandboxInfo:
        """Unfreezes a paused sandbox."""
        return self._transition("resume")

    def suspend(self) -> SandboxInfo:
        """Stops the sandbox and frees its memory, keeping its filesystem (and, where the
        runtime can, its processes); :meth:`wake` brings it back."""
        return self._transition("suspend")

    def wake(self) -> SandboxInfo:
        return self._transition("wake")

    def snapshot(self) -> SnapshotInfo:
        """Takes a snapshot; ``Sandbox.create(snapshot=…)`` starts new sandboxes from it."""
        answer = self._t.json(_api.lifecycle_request(self.id, "snapshots"))
        if answer.get("snapshot"):
            return SnapshotInfo.from_json(answer["snapshot"])
        op = _finish_operation(self._t, answer)
        sid = (op.get("result") or {}).get("snapshot_id", "")
        return SnapshotInfo.from_json(self._t.json(_api.Request("GET", "/v1/snapshots/" + _api.seg(sid))))

    def fork(self, n: int = 1) -> List["Sandbox"]:
        """``n`` copies of this sandbox (1..32), each running. If any fork fails,
        :class:`ForkException` holds the ones that started."""
        answer = self._t.json(_api.fork_request(self.id, n))
        op = _finish_operation(self._t, answer)
        results = (op.get("result") or {}).get("sandboxes") or [
            {"id": s.get("id"), "state": s.get("state"), "error": ""} for s in answer.get("sandboxes", [])]
        ok = [Sandbox(r["id"], config=self.config) for r in results if not r.get("error")]
        errors = [f"{r.get('id')}: {r['error']}" for r in results if r.get("error")]
        if errors:
            raise ForkException(f"{len(errors)} of {n} forks failed: " + "; ".join(errors),
                                sandboxes=ok, errors=errors)
        return ok

    def set_timeout(self, timeout: int, on_timeout: Optional[str] = None) -> SandboxInfo:
        """The sandbox now expires ``timeout`` seconds from now (0: never)."""
        body: Dict[str, Any] = {"timeout": int(timeout)}
        if on_timeout:
            body["on_timeout"] = on_timeout
        self._info = SandboxInfo.from_json(self._t.json(
            _api.Request("POST", _api.sandbox_path(self.id) + "/timeout", json=body)))
        return self._info

    def get_network(self) -> Dict[str, Any]:
        """The sandbox's network policy (``mode``, ``allow_out``, ``deny_out``…; secret
        values never appear), its addresses, open flows and recent decisions."""
        return self._t.json(_api.Request("GET", _api.sandbox_path(self.id) + "/network"))

    def update_network(self, policy: Mapping[str, Any]) -> Dict[str, Any]:
        """Replaces the egress rules of a running sandbox (``{"allow_out": [...],
        "deny_out": [...]}``, passed as given); new flows follow at once. A sandbox created
        with mode ``none`` cannot be given a route out (:class:`ConflictException`)."""
        return self._t.json(_api.Request("PUT", _api.sandbox_path(self.id) + "/network",
                                         json=dict(policy)))

    def close(self) -> None:
        """Releases the HTTP connections (the sandbox keeps running)."""
        self._t.close()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.kill()
        finally:
            self.close()
