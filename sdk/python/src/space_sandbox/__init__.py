"""SPACE sandboxes from Python: ``Sandbox`` (sync) and ``AsyncSandbox`` (asyncio).

>>> from space_sandbox import Sandbox
>>> with Sandbox.create(timeout=300) as sb:
...     sb.files.write("/tmp/x.txt", "data")
...     print(sb.commands.run("cat /tmp/x.txt").stdout)
data

Configured by ``SPACE_URL`` and ``SPACE_API_KEY`` (or ``api_url=``/``api_key=``).
"""

from ._version import __version__
from ._api import ConnectionConfig
from .exceptions import (
    AuthenticationException,
    CommandExitException,
    ConflictException,
    ForkException,
    InternalException,
    InvalidArgumentException,
    NotFoundException,
    PermissionDeniedException,
    RateLimitException,
    SandboxException,
    TimeoutException,
    TooLargeException,
    UnavailableException,
)
from .models import (
    CodeContext,
    Context,
    Execution,
    ExecutionError,
    Logs,
    OutputMessage,
    Result,
    CommandInfo,
    CommandResult,
    EntryInfo,
    FileType,
    OutputChunk,
    SandboxInfo,
    SnapshotInfo,
    WriteInfo,
)
from .sandbox import CommandHandle, Commands, Files, FileStream, Sandbox
from .sandbox_async import (
    AsyncCommandHandle,
    AsyncCommands,
    AsyncFiles,
    AsyncFileStream,
    AsyncSandbox,
)

__all__ = [
    "__version__",
    "AsyncCommandHandle", "AsyncCommands", "AsyncFiles", "AsyncFileStream", "AsyncSandbox",
    "AuthenticationException", "CommandExitException", "CommandHandle", "CommandInfo",
    "CommandResult", "Commands", "ConflictException", "ConnectionConfig", "EntryInfo", "Files",
    "FileStream", "FileType", "ForkException", "InternalException", "InvalidArgumentException",
    "NotFoundException", "OutputChunk", "PermissionDeniedException", "RateLimitException",
    "Sandbox", "SandboxException", "SandboxInfo", "SnapshotInfo", "TimeoutException",
    "TooLargeException", "UnavailableException", "WriteInfo",
    "CodeContext", "Context", "Execution", "ExecutionError", "Logs", "OutputMessage", "Result",
]
