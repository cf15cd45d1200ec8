"""The objects the SDK returns: plain dataclasses built from spaced's JSON (docs/api.md).

Each keeps the JSON it came from in ``raw``, so fields spaced adds later are not lost."""

from __future__ import annotations

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
