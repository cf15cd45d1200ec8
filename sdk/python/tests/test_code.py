"""run_code and code contexts (Sandbox and AsyncSandbox) against a real spaced, in sandboxes
of the built-in code-interpreter template (ensured once per session by conftest)."""

import asyncio
import base64
import threading
import time

import pytest

from conftest import RUN
from space_sandbox import (
    AsyncSandbox,
    CodeContext,
    ConflictException,
    Execution,
    InvalidArgumentException,
    NotFoundException,
    OutputMessage,
    Result,
)

PLOT = """
import matplotlib.pyplot as plt
plt.plot([1, 2, 3], [1, 4, 9])
plt.title("squares")
plt.show()
"""


# ---------------------------------------------------------------- sync


def test_state_is_kept_between_calls(code_sb):
    first = code_sb.run_code("x = 41\nprint('set')")
    assert isinstance(first, Execution)
    assert first.error is None and first.results == [] and first.text is None
    assert first.logs.stdout == ["set\n"] and first.logs.stderr == []
    assert first.id.startswith("cmd-") and first.context_id
    second = code_sb.run_code("x + 1")
    assert second.error is None, second.error
    assert second.text == "42"
    assert [r.is_main_result for r in second.results] == [True]
    assert second.context_id == first.context_id
    assert second.execution_count == first.execution_count + 1
    # The same cell, read again by its id.
    again = code_sb.get_execution(second.id)
    assert (again.text, again.execution_count, again.state) == ("42", second.execution_count, "done")


def test_rich_results_and_json(code_sb):
    ex = code_sb.run_code(PLOT)
    assert ex.error is None, ex.error
    figs = [r for r in ex.results if r.png]
    assert len(figs) == 1, ex.results
    fig = figs[0]
    assert not fig.is_main_result and "png" in fig.formats()
    assert fig.text.startswith("<Figure"), fig.text
    assert base64.b64decode(fig.png).startswith(b"\x89PNG\r\n\x1a\n")
    assert ex.text is None  # no last expression: no main result

    d = code_sb.run_code("{'a': [1, 2], 'b': 'c'}")
    assert d.results[0].json == {"a": [1, 2], "b": "c"}, d.results
    h = code_sb.run_code("from IPython.display import HTML\nHTML('<b>bold</b>')")
    assert h.results[0].html == "<b>bold</b>" and h.results[0]["html"] == "<b>bold</b>"


def test_cell_errors_are_returned_not_raised(code_sb):
    ex = code_sb.run_code("print('before')\n1 / 0")
    assert ex.error is not None
    assert ex.error.name == "ZeroDivisionError"
    assert "division by zero" in ex.error.value
    assert "ZeroDivisionError" in ex.error.traceback
    assert ex.logs.stdout == ["before\n"] and ex.text is None
    assert code_sb.run_code("undefined_name").error.name == "NameError"
    assert code_sb.run_code("class Boom(Exception): pass\nraise Boom('x')").error.name == "Boom"
    # The context lives on.
    assert code_sb.run_code("6 * 7").text == "42"


def test_javascript_and_bash(code_sb):
    ex = code_sb.run_code("const a = 20\nconsole.log('js says', a)\na * 2 + 2", language="javascript")
    assert ex.error is None, ex.error
    assert ex.text == "42" and ex.logs.stdout == ["js says 20\n"]
    assert ex.language == "javascript"
    assert code_sb.run_code("a", language="javascript").text == "20"  # its default context
    err = code_sb.run_code("null.x", language="javascript").error
    assert err is not None and err.name == "TypeError", err
    sh = code_sb.run_code("V=7; echo v=$V", language="bash")
    assert sh.error is None and sh.logs.stdout == ["v=7\n"], sh
    assert code_sb.run_code("echo again $V", language="bash").logs.stdout == ["again 7\n"]


def test_callbacks_stream_stdout_and_stderr_in_order(code_sb):
    events, seen_at = [], {}
    code = ("import sys, time\n"
            "print('one', flush=True)\n"
            "print('two', file=sys.stderr, flush=True)\n"
            "time.sleep(0.3)\n"
            "print('three', flush=True)\n"
            "time.sleep(2)\n"
            "print('four', file=sys.stderr, flush=True)\n"
            "'done'")

    def on_out(m):
        assert isinstance(m, OutputMessage) and not m.error
        events.append(("out", str(m)))
        seen_at.setdefault(m.line, time.monotonic())

    def on_err(m):
        assert m.error
        events.append(("err", m.line))

    results = []
    ex = code_sb.run_code(code, on_stdout=on_out, on_stderr=on_err, on_result=results.append)
    ended = time.monotonic()
    assert events == [("out", "one\n"), ("err", "two\n"), ("out", "three\n"), ("err", "four\n")]
    assert ex.logs.stdout == ["one\n", "three\n"] and ex.logs.stderr == ["two\n", "four\n"]
    # Delivered as the cell printed, not at its end.
    assert ended - seen_at["three\n"] > 1.5, (ended, seen_at)
    assert [r.text for r in results] == ["done"] and isinstance(results[0], Result)
    assert ex.text == "done" and ex.error is None and ex.id.startswith("cmd-")

    errors = []
    ex = code_sb.run_code("raise ValueError('bad value')", on_error=errors.append)
    assert [e.name for e in errors] == ["ValueError"] and ex.error.value == "bad value"


def test_contexts_create_list_restart_remove(code_sb):
    ctx = code_sb.create_code_context(cwd="/tmp")
    assert isinstance(ctx, CodeContext) and ctx.id and ctx.language == "python"
    assert ctx.cwd == "/tmp"
    assert code_sb.run_code("import os; os.getcwd()", context=ctx).text == "/tmp"
    code_sb.run_code("z = 5", context=ctx)
    assert code_sb.run_code("z", context=ctx.id).text == "5"  # by id as well
    # Its state is its own.
    assert code_sb.run_code("z").error.name == "NameError"
    js = code_sb.create_code_context("javascript")
    assert js.language == "javascript"
    assert code_sb.run_code("let k = 3; k", context=js).text == "3"
    listed = {c.id: c for c in code_sb.list_code_contexts()}
    assert ctx.id in listed and js.id in listed
    assert listed[ctx.id].language == "python" and listed[js.id].language == "javascript"

    code_sb.restart_code_context(ctx)
    assert code_sb.run_code("z", context=ctx).error.name == "NameError"
    assert code_sb.run_code("import os; os.getcwd()", context=ctx).text == "/tmp"

    code_sb.remove_code_context(ctx)
    code_sb.remove_code_context(js.id)
    ids = {c.id for c in code_sb.list_code_contexts()}
    assert ctx.id not in ids and js.id not in ids
    with pytest.raises(NotFoundException):
        code_sb.restart_code_context(ctx)
    with pytest.raises(NotFoundException):
        code_sb.remove_code_context(ctx.id)
    gone = code_sb.run_code("1", context=ctx)
    assert gone.error is not None, gone


def test_timeout_interrupts_the_cell_and_keeps_the_context(code_sb):
    ctx = code_sb.create_code_context()
    code_sb.run_code("kept = 'yes'", context=ctx)
    t0 = time.monotonic()
    ex = code_sb.run_code("import time\nprint('before', flush=True)\ntime.sleep(60)\nprint('after')",
                          context=ctx, timeout=1.5)
    took = time.monotonic() - t0
    assert ex.error is not None and ex.error.name == "TimeoutError", ex.error
    assert ex.logs.stdout == ["before\n"]
    assert 1.4 < took < 20, took
    assert code_sb.run_code("kept", context=ctx).text == "yes"
    # A streamed cell times out the same way.
    out = []
    ex = code_sb.run_code("import time\nprint('s', flush=True)\ntime.sleep(60)", context=ctx,
                          timeout=1, on_stdout=out.append)
    assert ex.error.name == "TimeoutError" and [m.line for m in out] == ["s\n"]
    code_sb.remove_code_context(ctx)


def test_interrupt_a_context(code_sb):
    ctx = code_sb.create_code_context()
    box = {}
    started = threading.Event()
    th = threading.Thread(target=lambda: box.update(ex=code_sb.run_code(
        "import time\nprint('go', flush=True)\ntime.sleep(60)", context=ctx,
        on_stdout=lambda m: started.set())))
    th.start()
    assert started.wait(30), "the cell did not start"
    code_sb.interrupt_code_context(ctx)
    th.join(30)
    assert not th.is_alive()
    assert box["ex"].error.name == "KeyboardInterrupt", box["ex"].error
    assert code_sb.run_code("2 + 2", context=ctx).text == "4"
    code_sb.remove_code_context(ctx)


def test_bad_calls_raise(code_sb, make_sandbox):
    with pytest.raises(InvalidArgumentException):
        code_sb.run_code("1", language="cobol")
    with pytest.raises(InvalidArgumentException):
        code_sb.create_code_context("cobol")
    with pytest.raises(ValueError):
        code_sb.run_code("1", language="python", context="some-context")
    with pytest.raises(TypeError):
        code_sb.run_code("1", context=42)
    with pytest.raises(NotFoundException):
        code_sb.get_execution("cmd-nosuchcell")
    # A sandbox without the kernel runner: a clear 409, no cell.
    base = make_sandbox(metadata={"role": "no-runner"})
    with pytest.raises(ConflictException) as e:
        base.run_code("1")
    assert "code-interpreter" in str(e.value)


# ---------------------------------------------------------------- async


@pytest.fixture
async def acode_sb(code_template):
    async with await AsyncSandbox.create(template=code_template, timeout=600,
                                         metadata={"suite": RUN, "role": "code-async"}) as sb:
        yield sb


@pytest.mark.anyio
async def test_async_state_results_errors_and_js(acode_sb):
    sb = acode_sb
    assert (await sb.run_code("n = 10")).error is None
    ex = await sb.run_code("n * 4 + 2")
    assert ex.text == "42" and ex.execution_count is not None
    png = await sb.run_code(PLOT)
    assert any(r.png and base64.b64decode(r.png)[:4] == b"\x89PNG" for r in png.results), png
    err = await sb.run_code("int('x')")
    assert err.error.name == "ValueError"
    assert (await sb.run_code("[1, 2].map(v => v * 3).join(',')", language="javascript")).text == "3,6"
    t = await sb.run_code("import time; time.sleep(30)", timeout=1)
    assert t.error.name == "TimeoutError"


@pytest.mark.anyio
async def test_async_callbacks_and_contexts(acode_sb):
    sb = acode_sb
    events = []

    async def on_out(m):
        await asyncio.sleep(0)
        events.append(("out", m.line))

    ex = await sb.run_code("import sys\nprint('a', flush=True)\nprint('b', file=sys.stderr, flush=True)\n"
                           "print('c', flush=True)\n'r'",
                           on_stdout=on_out, on_stderr=lambda m: events.append(("err", m.line)),
                           on_result=lambda r: events.append(("result", r.text)))
    assert events == [("out", "a\n"), ("err", "b\n"), ("out", "c\n"), ("result", "r")]
    assert ex.text == "r"

    c1, c2 = await asyncio.gather(sb.create_code_context(), sb.create_code_context("bash", cwd="/tmp"))
    await sb.run_code("owner = 'c1'", context=c1)
    a, b = await asyncio.gather(sb.run_code("owner", context=c1), sb.run_code("pwd", context=c2))
    assert a.text == "c1" and b.logs.stdout == ["/tmp\n"]
    ids = {c.id for c in await sb.list_code_contexts()}
    assert {c1.id, c2.id} <= ids
    await sb.restart_code_context(c1)
    assert (await sb.run_code("owner", context=c1)).error.name == "NameError"
    await sb.remove_code_context(c1)
    await sb.remove_code_context(c2)
    assert not {c1.id, c2.id} & {c.id for c in await sb.list_code_contexts()}


@pytest.mark.anyio
async def test_async_cancel_interrupts_the_cell(acode_sb):
    sb = acode_sb
    ctx = await sb.create_code_context()
    started = asyncio.Event()
    task = asyncio.ensure_future(sb.run_code("import time\nprint('go', flush=True)\ntime.sleep(60)",
                                             context=ctx, on_stdout=lambda m: started.set()))
    await asyncio.wait_for(started.wait(), 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The cell was interrupted, so the context is free at once (not after 60 s).
    t0 = time.monotonic()
    assert (await sb.run_code("'free'", context=ctx, timeout=20)).text == "free"
    assert time.monotonic() - t0 < 15
