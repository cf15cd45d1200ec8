"""Sends the ``_api.Request`` descriptions with httpx, sync or async (one code path each).

Both retry 429 answers for ``retry_busy_for`` seconds, waiting what ``Retry-After`` says
(spaced refuses such requests before doing any work, so the retry is safe; streamed uploads
cannot be replayed and are not retried), and turn failures into the SDK's exceptions."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, AsyncIterator, Iterator, Optional

import httpx

from ._version import __version__
from ._api import ConnectionConfig, Request, error_from_answer, retry_after_of
from .exceptions import RateLimitException, SandboxException, TimeoutException, UnavailableException


def _headers(config: ConnectionConfig) -> dict:
    return {"Authorization": f"Bearer {config.api_key}", "User-Agent": f"space-sandbox-python/{__version__}"}


def _timeout(config: ConnectionConfig, req: Request) -> httpx.Timeout:
    read = config.request_timeout if req.timeout == -1.0 else req.timeout
    return httpx.Timeout(connect=10.0, read=read, write=config.request_timeout, pool=config.request_timeout)



def transport_error(e: httpx.HTTPError, req: Request) -> SandboxException:
    """The SDK exception for an httpx failure that is no HTTP answer."""
    what = f"{req.method} {req.path}"
    if isinstance(e, httpx.TimeoutException):
        return TimeoutException(f"{what}: request timed out ({e.__class__.__name__})")
    return UnavailableException(f"{what}: {e.__class__.__name__}: {e}")


def _busy_exhausted(resp: httpx.Response, body: bytes) -> RateLimitException:
    err = error_from_answer(resp.status_code, resp.headers, body)
    assert isinstance(err, RateLimitException)
    return err


class SyncTransport:
    """httpx.Client against one spaced."""

    def __init__(self, config: ConnectionConfig) -> None:
        self.config = config
        # trust_env=False: spaced is addressed directly, as the CLI does; a proxy from the
        # environment must not capture long-lived output streams.
        self._client = httpx.Client(base_url=config.api_url, headers=_headers(config), trust_env=False)

    def close(self) -> None:
        self._client.close()

    @contextlib.contextmanager
    def stream(self, req: Request) -> Iterator[httpx.Response]:
        """The answer with its body unread; raises the SDK exception for a failure status."""
        until = time.monotonic() + self.config.retry_busy_for
        while True:
            try:
                with self._client.stream(req.method, req.path, params=req.params or None,
                                         json=req.json, content=req.content,
                                         headers=req.headers or None,
                                         timeout=_timeout(self.config, req)) as resp:
                    if resp.status_code == 429 and req.replayable and time.monotonic() < until:
                        delay = min(retry_after_of(resp.headers), max(0.0, until - time.monotonic()))
                        resp.read()
                    elif resp.status_code >= 400:
                        body = resp.read()
                        raise error_from_answer(resp.status_code, resp.headers, body)
                    else:
                        yield resp
                        return
            except httpx.HTTPError as e:
                raise transport_error(e, req) from e
            time.sleep(delay)

    def send(self, req: Request) -> httpx.Response:
        """The whole answer (read); raises for a failure status."""
        with self.stream(req) as resp:
            resp.read()
            return resp

    def json(self, req: Request) -> Any:
        resp = self.send(req)
        return resp.json() if resp.content.strip() else {}


class AsyncTransport:
    """httpx.AsyncClient against one spaced (asyncio)."""

    def __init__(self, config: ConnectionConfig) -> None:
        self.config = config
        self._client = httpx.AsyncClient(base_url=config.api_url, headers=_headers(config), trust_env=False)

    async def close(self) -> None:
        await self._client.aclose()

    @contextlib.asynccontextmanager
    async def stream(self, req: Request) -> AsyncIterator[httpx.Response]:
        until = time.monotonic() + self.config.retry_busy_for
        while True:
            try:
                async with self._client.stream(req.method, req.path, params=req.params or None,
                                               json=req.json, content=req.content,
                                               headers=req.headers or None,
                                               timeout=_timeout(self.config, req)) as resp:
                    if resp.status_code == 429 and req.replayable and time.monotonic() < until:
                        delay = min(retry_after_of(resp.headers), max(0.0, until - time.monotonic()))
                        await resp.aread()
                    elif resp.status_code >= 400:
                        body = await resp.aread()
                        raise error_from_answer(resp.status_code, resp.headers, body)
                    else:
                        yield resp
                        return
            except httpx.HTTPError as e:
                raise transport_error(e, req) from e
            await asyncio.sleep(delay)

    async def send(self, req: Request) -> httpx.Response:
        async with self.stream(req) as resp:
            await resp.aread()
            return resp

    async def json(self, req: Request) -> Any:
        resp = await self.send(req)
        return resp.json() if resp.content.strip() else {}
