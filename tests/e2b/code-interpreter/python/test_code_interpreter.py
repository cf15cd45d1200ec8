"""The unmodified e2b-code-interpreter Python SDK (sync API) against spaced: the default
template, run_code with state, languages, streaming callbacks, charts, rich results,
errors, envs, contexts, timeouts and kill (conftest.py says how it is run)."""

import base64
import time

import pytest
from e2b import NotFoundException, SandboxException, TimeoutException
from e2b_code_interpreter import Sandbox

from conftest import create

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_create_uses_the_default_template(sbx: Sandbox):
    assert sbx.sandbox_id.startswith("sb-")
    assert sbx.is_running()
    assert "code-interpreter" in sbx.get_info().template_id


def test_run_code_keeps_state(sbx: Sandbox):
    first = sbx.run_code("x = 41\ndef inc(v):\n    return v + 1")
    assert first.error is None
    assert first.results == []
    second = sbx.run_code("inc(x)")
    assert second.error is None
    assert second.text == "42"
    assert len(second.results) == 1 and second.results[0].is_main_result
    assert second.execution_count > first.execution_count


def test_javascript_by_js_and_javascript(sbx: Sandbox):
    a = sbx.run_code("const a = 20; a * 2 + 1", language="js")
    assert a.error is None and a.text == "41"
    b = sbx.run_code("a + 22", language="javascript")
    assert b.error is None and b.text == "42"
    assert sbx.run_code("'a' in globals()").text == "False"


def test_on_stdout_and_on_stderr_stream(sbx: Sandbox):
    out, err, stamps = [], [], []
    t0 = time.monotonic()

    def on_out(m):
        out.append(m.line)
        stamps.append(time.monotonic() - t0)

    ex = sbx.run_code(
        'import sys, time\nprint("one", flush=True)\ntime.sleep(0.8)\n'
        'print("oops", file=sys.stderr, flush=True)\nprint("two")',
        on_stdout=on_out,
        on_stderr=lambda m: err.append((m.line, m.error)),
    )
    assert ex.error is None
    assert "".join(out) == "one\ntwo\n"
    assert err == [("oops\n", True)]
    assert "".join(ex.logs.stdout) == "one\ntwo\n"
    assert ex.logs.stderr == ["oops\n"]
    assert stamps[-1] - stamps[0] >= 0.5, f"stdout streamed ({stamps})"


def test_matplotlib_chart_is_a_png(sbx: Sandbox):
    seen = []
    ex = sbx.run_code(
        "import matplotlib.pyplot as plt\nplt.figure(figsize=(3, 2))\n"
        "plt.plot([1, 2, 3], [1, 4, 9])\nplt.title('squares')\nplt.show()",
        on_result=seen.append,
    )
    assert ex.error is None
    png = base64.b64decode(ex.results[0].png)
    assert png[:8] == PNG_MAGIC
    assert len(png) > 1000
    assert ex.results[0].is_main_result is False
    assert "png" in list(ex.results[0].formats())
    assert len(seen) == len(ex.results)


def test_rich_results(sbx: Sandbox):
    df = sbx.run_code('import pandas as pd\npd.DataFrame({"a": [1, 2], "b": ["x", "y"]})')
    assert "<table" in df.results[0].html
    assert df.results[0].data == {"a": [1, 2], "b": ["x", "y"]}
    assert sbx.run_code('{"k": [1, 2, 3]}').results[0].json == {"k": [1, 2, 3]}


def test_error_carries_the_exception_name(sbx: Sandbox):
    errors = []
    ex = sbx.run_code("def f():\n    return 1 / 0\nf()", on_error=errors.append)
    assert ex.error is not None
    assert ex.error.name == "ZeroDivisionError"
    assert ex.error.value == "division by zero"
    assert "ZeroDivisionError" in ex.error.traceback
    assert [e.name for e in errors] == ["ZeroDivisionError"]
    assert sbx.run_code("undefined_name_here").error.name == "NameError"
    assert sbx.run_code("x").text == "41"
    js = sbx.run_code('throw new RangeError("too far")', language="js")
    assert (js.error.name, js.error.value) == ("RangeError", "too far")


def test_envs_for_one_cell(sbx: Sandbox):
    code = 'import os\nos.environ.get("SPACE_CI_VAR", "unset")'
    assert sbx.run_code(code, envs={"SPACE_CI_VAR": "from-sdk"}).text == "from-sdk"
    assert sbx.run_code(code).text == "unset"


def test_contexts(sbx: Sandbox):
    ctx = sbx.create_code_context(cwd="/tmp", language="python")
    assert ctx.language == "python" and ctx.cwd == "/tmp" and ctx.id
    r = sbx.run_code("import os\ny = 7\nos.getcwd()", context=ctx)
    assert r.error is None and r.text == "/tmp"
    assert sbx.run_code("y * 6", context=ctx).text == "42"
    assert sbx.run_code("'y' in globals()").text == "False"

    listed = sbx.list_code_contexts()
    assert ctx.id in [c.id for c in listed]
    assert any(c.language == "javascript" for c in listed)

    sbx.restart_code_context(ctx)
    assert sbx.run_code("y", context=ctx).error.name == "NameError"
    assert sbx.run_code("import os\nos.getcwd()", context=ctx).text == "/tmp"

    js = sbx.create_code_context(language="js")
    assert sbx.run_code("let z = 5; z", context=js).text == "5"
    sbx.remove_code_context(js.id)
    sbx.remove_code_context(ctx)
    ids = [c.id for c in sbx.list_code_contexts()]
    assert ctx.id not in ids and js.id not in ids
    with pytest.raises(NotFoundException):
        sbx.run_code("1", context=ctx)


def test_bad_requests(sbx: Sandbox):
    ctx = sbx.create_code_context()
    with pytest.raises(Exception, match="context or language"):
        sbx.run_code("1", context=ctx, language="python")
    sbx.remove_code_context(ctx)
    with pytest.raises(SandboxException, match="400"):
        sbx.run_code("1", language="cobol")


def test_timeout_ends_the_cell_and_the_context_goes_on(sbx: Sandbox):
    t0 = time.monotonic()
    with pytest.raises(TimeoutException):
        sbx.run_code("import time\ntime.sleep(60)", timeout=1.5)
    assert time.monotonic() - t0 < 10
    # spaced closes its side to the kernel runner at once, which interrupts the cell.
    nxt = sbx.run_code("x + 1", timeout=30)
    assert nxt.error is None and nxt.text == "42"
    assert time.monotonic() - t0 < 8, "the context was free again soon"


def test_kill():
    other = create()
    assert other.run_code("6 * 7").text == "42"
    assert other.kill() is True
    assert other.is_running() is False
    with pytest.raises(Exception):
        other.run_code("1")
