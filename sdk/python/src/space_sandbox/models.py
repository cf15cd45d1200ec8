"""The objects the SDK returns: plain dataclasses built from spaced's JSON (docs/api.md).

Each keeps the JSON it came from in ``raw``, so fields spaced adds later are not lost."""

from __future__ import annotations

import json as _json
import stat as _stat
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any, Dict, List, Optional


def parse_time(value: Any) -> Optional[datetime]:
    """An RFC 3339 timestamp from spaced (``2026-11-30T10:00:00.000Z``) as an aware datetime."""
    if not isinstance(value, str) or not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


@dataclass
class SandboxInfo:
    """A sandbox record: ``GET /v1/sandboxes/{id}``."""

    id: str
    state: str
    template: str
    metadata: Dict[str, str]
    envs: Dict[str, str]
    runtime: str
    network: Any
    timeout: int
    on_timeout: str
    expires_at: Optional[datetime]
    created_at: Optional[datetime]
    reason: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def sandbox_id(self) -> str:
        """The id (E2B's name for it)."""
        return self.id

    @property
    def started_at(self) -> Optional[datetime]:
        """When the sandbox was created (E2B's name)."""
        return self.created_at

    @property
    def end_at(self) -> Optional[datetime]:
        """When the sandbox's timeout expires (E2B's name); ``None`` without a timeout."""
        return self.expires_at

    @classmethod
    def from_json(cls, j: Dict[str, Any]) -> "SandboxInfo":
        return cls(
            id=j.get("id", ""),
            state=j.get("state", ""),
            template=j.get("template", ""),
            metadata=dict(j.get("metadata") or {}),
            envs=dict(j.get("env") or {}),
            runtime=j.get("runtime", ""),
            network=j.get("network"),
            timeout=int(j.get("timeout") or 0),
            on_timeout=j.get("on_timeout", ""),
            expires_at=parse_time(j.get("expires_at")),
            created_at=parse_time(j.get("created_at")),
            reason=j.get("reason", "") or "",
            raw=j,
        )


@dataclass
class SnapshotInfo:
    """A snapshot: ``GET /v1/snapshots/{sid}``. Create a sandbox from it with
    ``Sandbox.create(snapshot=info.id)``."""

    id: str
    sandbox_id: str
    kind: str
    state: str
    template: str
    size: int
    created_at: Optional[datetime]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, j: Dict[str, Any]) -> "SnapshotInfo":
        return cls(
            id=j.get("id", ""),
            sandbox_id=j.get("sandbox_id", ""),
            kind=j.get("kind", ""),
            state=j.get("state", ""),
            template=j.get("template", ""),
            size=int(j.get("size") or 0),
            created_at=parse_time(j.get("created_at")),
            raw=j,
        )


@dataclass
class CommandInfo:
    """A command session: ``GET /v1/sandboxes/{id}/commands/{cid}``.

    ``state`` is ``running``, ``exited`` (see ``exit_code``/``signal``), ``failed`` (could not
    start: ``reason``) or ``lost`` (its sandbox died under it)."""

    id: str
    sandbox_id: str
    state: str
    exit_code: Optional[int]
    signal: Optional[int]
    timed_out: bool
    reason: str
    pid: Optional[int]
    cmd: Optional[str]
    argv: Optional[List[str]]
    stdout_size: int
    stderr_size: int
    started_at: Optional[datetime]
    ended_at: Optional[datetime]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def ended(self) -> bool:
        return self.state != "running"

    @classmethod
    def from_json(cls, j: Dict[str, Any]) -> "CommandInfo":
        return cls(
            id=j.get("id", ""),
            sandbox_id=j.get("sandbox_id", ""),
            state=j.get("state", ""),
            exit_code=j.get("exit_code"),
            signal=j.get("signal"),
            timed_out=bool(j.get("timed_out")),
            reason=j.get("reason", "") or "",
            pid=j.get("pid"),
            cmd=j.get("cmd"),
            argv=j.get("argv"),
            stdout_size=int(j.get("stdout_size") or 0),
            stderr_size=int(j.get("stderr_size") or 0),
            started_at=parse_time(j.get("started_at")),
            ended_at=parse_time(j.get("ended_at")),
            raw=j,
        )


@dataclass
class CommandResult:
    """What a finished command printed and how it ended. ``exit_code`` is -1 when the
    command was killed by a signal (``signal``) or could not be started (``error``)."""

    stdout: str
    stderr: str
    exit_code: int
    error: Optional[str] = None
    signal: Optional[int] = None
    id: str = ""


@dataclass
class OutputChunk:
    """A piece of a command's stored output: ``commands.read_output``.

    ``next_offset`` is where the next read of that stream starts; ``state`` and ``exit_code``
    are the command's at the time of the read."""

    data: bytes
    next_offset: int
    state: str
    exit_code: Optional[int]


class FileType(str, Enum):
    """The type of a filesystem entry; compares equal to its string value (``"file"``…)."""

    FILE = "file"
    DIR = "dir"
    SYMLINK = "symlink"
    OTHER = "other"


@dataclass
class EntryInfo:
    """A filesystem entry inside a sandbox: ``files.list``, ``files.get_info``."""

    name: str
    path: str
    type: FileType
    size: int
    mode: int
    permissions: str
    modified_time: Optional[datetime]
    uid: int
    gid: int
    symlink_target: Optional[str]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, j: Dict[str, Any]) -> "EntryInfo":
        try:
            ftype = FileType(j.get("type", "other"))
        except ValueError:
            ftype = FileType.OTHER
        mode = j.get("mode", 0)
        if isinstance(mode, str):
            mode = int(mode, 8)
        mode = int(mode or 0)
        kind = {FileType.FILE: _stat.S_IFREG, FileType.DIR: _stat.S_IFDIR,
                FileType.SYMLINK: _stat.S_IFLNK}.get(ftype, 0)
        mtime = j.get("mtime_ms")
        return cls(
            name=j.get("name", ""),
            path=j.get("path", ""),
            type=ftype,
            size=int(j.get("size") or 0),
            mode=mode & 0o7777,
            permissions=_stat.filemode(kind | (mode & 0o7777)),
            modified_time=datetime.fromtimestamp(mtime / 1000).astimezone() if mtime else None,
            uid=int(j.get("uid") or 0),
            gid=int(j.get("gid") or 0),
            symlink_target=j.get("link_target") or None,
            raw=j,
        )


@dataclass
class WriteInfo:
    """A written file: its ``path``, ``name`` and the ``size`` written."""

    path: str
    name: str
    size: int


# -------------------------------------------------------------------- code cells


@dataclass
class OutputMessage:
    """A piece of a cell's stdout or stderr, as handed to ``on_stdout``/``on_stderr``
    (E2B's shape): ``line`` is the text, ``timestamp`` the Unix time in nanoseconds when the
    kernel saw it, ``error`` true for stderr. ``str(msg)`` is the text."""

    line: str
    timestamp: int = 0
    error: bool = False

    def __str__(self) -> str:
        return self.line


@dataclass
class ExecutionError:
    """The error a cell ended with: the exception's ``name`` (``NameError``,
    ``TimeoutError``, ``KeyboardInterrupt``…), its ``value`` (message) and ``traceback``."""

    name: str
    value: str
    traceback: str

    def to_json(self) -> str:
        return _json.dumps({"name": self.name, "value": self.value, "traceback": self.traceback})


_RESULT_FORMATS = ("text", "html", "markdown", "svg", "png", "jpeg", "pdf", "latex", "json",
                   "javascript", "data")


@dataclass
class Result:
    """One rich output of a cell: the value of its last expression (``is_main_result``) or
    a ``display()`` such as a matplotlib figure. Each format is ``None`` when absent:
    ``text``, ``html``, ``markdown``, ``svg``, ``png`` and ``jpeg`` (base64), ``pdf``,
    ``latex``, ``json`` (a JSON value), ``javascript``, ``data`` (a pandas DataFrame as
    ``{column: [values]}``); ``extra`` holds other MIME types as ``{mime: value}``."""

    text: Optional[str] = None
    html: Optional[str] = None
    markdown: Optional[str] = None
    svg: Optional[str] = None
    png: Optional[str] = None
    jpeg: Optional[str] = None
    pdf: Optional[str] = None
    latex: Optional[str] = None
    json: Any = None
    javascript: Optional[str] = None
    data: Any = None
    is_main_result: bool = False
    extra: Optional[Dict[str, Any]] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    def __getitem__(self, item: str) -> Any:
        return getattr(self, item)

    def formats(self) -> List[str]:
        """The formats present (``["text", "png"]``…), then the ``extra`` MIME types."""
        out = [f for f in _RESULT_FORMATS if getattr(self, f) is not None]
        return out + list(self.extra or {})

    def __repr__(self) -> str:
        if self.text is not None:
            return f"Result({self.text})"
        return "Result(Formats: " + ", ".join(self.formats()) + ")"

    __str__ = __repr__

    def _repr_html_(self) -> Optional[str]:
        return self.html

    def _repr_markdown_(self) -> Optional[str]:
        return self.markdown

    def _repr_svg_(self) -> Optional[str]:
        return self.svg

    def _repr_png_(self) -> Optional[str]:
        return self.png

    def _repr_jpeg_(self) -> Optional[str]:
        return self.jpeg

    def _repr_latex_(self) -> Optional[str]:
        return self.latex

    def _repr_json_(self) -> Any:
        return self.json

    @classmethod
    def from_json(cls, j: Dict[str, Any]) -> "Result":
        kw = {f: j.get(f) for f in _RESULT_FORMATS}
        return cls(**kw, is_main_result=bool(j.get("is_main_result")), extra=j.get("extra") or None,
                   raw={k: v for k, v in j.items() if k != "type"})


@dataclass
class Logs:
    """What a cell printed: ``stdout`` and ``stderr`` as lists of the pieces, in order."""

    stdout: List[str] = field(default_factory=list)
    stderr: List[str] = field(default_factory=list)

    def to_json(self) -> str:
        return _json.dumps({"stdout": self.stdout, "stderr": self.stderr})


@dataclass
class CodeContext:
    """A code context: one interpreter (``python``, ``javascript`` or ``bash``) whose state
    is kept between the cells run in it (``run_code(..., context=ctx)``)."""

    id: str
    language: str = ""
    cwd: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, j: Dict[str, Any]) -> "CodeContext":
        return cls(id=j.get("id", ""), language=j.get("language", "") or "", cwd=j.get("cwd", "") or "",
                   raw=j)


Context = CodeContext
"""E2B's name for :class:`CodeContext`."""


@dataclass
class Execution:
    """A finished cell: ``results`` (rich outputs; ``text`` is the main result's text),
    ``logs`` (stdout/stderr pieces), ``error`` (an :class:`ExecutionError`, or ``None``),
    ``execution_count`` (the context's cell number), ``context_id`` and ``id`` (spaced's id
    of the cell: ``get_execution(id)`` reads it again, even after a restart of spaced)."""

    results: List[Result] = field(default_factory=list)
    logs: Logs = field(default_factory=Logs)
    error: Optional[ExecutionError] = None
    execution_count: Optional[int] = None
    context_id: Optional[str] = None
    language: Optional[str] = None
    id: str = ""
    state: str = "done"
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def text(self) -> Optional[str]:
        """The text of the main result (the cell's last expression), or ``None``."""
        for r in self.results:
            if r.is_main_result:
                return r.text
        return None

    def __repr__(self) -> str:
        return f"Execution(Results: {self.results}, Logs: {self.logs}, Error: {self.error})"

    def to_json(self) -> str:
        return _json.dumps({
            "results": [dict(r.raw) for r in self.results],
            "logs": {"stdout": self.logs.stdout, "stderr": self.logs.stderr},
            "error": None if self.error is None else {
                "name": self.error.name, "value": self.error.value, "traceback": self.error.traceback},
            "execution_count": self.execution_count,
        })

    @classmethod
    def from_json(cls, j: Dict[str, Any]) -> "Execution":
        """From spaced's folded execution (``POST …/code``, ``GET …/code/{id}``)."""
        logs = j.get("logs") or {}
        err = j.get("error")
        ctx = j.get("context") or {}
        return cls(
            results=[Result.from_json(r) for r in j.get("results") or [] if isinstance(r, dict)],
            logs=Logs(stdout=list(logs.get("stdout") or []), stderr=list(logs.get("stderr") or [])),
            error=ExecutionError(err.get("name", "") or "", err.get("value", "") or "",
                                 err.get("traceback", "") or "") if isinstance(err, dict) else None,
            execution_count=j.get("execution_count"),
            context_id=ctx.get("id") or None,
            language=ctx.get("language") or None,
            id=j.get("id", "") or "",
            state=j.get("state", "") or "",
            raw=j,
        )
