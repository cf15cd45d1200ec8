"""AsyncSandbox of the unmodified e2b-code-interpreter Python SDK against spaced: create,
state, streaming callbacks (async ones too), a chart, an error, contexts, kill."""

import base64

import pytest
from e2b_code_interpreter import AsyncSandbox

from conftest import RUN

pytestmark = pytest.mark.anyio


async def test_async_sandbox_end_to_end():
    sbx = await AsyncSandbox.create(timeout=600, metadata={"suite": RUN})
    try:
        await sbx.run_code("n = 20")
        assert (await sbx.run_code("n * 2 + 2")).text == "42"

        out = []

        async def on_out(m):
            out.append(m.line)

        ex = await sbx.run_code('print("async hello")', on_stdout=on_out)
        assert out == ["async hello\n"]
        assert ex.logs.stdout == ["async hello\n"]

        chart = await sbx.run_code(
            "import matplotlib.pyplot as plt\nplt.plot([3, 1, 2])\nplt.show()")
        assert base64.b64decode(chart.results[0].png)[:4] == b"\x89PNG"

        err = await sbx.run_code("raise ValueError('bad value')")
        assert (err.error.name, err.error.value) == ("ValueError", "bad value")

        js = await sbx.run_code("[1, 2, 3].map(v => v * 2).join(',')", language="js")
        assert js.text == "2,4,6"

        ctx = await sbx.create_code_context(language="python")
        await sbx.run_code("k = 'kept'", context=ctx)
        assert (await sbx.run_code("k", context=ctx)).text == "kept"
        assert ctx.id in [c.id for c in await sbx.list_code_contexts()]
        await sbx.restart_code_context(ctx)
        assert (await sbx.run_code("k", context=ctx)).error.name == "NameError"
        await sbx.remove_code_context(ctx)
        assert ctx.id not in [c.id for c in await sbx.list_code_contexts()]
    finally:
        assert await sbx.kill() is True
