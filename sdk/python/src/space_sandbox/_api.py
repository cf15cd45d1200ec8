"""The request layer shared by ``Sandbox`` and ``AsyncSandbox``.

Every call is described once here, as a :class:`Request` (method, path, query, body) plus a
parser of its answer; ``_transport`` sends it with httpx's sync or async client. So the two
front ends differ only in ``await``, never in what goes on the wire (docs/api.md)."""

from __future__ import annotations

import codecs
import json
import os
import struct
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union
from urllib.parse import quote

from .exceptions import (
    AuthenticationException,
    RateLimitException,
    SandboxException,
    UnavailableException,
    exception_for_status,
)

DEFAULT_API_URL = "http://127.0.0.1:7070"
# How long spaced is asked to hold a lifecycle call open (?wait=): capped at 5 minutes by
# spaced; longer operations are then followed through /v1/operations/{op}?wait=.
LIFECYCLE_WAIT_S = 60
# Extra time beyond a ?wait= for the HTTP answer itself.
REQUEST_SLACK_S = 30.0
DEFAULT_REQUEST_TIMEOUT_S = 60.0
# For how long 429 answers are retried (as the C++ client does): spaced answers them before
# doing any work, so a retry is always safe.
DEFAULT_RETRY_BUSY_FOR_S = 30.0
# A dropped output stream is resumed from its offsets; give up after this long without any
# progress.
FOLLOW_GIVE_UP_S = 30.0

Json = Any


@dataclass(frozen=True)
class ConnectionConfig:
    """Where spaced is and how to authenticate: ``api_url`` (default ``$SPACE_URL`` or
    http://127.0.0.1:7070) and ``api_key`` (default ``$SPACE_API_KEY``): an operator key
    (``sk-…``) or a sandbox token (``st1.…``)."""

    api_url: str
    api_key: str
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT_S
    retry_busy_for: float = DEFAULT_RETRY_BUSY_FOR_S

    @classmethod
    def resolve(
        cls,
        api_url: Optional[str] = None,
        api_key: Optional[str] = None,
        request_timeout: Optional[float] = None,
        retry_busy_for: Optional[float] = None,
    ) -> "ConnectionConfig":
        url = (api_url or os.environ.get("SPACE_URL") or DEFAULT_API_URL).rstrip("/")
        key = api_key or os.environ.get("SPACE_API_KEY") or ""
        if not key:
            raise AuthenticationException(
                "no API key: pass api_key= or set SPACE_API_KEY (spaced writes its first "
                "key to DATA_DIR/api-key)"
            )
        return cls(
            api_url=url,
            api_key=key,
            request_timeout=DEFAULT_REQUEST_TIMEOUT_S if request_timeout is None else request_timeout,
            retry_busy_for=DEFAULT_RETRY_BUSY_FOR_S if retry_busy_for is None else retry_busy_for,
        )


@dataclass
class Request:
    """One HTTP call to spaced. ``content`` is raw bytes or an (async) iterator of bytes;
    ``timeout`` is the read timeout (``None``: wait as long as it takes, for streams)."""

    method: str
    path: str
    params: List[Tuple[str, str]] = field(default_factory=list)
    json: Json = None
    content: Any = None
    headers: Dict[str, str] = field(default_factory=dict)
    timeout: Optional[float] = -1.0  # -1: the config's request_timeout

    @property
    def replayable(self) -> bool:
        """Whether the body can be sent again (a 429 retry): not for streamed uploads."""
        return self.content is None or isinstance(self.content, (bytes, bytearray, str))


def seg(s: str) -> str:
    """A path segment, escaped."""
    return quote(s, safe="")


def sandbox_path(sandbox_id: str) -> str:
    return "/v1/sandboxes/" + seg(sandbox_id)


def command_path(sandbox_id: str, command_id: str) -> str:
    return sandbox_path(sandbox_id) + "/commands/" + seg(command_id)


def wait_param(seconds: float) -> Tuple[str, str]:
    return ("wait", f"{int(seconds)}s")


# -------------------------------------------------------------------- errors


def error_from_answer(status: int, headers: Mapping[str, str], body: bytes) -> SandboxException:
    """The exception for a failed answer: spaced's ``{"error":{"code","message","details"}}``
    mapped by status (docs/api.md, Errors)."""
    code, message, details = None, "", {}
    try:
        j = json.loads(body) if body else None
        err = j.get("error") if isinstance(j, dict) else None
        if isinstance(err, dict):
            code = err.get("code")
            message = err.get("message") or ""
            details = err.get("details") or {}
    except ValueError:
        message = body[:500].decode("utf-8", "replace")
    if not message:
        message = f"spaced answered HTTP {status}"
    cls = exception_for_status(status)
    if cls is RateLimitException:
        return RateLimitException(message, retry_after=retry_after_of(headers), status_code=status,
                                  code=code, details=details)
    return cls(message, status_code=status, code=code, details=details)


def retry_after_of(headers: Mapping[str, str]) -> float:
    """Seconds to wait before retrying a 429 (its ``Retry-After``, within 1..10 s)."""
    try:
        return float(min(max(int(headers.get("retry-after", "1")), 1), 10))
    except ValueError:
        return 1.0


# -------------------------------------------------------------------- mux stream


STDOUT, STDERR, EXIT = 1, 2, 3


class MuxParser:
    """Splits ``application/vnd.space.mux`` bytes into records: ``u8 kind | u32 length LE |
    bytes``; kind 1 stdout, 2 stderr, 3 exit (the COMMAND as JSON)."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> List[Tuple[int, bytes]]:
        self._buf += data
        out: List[Tuple[int, bytes]] = []
        while len(self._buf) >= 5:
            kind = self._buf[0]
            (n,) = struct.unpack_from("<I", self._buf, 1)
            if kind not in (STDOUT, STDERR, EXIT):
                raise SandboxException(f"output stream: unknown record kind {kind}")
            if len(self._buf) < 5 + n:
                break
            out.append((kind, bytes(self._buf[5 : 5 + n])))
            del self._buf[: 5 + n]
        return out


class OutputCollector:
    """What a command printed: bytes per stream with their offsets, and incremental UTF-8
    decoding for the ``on_stdout``/``on_stderr`` callbacks (a character split across two
    records is delivered whole)."""

    def __init__(self, stdout_offset: int = 0, stderr_offset: int = 0) -> None:
        self.offsets = {STDOUT: stdout_offset, STDERR: stderr_offset}
        self.data = {STDOUT: bytearray(), STDERR: bytearray()}
        self._dec = {k: codecs.getincrementaldecoder("utf-8")("replace") for k in (STDOUT, STDERR)}

    def add(self, kind: int, data: bytes) -> str:
        """Records ``data`` and returns the text it completes."""
        self.offsets[kind] += len(data)
        self.data[kind] += data
        return self._dec[kind].decode(data)

    def flush(self, kind: int) -> str:
        return self._dec[kind].decode(b"", final=True)

    def text(self, kind: int) -> str:
        return self.data[kind].decode("utf-8", "replace")


# -------------------------------------------------------------------- request builders


def create_body(
    template: Optional[str],
    timeout: Optional[int],
    metadata: Optional[Mapping[str, str]],
    envs: Optional[Mapping[str, str]],
    runtime: Optional[str],
    network: Any,
    snapshot: Optional[str],
    on_timeout: Optional[str],
) -> Dict[str, Any]:
    """The ``POST /v1/sandboxes`` body: only what the caller gave (spaced has the defaults).
    ``network`` passes through as given (a bool, or a dict of network rules)."""
    body: Dict[str, Any] = {}
    if snapshot is not None:
        body["snapshot"] = snapshot
    if template is not None:
        body["template"] = template
    if timeout is not None:
        body["timeout"] = int(timeout)
    if on_timeout is not None:
        body["on_timeout"] = on_timeout
    if metadata:
        body["metadata"] = dict(metadata)
    if envs:
        body["env"] = dict(envs)
    if runtime is not None:
        body["runtime"] = runtime
    if network is not None:
        body["network"] = network
    return body


def create_request(body: Dict[str, Any]) -> Request:
    return Request("POST", "/v1/sandboxes", params=[wait_param(LIFECYCLE_WAIT_S)], json=body,
                   timeout=LIFECYCLE_WAIT_S + REQUEST_SLACK_S)


def list_request(metadata: Optional[Mapping[str, str]], state: Optional[str]) -> Request:
    params = [("label", f"{k}={v}") for k, v in (metadata or {}).items()]
    if state:
        params.append(("state", state))
    return Request("GET", "/v1/sandboxes", params=params)


def lifecycle_request(sandbox_id: str, action: str) -> Request:
    """pause, resume, suspend, wake, snapshots: POST with ?wait=."""
    return Request("POST", sandbox_path(sandbox_id) + "/" + action,
                   params=[wait_param(LIFECYCLE_WAIT_S)], timeout=LIFECYCLE_WAIT_S + REQUEST_SLACK_S)


def delete_request(sandbox_id: str, delete_snapshots: bool) -> Request:
    params = [wait_param(LIFECYCLE_WAIT_S)]
    if delete_snapshots:
        params.append(("delete_snapshots", "1"))
    return Request("DELETE", sandbox_path(sandbox_id), params=params,
                   timeout=LIFECYCLE_WAIT_S + REQUEST_SLACK_S)


def fork_request(sandbox_id: str, count: int) -> Request:
    return Request("POST", sandbox_path(sandbox_id) + "/fork", params=[wait_param(LIFECYCLE_WAIT_S)],
                   json={"count": int(count)}, timeout=LIFECYCLE_WAIT_S + REQUEST_SLACK_S)


def operation_request(op_id: str) -> Request:
    return Request("GET", "/v1/operations/" + seg(op_id), params=[wait_param(LIFECYCLE_WAIT_S)],
                   timeout=LIFECYCLE_WAIT_S + REQUEST_SLACK_S)


def operation_done(op: Json) -> bool:
    return isinstance(op, dict) and op.get("state") in ("succeeded", "failed")


def operation_error(op: Json) -> SandboxException:
    """The exception for a failed operation, by its error code."""
    err = op.get("error") or {}
    code = err.get("code") or "internal"
    status = {"invalid_argument": 400, "unauthenticated": 401, "permission_denied": 403,
              "not_found": 404, "conflict": 409, "too_large": 413, "resource_exhausted": 429,
              "unavailable": 503, "deadline_exceeded": 504}.get(code, 500)
    msg = f"{op.get('kind', 'operation')} {op.get('id', '')} failed: {err.get('message') or code}"
    return exception_for_status(status)(msg, status_code=status, code=code)


def command_body(
    cmd: Union[str, List[str]],
    envs: Optional[Mapping[str, str]],
    cwd: Optional[str],
    user: Optional[str],
    timeout: Optional[float],
    stdin_open: bool,
) -> Dict[str, Any]:
    """The ``POST …/commands`` body: a string runs in a shell, a list is an argv."""
    body: Dict[str, Any] = {"argv": list(cmd)} if isinstance(cmd, (list, tuple)) else {"cmd": cmd}
    if envs:
        body["env"] = dict(envs)
    if cwd:
        body["cwd"] = cwd
    if user:
        body["user"] = user
    if timeout:
        body["timeout"] = max(1, int(round(timeout)))
    if stdin_open:
        body["stdin"] = True
    return body


def start_stream_request(sandbox_id: str, body: Dict[str, Any]) -> Request:
    """Start a command and stream its output to its exit record, in one request."""
    return Request("POST", sandbox_path(sandbox_id) + "/commands", params=[("stream", "mux")],
                   json=body, headers={"Accept": "application/vnd.space.mux"}, timeout=None)


def follow_request(sandbox_id: str, command_id: str, col: OutputCollector) -> Request:
    """The mux stream of a command from the collector's offsets to its exit record."""
    return Request(
        "GET",
        command_path(sandbox_id, command_id) + "/output",
        params=[("format", "mux"), ("stdout_offset", str(col.offsets[STDOUT])),
                ("stderr_offset", str(col.offsets[STDERR]))],
        headers={"Accept": "application/vnd.space.mux"},
        timeout=None,
    )


def read_output_request(sandbox_id: str, command_id: str, stream: str, offset: int,
                        limit: Optional[int], wait: Optional[float]) -> Request:
    if stream not in ("stdout", "stderr"):
        raise ValueError("stream must be 'stdout' or 'stderr'")
    params = [("stream", stream), ("offset", str(int(offset)))]
    if limit is not None:
        params.append(("limit", str(int(limit))))
    timeout: Optional[float] = -1.0
    if wait:
        params.append(("wait", f"{int(wait * 1000)}ms"))
        timeout = wait + REQUEST_SLACK_S
    return Request("GET", command_path(sandbox_id, command_id) + "/output", params=params,
                   timeout=timeout)


def stdin_request(sandbox_id: str, command_id: str, data: Union[str, bytes], eof: bool) -> Request:
    params = [("eof", "1")] if eof else []
    content = data.encode() if isinstance(data, str) else bytes(data)
    return Request("POST", command_path(sandbox_id, command_id) + "/stdin", params=params,
                   content=content, headers={"Content-Type": "application/octet-stream"})


def signal_request(sandbox_id: str, command_id: str, signal: Union[str, int]) -> Request:
    return Request("POST", command_path(sandbox_id, command_id) + "/signal", json={"signal": signal})


def wait_command_request(sandbox_id: str, command_id: str, wait: float) -> Request:
    return Request("GET", command_path(sandbox_id, command_id), params=[wait_param(wait)],
                   timeout=wait + REQUEST_SLACK_S)


def files_request(method: str, sandbox_id: str, verb: str, path: str,
                  params: Optional[List[Tuple[str, str]]] = None, **kw: Any) -> Request:
    return Request(method, sandbox_path(sandbox_id) + "/" + verb,
                   params=[("path", path)] + (params or []), **kw)


def file_content(data: Any) -> Any:
    """A file upload's body: bytes as they are, str as UTF-8, a binary file object read in
    1 MiB pieces (streamed, never held whole)."""
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    if hasattr(data, "read"):
        def pieces():  # type: ignore[no-untyped-def]
            while True:
                b = data.read(1 << 20)
                if not b:
                    return
                yield b.encode("utf-8") if isinstance(b, str) else b
        return pieces()
    raise TypeError("data must be str, bytes or a file object opened for reading")


# -------------------------------------------------------------------- results


def command_outcome(cj: Json, col: OutputCollector) -> Tuple[Any, Optional[SandboxException]]:
    """The CommandResult of an ended COMMAND and the exception its ending calls for (or None)."""
    from .exceptions import CommandExitException, TimeoutException
    from .models import CommandResult

    stdout, stderr = col.text(STDOUT), col.text(STDERR)
    cid = cj.get("id", "")
    signal = cj.get("signal")
    exit_code = cj.get("exit_code")
    error = None
    if cj.get("state") == "failed":
        error = cj.get("reason") or "the command could not be started"
    elif cj.get("state") == "lost":
        error = cj.get("reason") or "the sandbox died under the command"
    elif signal:
        error = f"killed by signal {signal}"
    code = exit_code if isinstance(exit_code, int) else -1
    result = CommandResult(stdout=stdout, stderr=stderr, exit_code=code, error=error,
                           signal=signal, id=cid)
    if cj.get("timed_out"):
        return result, TimeoutException(f"command {cid} timed out and was killed",
                                        stdout=stdout, stderr=stderr, status_code=None,
                                        code="deadline_exceeded")
    if code != 0 or error:
        return result, CommandExitException(exit_code=code, stdout=stdout, stderr=stderr,
                                            error=error, signal=signal, command_id=cid)
    return result, None


def output_chunk(status_headers: Mapping[str, str], body: bytes, offset: int) -> Any:
    from .models import OutputChunk

    nxt = status_headers.get("space-next-offset")
    ec = status_headers.get("space-exit-code")
    return OutputChunk(
        data=body,
        next_offset=int(nxt) if nxt is not None else offset + len(body),
        state=status_headers.get("space-command-state", ""),
        exit_code=int(ec) if ec not in (None, "") else None,
    )



# -------------------------------------------------------------------- code cells

# E2B's default for run_code: a cell is interrupted after 300 s unless told otherwise.
DEFAULT_CODE_TIMEOUT_S = 300.0
# How long one request holds a cell open (?wait=) before the SDK asks again.
CODE_WAIT_S = 60
# A cell stream idles at most 15 s (spaced's keepalive); this long without a byte means the
# connection is dead, and the stream is resumed.
CODE_STREAM_IDLE_S = 60.0


def code_path(sandbox_id: str) -> str:
    return sandbox_path(sandbox_id) + "/code"


def context_id_of(context: Any) -> str:
    """A context argument: a :class:`CodeContext` (anything with an ``id``) or its id."""
    cid = context if isinstance(context, str) else getattr(context, "id", None)
    if not isinstance(cid, str) or not cid:
        raise TypeError("context must be a CodeContext or a context id (str)")
    return cid


def code_body(code: str, language: Optional[str], context: Any, timeout: Optional[float],
              envs: Optional[Mapping[str, str]]) -> Dict[str, Any]:
    """The ``POST …/code`` body. Without ``context`` the cell runs in the language's default
    context (as in E2B: state is kept between such calls); ``timeout`` ``None`` is E2B's
    300 s, ``0`` no limit."""
    if not isinstance(code, str):
        raise TypeError("code must be a str")
    if language is not None and context is not None:
        raise ValueError("give context or language, not both (a context has its language)")
    body: Dict[str, Any] = {"code": code}
    if context is not None:
        body["context"] = context_id_of(context)
    else:
        body["language"] = language or "python"
        body["context"] = "default"
    if timeout is None:
        timeout = DEFAULT_CODE_TIMEOUT_S
    if timeout:
        body["timeout_ms"] = max(1, int(round(float(timeout) * 1000)))
    if envs:
        body["env"] = dict(envs)
    return body


def run_code_request(sandbox_id: str, body: Dict[str, Any], stream: bool) -> Request:
    """Runs a cell: streamed (NDJSON events, ?stream=1), or held up to CODE_WAIT_S and then
    followed with :func:`execution_request`."""
    if stream:
        return Request("POST", code_path(sandbox_id), params=[("stream", "1")], json=body,
                       headers={"Accept": "application/x-ndjson"}, timeout=CODE_STREAM_IDLE_S)
    return Request("POST", code_path(sandbox_id), params=[wait_param(CODE_WAIT_S)], json=body,
                   timeout=CODE_WAIT_S + REQUEST_SLACK_S)


def execution_request(sandbox_id: str, cell_id: str, wait: Optional[float] = CODE_WAIT_S,
                      stream: bool = False) -> Request:
    """A cell's execution as stored (``wait``: until it ends, up to that many seconds), or
    with ``stream`` all its events again from the first."""
    path = code_path(sandbox_id) + "/" + seg(cell_id)
    if stream:
        return Request("GET", path, params=[("stream", "1")], timeout=CODE_STREAM_IDLE_S)
    params = [wait_param(wait)] if wait else []
    return Request("GET", path, params=params, timeout=(wait or 0) + REQUEST_SLACK_S)


def interrupt_cell_request(sandbox_id: str, cell_id: str) -> Request:
    return Request("POST", code_path(sandbox_id) + "/" + seg(cell_id) + "/interrupt", timeout=15.0)


def contexts_request(sandbox_id: str, method: str, context: Any = None, action: str = "",
                     body: Any = None) -> Request:
    """``…/code/contexts`` (list, create) or ``…/contexts/{ctx}[/action]``."""
    path = code_path(sandbox_id) + "/contexts"
    if context is not None:
        path += "/" + seg(context_id_of(context))
    if action:
        path += "/" + action
    return Request(method, path, json=body, timeout=90.0)


def context_body(language: Optional[str], cwd: Optional[str]) -> Dict[str, Any]:
    body: Dict[str, Any] = {"language": language or "python"}
    if cwd:
        body["cwd"] = cwd
    return body


def _nanos(ts: Any) -> int:
    """An event's ISO 8601 timestamp as Unix nanoseconds (E2B's OutputMessage.timestamp)."""
    from .models import parse_time

    try:
        t = parse_time(ts)
    except ValueError:
        return 0
    return int(t.timestamp() * 1_000_000_000) if t else 0


class CellStream:
    """Folds a cell's NDJSON event stream (``?stream=1``) into an :class:`Execution` and
    says which callbacks each event calls, as ``(name, argument)`` pairs: ``on_stdout`` and
    ``on_stderr`` get an :class:`OutputMessage`, ``on_result`` a :class:`Result`,
    ``on_error`` an :class:`ExecutionError`. The stream's last line, spaced's folded
    execution, is the answer (so an error only spaced saw, a failed runner, is reported).
    A dropped stream is read again from its start: :meth:`resume` skips the events already
    handed out."""

    def __init__(self) -> None:
        from .models import Execution

        self.execution = Execution(state="running")
        self.final: Optional[Any] = None
        self.cell_id = ""
        self._buf = bytearray()
        self._seen = 0
        self._skip = 0
        self._error_sent = False

    def resume(self) -> None:
        self._buf.clear()
        self._skip = self._seen

    def feed(self, data: bytes) -> List[Tuple[str, Any]]:
        self._buf += data
        out: List[Tuple[str, Any]] = []
        while True:
            nl = self._buf.find(b"\n")
            if nl < 0:
                return out
            line = bytes(self._buf[:nl])
            del self._buf[: nl + 1]
            out += self._event(line)

    def _event(self, line: bytes) -> List[Tuple[str, Any]]:
        from .models import Execution, ExecutionError, OutputMessage, Result

        try:
            ev = json.loads(line)
        except ValueError:
            return []
        if not isinstance(ev, dict) or ev.get("type") in (None, "keepalive"):
            return []
        kind = ev["type"]
        if kind == "execution":
            self.final = Execution.from_json(ev)
            if self.final.error is not None and not self._error_sent:
                self._error_sent = True
                return [("on_error", self.final.error)]
            return []
        if self._skip:
            self._skip -= 1
            return []
        self._seen += 1
        ex = self.execution
        if kind in ("stdout", "stderr"):
            text = ev.get("text", "") or ""
            (ex.logs.stdout if kind == "stdout" else ex.logs.stderr).append(text)
            return [("on_" + kind, OutputMessage(text, _nanos(ev.get("timestamp")), kind == "stderr"))]
        if kind == "result":
            r = Result.from_json(ev)
            ex.results.append(r)
            return [("on_result", r)]
        if kind == "error":
            ex.error = ExecutionError(ev.get("name", "") or "", ev.get("value", "") or "",
                                      ev.get("traceback", "") or "")
            self._error_sent = True
            return [("on_error", ex.error)]
        if kind == "number_of_executions":
            ex.execution_count = ev.get("execution_count")
        elif kind == "context":
            ex.context_id = ev.get("id") or None
            ex.language = ev.get("language") or None
        return []

    def result(self) -> Any:
        """The execution: spaced's folded one (its last line), else what was streamed."""
        if self.final is not None:
            return self.final
        raise UnavailableException(f"the event stream of cell {self.cell_id} ended before its end")


Callback = Callable[[str], Any]
