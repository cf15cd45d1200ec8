"""Code cells and contexts (``run_code`` and friends) of :class:`Sandbox` and
:class:`AsyncSandbox`, as mixins over the shared request layer (``_api``): the calls of
E2B's code-interpreter SDK, on spaced's ``/v1/sandboxes/{id}/code`` (docs/api.md,
docs/code-interpreter.md). The sandbox must come from the ``code-interpreter`` template.

A cell's error (an exception in the code, its ``timeout``, an interrupt) is no Python
exception here: it is ``execution.error``, as in E2B. HTTP failures raise the SDK's
exceptions. A cell is run once: a request that fails before spaced named the cell is not
sent again; once it is named, a dropped connection is resumed by its id."""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any, Awaitable, Callable, Dict, List, Mapping, Optional, Union

from . import _api
from .exceptions import SandboxException, TimeoutException, UnavailableException
from .models import CodeContext, Execution

__all__ = ["CodeMixin", "AsyncCodeMixin"]

Handler = Callable[[Any], Any]
ContextArg = Union[CodeContext, str]


def _dropped(e: SandboxException) -> bool:
    """Whether a failure is the connection's (resumable), not an answer of spaced's."""
    return isinstance(e, UnavailableException) or (isinstance(e, TimeoutException) and e.status_code is None)


class _Resume:
    """When to give up on resuming a cell that spaced has named: after FOLLOW_GIVE_UP_S
    without progress (as the command streams do)."""

    def __init__(self) -> None:
        self.last_progress, self.backoff = time.monotonic(), 0.05

    def progress(self) -> None:
        self.last_progress, self.backoff = time.monotonic(), 0.05

    def next_delay(self, e: BaseException) -> float:
        if time.monotonic() - self.last_progress >= _api.FOLLOW_GIVE_UP_S:
            raise e
        d, self.backoff = self.backoff, min(self.backoff * 2, 1.0)
        return d


def _handlers(on_stdout: Optional[Handler], on_stderr: Optional[Handler], on_result: Optional[Handler],
              on_error: Optional[Handler]) -> Dict[str, Handler]:
    hs = {"on_stdout": on_stdout, "on_stderr": on_stderr, "on_result": on_result, "on_error": on_error}
    return {k: v for k, v in hs.items() if v is not None}


class CodeMixin:
    """``run_code`` and code contexts for :class:`Sandbox`."""

    id: str
    _t: Any

    def run_code(
        self,
        code: str,
        language: Optional[str] = None,
        context: Optional[ContextArg] = None,
        timeout: Optional[float] = None,
        envs: Optional[Mapping[str, str]] = None,
        on_stdout: Optional[Handler] = None,
        on_stderr: Optional[Handler] = None,
        on_result: Optional[Handler] = None,
        on_error: Optional[Handler] = None,
    ) -> Execution:
        """Runs ``code`` in a stateful context and returns its :class:`Execution`.

        :param language: ``python`` (the default), ``javascript`` (``js``) or ``bash``: the
            cell runs in that language's default context, whose state is kept between calls.
        :param context: a :class:`CodeContext` (or its id) to run in instead; not together
            with ``language``.
        :param timeout: seconds after which the cell is interrupted (default 300, ``0`` no
            limit); it then ends with ``execution.error.name == "TimeoutError"``.
        :param envs: environment variables for this cell only.
        :param on_stdout: called with an :class:`OutputMessage` for each piece of stdout as
            the cell prints it (``on_stderr`` likewise); ``on_result`` with each
            :class:`Result`, ``on_error`` with the :class:`ExecutionError`. With any of
            them the cell's events are streamed.
        :returns: the execution; an error in the cell is ``execution.error``, not raised.
            ``KeyboardInterrupt`` during the call interrupts the cell, then propagates.
        """
        body = _api.code_body(code, language, context, timeout, envs)
        hs = _handlers(on_stdout, on_stderr, on_result, on_error)
        return self._stream_cell(body, hs) if hs else self._wait_cell(body)

    def _wait_cell(self, body: Dict[str, Any]) -> Execution:
        t, cell_id = self._t, ""
        try:
            j = t.json(_api.run_code_request(self.id, body, stream=False))
            cell_id = j.get("id", "")
            resume = _Resume()
            while j.get("state") == "running":
                try:
                    j = t.json(_api.execution_request(self.id, cell_id))
                    resume.progress()
                except SandboxException as e:
                    if not _dropped(e):
                        raise
                    time.sleep(resume.next_delay(e))
        except KeyboardInterrupt:
            self._interrupt_quietly(cell_id)
            raise
        return Execution.from_json(j)

    def _stream_cell(self, body: Dict[str, Any], hs: Dict[str, Handler]) -> Execution:
        t, cs = self._t, _api.CellStream()
        req = _api.run_code_request(self.id, body, stream=True)
        resume = _Resume()
        try:
            while True:
                try:
                    with t.stream(req) as resp:
                        if not cs.cell_id:
                            cs.cell_id = resp.headers.get("space-command-id", "")
                            if not cs.cell_id:
                                raise SandboxException("spaced sent no Space-Command-Id")
                        for piece in resp.iter_raw():
                            resume.progress()
                            for name, arg in cs.feed(piece):
                                if name in hs:
                                    hs[name](arg)
                    return cs.result()
                except SandboxException as e:
                    if not cs.cell_id or not _dropped(e):
                        raise  # never start a cell twice
                    time.sleep(resume.next_delay(e))
                    cs.resume()
                    req = _api.execution_request(self.id, cs.cell_id, stream=True)
        except KeyboardInterrupt:
            self._interrupt_quietly(cs.cell_id)
            raise

    def _interrupt_quietly(self, cell_id: str) -> None:
        if cell_id:
            try:
                self._t.json(_api.interrupt_cell_request(self.id, cell_id))
            except SandboxException:
                pass

    def get_execution(self, execution_id: str, wait: Optional[float] = None) -> Execution:
        """A cell's execution by its id (``execution.id``), also while it runs or after a
        restart of spaced; ``wait`` (seconds, up to 300) waits for it to end first."""
        return Execution.from_json(self._t.json(_api.execution_request(self.id, execution_id, wait)))

    def interrupt_code(self, execution: Union[Execution, str]) -> None:
        """Interrupts a running cell (its :class:`Execution` or id): it ends with
        ``KeyboardInterrupt``; its context keeps its state."""
        eid = execution if isinstance(execution, str) else execution.id
        self._t.json(_api.interrupt_cell_request(self.id, eid))

    def create_code_context(self, language: Optional[str] = "python", cwd: Optional[str] = None) -> CodeContext:
        """A new context (``python``, ``javascript`` or ``bash``) starting in ``cwd``."""
        return CodeContext.from_json(self._t.json(_api.contexts_request(
            self.id, "POST", body=_api.context_body(language, cwd))))

    def list_code_contexts(self) -> List[CodeContext]:
        """The sandbox's contexts, the default ones included, oldest first."""
        answer = self._t.json(_api.contexts_request(self.id, "GET"))
        return [CodeContext.from_json(c) for c in answer.get("contexts", [])]

    def restart_code_context(self, context: ContextArg) -> None:
        """Starts the context's interpreter afresh (same id and cwd; its state is gone)."""
        self._t.json(_api.contexts_request(self.id, "POST", context, "restart"))

    def interrupt_code_context(self, context: ContextArg) -> None:
        """Interrupts the cell running in the context, if any."""
        self._t.json(_api.contexts_request(self.id, "POST", context, "interrupt"))

    def remove_code_context(self, context: ContextArg) -> None:
        """Deletes the context (a running cell ends with ``ContextDeleted``)."""
        self._t.json(_api.contexts_request(self.id, "DELETE", context))


async def _call(cb: Handler, arg: Any) -> None:
    r = cb(arg)
    if inspect.isawaitable(r):
        await r


class AsyncCodeMixin:
    """``run_code`` and code contexts for :class:`AsyncSandbox` (callbacks may be coroutine
    functions)."""

    id: str
    _t: Any

    async def run_code(
        self,
        code: str,
        language: Optional[str] = None,
        context: Optional[ContextArg] = None,
        timeout: Optional[float] = None,
        envs: Optional[Mapping[str, str]] = None,
        on_stdout: Optional[Handler] = None,
        on_stderr: Optional[Handler] = None,
        on_result: Optional[Handler] = None,
        on_error: Optional[Handler] = None,
    ) -> Execution:
        """As ``Sandbox.run_code``; cancelling the call interrupts the cell."""
        body = _api.code_body(code, language, context, timeout, envs)
        hs = _handlers(on_stdout, on_stderr, on_result, on_error)
        return await (self._stream_cell(body, hs) if hs else self._wait_cell(body))

    async def _wait_cell(self, body: Dict[str, Any]) -> Execution:
        t, cell_id = self._t, ""
        try:
            j = await t.json(_api.run_code_request(self.id, body, stream=False))
            cell_id = j.get("id", "")
            resume = _Resume()
            while j.get("state") == "running":
                try:
                    j = await t.json(_api.execution_request(self.id, cell_id))
                    resume.progress()
                except SandboxException as e:
                    if not _dropped(e):
                        raise
                    await asyncio.sleep(resume.next_delay(e))
        except asyncio.CancelledError:
            await self._interrupt_quietly(cell_id)
            raise
        return Execution.from_json(j)

    async def _stream_cell(self, body: Dict[str, Any], hs: Dict[str, Handler]) -> Execution:
        t, cs = self._t, _api.CellStream()
        req = _api.run_code_request(self.id, body, stream=True)
        resume = _Resume()
        try:
            while True:
                try:
                    async with t.stream(req) as resp:
                        if not cs.cell_id:
                            cs.cell_id = resp.headers.get("space-command-id", "")
                            if not cs.cell_id:
                                raise SandboxException("spaced sent no Space-Command-Id")
                        async for piece in resp.aiter_raw():
                            resume.progress()
                            for name, arg in cs.feed(piece):
                                if name in hs:
                                    await _call(hs[name], arg)
                    return cs.result()
                except SandboxException as e:
                    if not cs.cell_id or not _dropped(e):
                        raise
                    await asyncio.sleep(resume.next_delay(e))
                    cs.resume()
                    req = _api.execution_request(self.id, cs.cell_id, stream=True)
        except asyncio.CancelledError:
            await self._interrupt_quietly(cs.cell_id)
            raise

    async def _interrupt_quietly(self, cell_id: str) -> None:
        if cell_id:
            try:
                await self._t.json(_api.interrupt_cell_request(self.id, cell_id))
            except SandboxException:
                pass

    async def get_execution(self, execution_id: str, wait: Optional[float] = None) -> Execution:
        return Execution.from_json(await self._t.json(_api.execution_request(self.id, execution_id, wait)))

    async def interrupt_code(self, execution: Union[Execution, str]) -> None:
        eid = execution if isinstance(execution, str) else execution.id
        await self._t.json(_api.interrupt_cell_request(self.id, eid))

    async def create_code_context(self, language: Optional[str] = "python", cwd: Optional[str] = None) -> CodeContext:
        return CodeContext.from_json(await self._t.json(_api.contexts_request(
            self.id, "POST", body=_api.context_body(language, cwd))))

    async def list_code_contexts(self) -> List[CodeContext]:
        answer = await self._t.json(_api.contexts_request(self.id, "GET"))
        return [CodeContext.from_json(c) for c in answer.get("contexts", [])]

    async def restart_code_context(self, context: ContextArg) -> None:
        await self._t.json(_api.contexts_request(self.id, "POST", context, "restart"))

    async def interrupt_code_context(self, context: ContextArg) -> None:
        await self._t.json(_api.contexts_request(self.id, "POST", context, "interrupt"))

    async def remove_code_context(self, context: ContextArg) -> None:
        await self._t.json(_api.contexts_request(self.id, "DELETE", context))
