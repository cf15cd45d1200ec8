"""Exceptions raised by the SDK, one per kind of failure spaced reports.

Every exception derives from :class:`SandboxException`. Failures that spaced answers carry
the HTTP ``status_code``, spaced's error ``code`` (``not_found``, ``conflict``…), its
``message`` and ``details``. The names follow the E2B SDK's, so ``except`` clauses port.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional


class SandboxException(Exception):
    """Base class of every error the SDK raises."""

    def __init__(
        self,
        message: str,
        *,
        status_code: Optional[int] = None,
        code: Optional[str] = None,
        details: Optional[Dict[str, Any]] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.code = code
        self.details: Dict[str, Any] = details or {}


class InvalidArgumentException(SandboxException):
    """spaced refused the request as malformed or invalid (400)."""


class AuthenticationException(SandboxException):
    """The API key or token is missing, wrong or expired (401)."""


class PermissionDeniedException(AuthenticationException):
    """The credential is valid but does not allow this call (403), e.g. a narrow token."""


class NotFoundException(SandboxException):
    """The sandbox, command, file, snapshot or operation does not exist (404)."""


class ConflictException(SandboxException):
    """The call does not fit the current state (409): e.g. pausing a paused sandbox,
    resuming a running one, or another operation running on the sandbox."""


class TooLargeException(SandboxException):
    """The request body is over spaced's limit (413), e.g. a file over --max-file-bytes."""


class RateLimitException(SandboxException):
    """spaced is at a limit (429) and stayed there for longer than the client retries.

    ``retry_after`` is the delay, in seconds, that spaced asked for last."""

    def __init__(self, message: str, *, retry_after: Optional[float] = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after


class TimeoutException(SandboxException):
    """A deadline passed: spaced's (504), the HTTP request's, or a command's ``timeout``
    (then ``stdout``/``stderr`` hold what it printed before it was killed)."""

    def __init__(self, message: str, *, stdout: str = "", stderr: str = "", **kw: Any) -> None:
        super().__init__(message, **kw)
        self.stdout = stdout
        self.stderr = stderr


class UnavailableException(SandboxException):
    """spaced or the sandbox cannot serve the call now (502/503, or the connection failed)."""


class InternalException(SandboxException):
    """spaced failed internally (500)."""


class CommandExitException(SandboxException):
    """A command ended unsuccessfully: a non-zero exit code, a signal (``exit_code`` -1 and
    ``signal`` set), or it could not be started (``exit_code`` -1, ``error`` says why).

    Carries what the command printed, so a failing run loses nothing."""

    def __init__(
        self,
        *,
        exit_code: int,
        stdout: str,
        stderr: str,
        error: Optional[str] = None,
        signal: Optional[int] = None,
        command_id: Optional[str] = None,
    ) -> None:
        what = error or (f"killed by signal {signal}" if signal else f"exit code {exit_code}")
        super().__init__(f"command {command_id or ''} failed: {what}".replace("  ", " "))
        self.exit_code = exit_code
        self.stdout = stdout
        self.stderr = stderr
        self.error = error
        self.signal = signal
        self.command_id = command_id


class ForkException(SandboxException):
    """Some forks failed. ``sandboxes`` holds the forks that did start (the caller owns
    them: use or kill them), ``errors`` one message per failed fork."""

    def __init__(self, message: str, *, sandboxes: List[Any], errors: List[str]) -> None:
        super().__init__(message)
        self.sandboxes = sandboxes
        self.errors = errors


_BY_STATUS = {
    400: InvalidArgumentException,
    401: AuthenticationException,
    403: PermissionDeniedException,
    404: NotFoundException,
    405: InvalidArgumentException,
    409: ConflictException,
    413: TooLargeException,
    429: RateLimitException,
    500: InternalException,
    502: UnavailableException,
    503: UnavailableException,
    504: TimeoutException,
}


def exception_for_status(status: int) -> type:
    """The exception class for an HTTP status spaced answered."""
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    return InvalidArgumentException if 400 <= status < 500 else InternalException
