"""JavaScript (node) and bash contexts."""

import json
import os
import time

from conftest import error, main_result, of_type, stdout


def test_js_console_and_last_expression(daemon):
    ev = daemon.execute('console.log("Hello World!")', language="js")
    assert stdout(ev) == "Hello World!\n"
    assert main_result(ev) is None  # undefined: no result
    ev = daemon.execute("1 + 1", language="javascript")
    assert main_result(ev)["text"] == "2"


def test_js_state_and_redeclaration(daemon):
    ctx = daemon.create("javascript")
    cid = ctx["id"]
    daemon.execute("const a = 40; let b = 1; function add(x) { return x + a + b }", context_id=cid)
    assert main_result(daemon.execute("add(1)", context_id=cid))["text"] == "42"
    # A later cell may declare the same const again (as in a notebook).
    daemon.execute("const a = 0", context_id=cid)
    assert main_result(daemon.execute("add(1)", context_id=cid))["text"] == "2"
    ev = daemon.execute("class P { constructor() { this.v = 3 } }\nnew P()", context_id=cid)
    assert main_result(ev)["text"] == "P { v: 3 }"
    assert main_result(daemon.execute("({k: [1, 'x']})", context_id=cid))["text"] == "{ k: [ 1, 'x' ] }"
    counts = [of_type(daemon.execute("0", context_id=cid), "number_of_executions")[0]["execution_count"]]
    assert counts == [7]


def test_js_top_level_await_imports_and_cwd(daemon):
    ctx = daemon.create("javascript")
    cid = ctx["id"]
    ev = daemon.execute("import { readFileSync } from 'fs'\nimport * as p from 'node:path'\n"
                        "console.log(typeof readFileSync, typeof p.join)", context_id=cid)
    assert stdout(ev) == "function function\n", ev
    assert main_result(daemon.execute("typeof readFileSync", context_id=cid))["text"] == "function"
    ev = daemon.execute("await Promise.resolve('Hello World!')", context_id=cid)
    assert main_result(ev)["text"] == "Hello World!"
    ev = daemon.execute("const os = await import('os'); typeof os.cpus", context_id=cid)
    assert main_result(ev)["text"] == "function"
    assert main_result(daemon.execute("process.cwd()", context_id=cid))["text"] == daemon.cwd
    assert main_result(daemon.execute("require('path').sep", context_id=cid))["text"] == "/"


def test_js_errors(daemon):
    ev = daemon.execute("undefinedThing + 1", language="js")
    err = error(ev)
    assert err["name"] == "ReferenceError"
    assert err["value"] == "undefinedThing is not defined"
    assert "ReferenceError" in err["traceback"]
    ev = daemon.execute("function f() { throw new TypeError('nope') }\nf()", language="js")
    assert (error(ev)["name"], error(ev)["value"]) == ("TypeError", "nope")
    ev = daemon.execute("await Promise.reject(new RangeError('r'))", language="js")
    assert error(ev)["name"] == "RangeError"
    ev = daemon.execute("let = = 3", language="js")
    assert error(ev)["name"] == "SyntaxError"


def test_js_env_vars_and_child_output(daemon):
    ctx = daemon.create("javascript")
    ev = daemon.execute("process.env.SK_FOO", context_id=ctx["id"], env_vars={"SK_FOO": "bar"})
    assert main_result(ev)["text"] == "bar"
    ev = daemon.execute("process.env.SK_FOO || 'default'", context_id=ctx["id"])
    assert main_result(ev)["text"] == "default"
    ev = daemon.execute("require('child_process').execSync('echo child', {stdio: 'inherit'}); 1",
                        context_id=ctx["id"])
    assert stdout(ev) == "child\n"


def test_js_timeout_sync_loop_and_async_wait(daemon):
    ctx = daemon.create("javascript")
    cid = ctx["id"]
    daemon.execute("var kept = 'yes'", context_id=cid)
    t0 = time.monotonic()
    ev = daemon.execute("while (true) {}", context_id=cid, timeout=1)
    assert error(ev)["name"] == "TimeoutError"
    ev = daemon.execute("await new Promise(() => {})", context_id=cid, timeout=1)
    assert error(ev)["name"] == "TimeoutError"
    assert time.monotonic() - t0 < 10
    assert main_result(daemon.execute("kept", context_id=cid))["text"] == "yes"


def test_js_process_exit_is_kernel_death(daemon):
    ctx = daemon.create("javascript")
    ev = daemon.execute("process.exit(4)", context_id=ctx["id"])
    assert error(ev)["name"] == "KernelDied"
    assert main_result(daemon.execute("1", context_id=ctx["id"]))["text"] == "1"


def test_js_restart_clears_state(daemon):
    ctx = daemon.create("js")
    assert ctx["language"] == "javascript"
    daemon.execute("var gone = 1", context_id=ctx["id"])
    assert daemon.call("POST", "/contexts/%s/restart" % ctx["id"])[0] == 200
    assert error(daemon.execute("gone", context_id=ctx["id"]))["name"] == "ReferenceError"


def test_bash_state_cwd_and_exit_status(daemon, tmp_path):
    ctx = daemon.create("bash", cwd=str(tmp_path))
    cid = ctx["id"]
    ev = daemon.execute("pwd", context_id=cid)
    assert stdout(ev) == "%s\n" % tmp_path
    daemon.execute("V=kept; mkdir -p sub; cd sub; f() { echo fn-$1; }", context_id=cid)
    ev = daemon.execute("echo $V; pwd; f x", context_id=cid)
    assert stdout(ev) == "kept\n%s/sub\nfn-x\n" % tmp_path
    assert error(ev) is None
    ev = daemon.execute("echo to-err >&2; (exit 3)", context_id=cid)
    assert of_type(ev, "stderr")[0]["text"] == "to-err\n"
    assert error(ev)["name"] == "CommandExitError" and "3" in error(ev)["value"]
    # A cell reading stdin gets EOF, not the shell's next commands.
    ev = daemon.execute("read line; echo \"got[$line]\"", context_id=cid)
    assert stdout(ev) == "got[]\n"


def test_bash_env_vars_restore(daemon):
    ctx = daemon.create("bash")
    cid = ctx["id"]
    daemon.execute("export SK_KEEP=orig", context_id=cid)
    ev = daemon.execute("echo $SK_NEW $SK_KEEP", context_id=cid,
                        env_vars={"SK_NEW": "a b'c", "SK_KEEP": "over"})
    assert stdout(ev) == "a b'c over\n"
    ev = daemon.execute("echo ${SK_NEW:-unset} $SK_KEEP", context_id=cid)
    assert stdout(ev) == "unset orig\n"


def test_bash_interrupt_keeps_the_shell(daemon):
    ctx = daemon.create("bash")
    cid = ctx["id"]
    daemon.execute("X=1", context_id=cid)
    ev = daemon.execute("echo start; sleep 100; echo never", context_id=cid, timeout=1)
    assert stdout(ev) == "start\n"
    assert error(ev)["name"] == "TimeoutError"
    ev = daemon.execute("echo $X", context_id=cid)
    assert stdout(ev) == "1\n" and error(ev) is None


def test_bash_exit_kills_context_then_recovers(daemon):
    ctx = daemon.create("bash")
    ev = daemon.execute("exit 7", context_id=ctx["id"])
    assert error(ev)["name"] == "KernelDied" and "7" in error(ev)["value"]
    assert stdout(daemon.execute("echo back", context_id=ctx["id"])) == "back\n"


def test_default_language_contexts_listed(daemon):
    daemon.execute("1", language="javascript")
    langs = [c["language"] for c in daemon.get("/contexts")[1]]
    assert "python" in langs and "javascript" in langs
