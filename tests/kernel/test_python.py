"""Python contexts through POST /execute, as E2B's SDKs call it."""

import base64
import json
import socket
import threading
import time

from conftest import error, main_result, of_type, stdout


def test_default_context_keeps_state(daemon):
    daemon.execute("x_state = 41", language="python")
    ev = daemon.execute("x_state + 1")  # neither language nor context: default python
    assert main_result(ev)["text"] == "42"
    assert of_type(ev, "number_of_executions")[0]["execution_count"] >= 2
    assert ev[-1] == {"type": "end_of_execution"}


def test_new_context_is_independent(daemon):
    daemon.execute("shared_name = 1")
    ctx = daemon.create("python")
    ev = daemon.execute("shared_name", context_id=ctx["id"])
    err = error(ev)
    assert err["name"] == "NameError"
    assert err["value"] == "name 'shared_name' is not defined"
    assert "NameError" in err["traceback"]


def test_named_context_state_and_count(daemon):
    ctx = daemon.create("python")
    daemon.execute("import os\nval = [1, 2]", context_id=ctx["id"])
    ev = daemon.execute("val.append(3)\nval", context_id=ctx["id"])
    res = main_result(ev)
    assert res["text"] == "[1, 2, 3]"
    assert res["json"] == [1, 2, 3]
    assert of_type(ev, "number_of_executions")[0]["execution_count"] == 2


def test_string_result_loses_quotes_like_e2b(daemon):
    ev = daemon.execute("'bar'")
    assert main_result(ev)["text"] == "bar"


def test_matplotlib_figure_is_png(daemon):
    ev = daemon.execute(
        "import matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3], [4, 1, 9])\n"
        "plt.title('t')\n"
        "plt.show()\n")
    results = of_type(ev, "result")
    assert len(results) == 1, ev
    png = base64.b64decode(results[0]["png"])
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert results[0]["is_main_result"] is False
    assert "Figure" in results[0]["text"]
    assert error(ev) is None


def test_display_and_main_result_both_stream(daemon):
    ev = daemon.execute(
        "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\n7 * 6\n")
    results = of_type(ev, "result")
    assert len(results) == 2
    assert [r["is_main_result"] for r in results] == [False, True]
    assert results[1]["text"] == "42"


def test_html_repr(daemon):
    ev = daemon.execute(
        "class Table:\n"
        "    def _repr_html_(self):\n"
        "        return '<table><tr><td>1</td></tr></table>'\n"
        "Table()\n")
    res = main_result(ev)
    assert res["html"] == "<table><tr><td>1</td></tr></table>"
    assert "Table at" in res["text"]


def test_json_for_dicts(daemon):
    ev = daemon.execute("{'a': 1, 'b': [True, None]}")
    assert main_result(ev)["json"] == {"a": 1, "b": [True, None]}


def test_svg_and_extra_formats(daemon):
    ev = daemon.execute(
        "from IPython.display import display, SVG\n"
        "display(SVG('<svg xmlns=\"http://www.w3.org/2000/svg\"><rect width=\"1\" height=\"1\"/></svg>'))\n"
        "display({'text/latex': r'\\text{x}', 'application/x-custom': 'c'}, raw=True)\n")
    svg, raw = of_type(ev, "result")
    assert svg["svg"].startswith("<svg")
    assert raw["latex"] == "\\text{x}"
    assert raw["extra"] == {"application/x-custom": "c"}


def test_error_fields(daemon):
    ev = daemon.execute("def f():\n    raise ValueError('bad value')\nf()\n")
    err = error(ev)
    assert err["name"] == "ValueError"
    assert err["value"] == "bad value"
    assert "f()" in err["traceback"] and "ValueError" in err["traceback"]
    assert "\x1b[" not in err["traceback"]  # no colours
    assert ev[-1]["type"] == "end_of_execution"


def test_stdout_stderr_order_and_streaming(daemon):
    c = daemon.conn()
    code = ("import sys, time\n"
            "print('one', flush=True)\n"
            "time.sleep(0.3)\n"
            "print('two', file=sys.stderr, flush=True)\n"
            "time.sleep(0.3)\n"
            "print('three', flush=True)\n"
            "time.sleep(1.5)\n")
    c.request("POST", "/execute", body=json.dumps({"code": code}).encode(),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    start = time.monotonic()
    seen = []
    while True:
        ev = json.loads(r.readline())
        if ev["type"] in ("stdout", "stderr"):
            seen.append((ev["type"], ev["text"], time.monotonic() - start))
            assert ev["timestamp"]
        if ev["type"] == "end_of_execution":
            end = time.monotonic() - start
            break
    c.close()
    assert [(k, t) for k, t, _ in seen] == [("stdout", "one\n"), ("stderr", "two\n"),
                                            ("stdout", "three\n")]
    # Streamed as it happened, not at the end.
    assert seen[0][2] < end - 1.0


def test_subprocess_output_is_captured(daemon):
    ev = daemon.execute("!echo from-shell\nimport os\nos.system('echo from-system')\n")
    out = stdout(ev)
    assert "from-shell" in out and "from-system" in out


def test_env_vars_per_execution(daemon):
    ctx = daemon.create("python")
    ev = daemon.execute("import os; os.getenv('SK_FOO')", context_id=ctx["id"],
                        env_vars={"SK_FOO": "bar $HOME \"x\""})
    assert main_result(ev)["text"] == "bar $HOME \"x\""
    ev = daemon.execute("os.getenv('SK_FOO', 'default')", context_id=ctx["id"])
    assert main_result(ev)["text"] == "default"


def test_timeout_interrupts_and_keeps_state(daemon):
    ctx = daemon.create("python")
    daemon.execute("kept = 'yes'", context_id=ctx["id"])
    t0 = time.monotonic()
    ev = daemon.execute("import time\nwhile True: time.sleep(0.1)", context_id=ctx["id"],
                        timeout=1)
    assert time.monotonic() - t0 < 8
    err = error(ev)
    assert err["name"] == "TimeoutError"
    assert "1 seconds" in err["value"]
    ev = daemon.execute("kept", context_id=ctx["id"])
    assert main_result(ev)["text"] == "yes"


def test_client_disconnect_interrupts_the_cell(daemon):
    ctx = daemon.create("python")
    s = socket.create_connection(("127.0.0.1", daemon.port))
    body = json.dumps({"code": "import time; time.sleep(300)", "context_id": ctx["id"]})
    s.sendall(("POST /execute HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               "Content-Length: %d\r\n\r\n%s" % (len(body), body)).encode())
    assert b"200" in s.recv(100)
    time.sleep(0.5)
    s.close()
    t0 = time.monotonic()
    ev = daemon.execute("1 + 1", context_id=ctx["id"])
    assert main_result(ev)["text"] == "2"
    assert time.monotonic() - t0 < 10


def test_interrupt_execution_endpoint(daemon):
    ctx = daemon.create("python")
    c = daemon.conn()
    c.request("POST", "/execute", body=json.dumps(
        {"code": "import time\nprint('started', flush=True)\ntime.sleep(300)",
         "context_id": ctx["id"]}).encode(), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    eid = r.getheader("Space-Execution-Id")
    assert r.getheader("Space-Context-Id") == ctx["id"]
    events = []
    while True:
        ev = json.loads(r.readline())
        events.append(ev)
        if ev["type"] == "stdout":
            status, _, _ = daemon.call("POST", "/executions/%s/interrupt" % eid)
            assert status == 200
        if ev["type"] == "end_of_execution":
            break
    c.close()
    assert error(events)["name"] == "KeyboardInterrupt"


def test_restart_clears_state(daemon):
    ctx = daemon.create("python")
    daemon.execute("x = 1", context_id=ctx["id"])
    status, body, _ = daemon.call("POST", "/contexts/%s/restart" % ctx["id"])
    assert status == 200 and body is None
    ev = daemon.execute("x", context_id=ctx["id"])
    assert error(ev)["name"] == "NameError"
    assert error(ev)["value"] == "name 'x' is not defined"


def test_restart_during_a_cell(daemon):
    ctx = daemon.create("python")
    out = {}

    def run():
        out["ev"] = daemon.execute("import time; time.sleep(60)", context_id=ctx["id"])

    t = threading.Thread(target=run)
    t.start()
    time.sleep(1.0)
    assert daemon.call("POST", "/contexts/%s/restart" % ctx["id"])[0] == 200
    t.join(30)
    assert error(out["ev"]) is not None, out["ev"]
    assert error(out["ev"])["name"] == "ContextRestarting"
    assert main_result(daemon.execute("2 + 2", context_id=ctx["id"]))["text"] == "4"


def test_kernel_death_is_an_error_and_the_context_recovers(daemon):
    ctx = daemon.create("python")
    daemon.execute("before = 1", context_id=ctx["id"])
    ev = daemon.execute("import os; os._exit(3)", context_id=ctx["id"])
    err = error(ev)
    assert err["name"] == "KernelDied"
    assert "exited with code 3" in err["value"]
    ev = daemon.execute("'before' in globals()", context_id=ctx["id"])
    assert main_result(ev)["text"] == "False"


def test_delete(daemon):
    ctx = daemon.create("python")
    status, body, _ = daemon.call("DELETE", "/contexts/%s" % ctx["id"])
    assert status == 200
    ids = [c["id"] for c in daemon.get("/contexts")[1]]
    assert ctx["id"] not in ids
    status, body = daemon.execute_raw("1", context_id=ctx["id"])
    assert status == 404 and body["error"]["code"] == "not_found"
    assert daemon.call("DELETE", "/contexts/%s" % ctx["id"])[0] == 404


def test_slow_reader_does_not_block_the_cell(daemon, tmp_path):
    ctx = daemon.create("python")
    flag = tmp_path / "done"
    code = ("import sys\nfor i in range(20000):\n    print('x' * 500)\n"
            "open(%r, 'w').write('1')\n" % str(flag))
    c = daemon.conn()
    c.request("POST", "/execute", body=json.dumps({"code": code, "context_id": ctx["id"]}).encode(),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    deadline = time.monotonic() + 60
    while not flag.exists() and time.monotonic() < deadline:
        time.sleep(0.1)  # read nothing meanwhile: ~10 MB wait in the daemon
    assert flag.exists()
    total = 0
    while True:
        ev = json.loads(r.readline())
        if ev["type"] == "stdout":
            total += len(ev["text"])
        if ev["type"] == "end_of_execution":
            break
    c.close()
    assert total == 20000 * 501


def test_non_finite_numbers_stay_strict_json(daemon):
    # JSON.parse (the JS SDK) rejects NaN: such values come back without a json form or
    # as null, never as a bare NaN token.
    c = daemon.conn()
    c.request("POST", "/execute", body=b'{"code": "{\\"a\\": float(\\"nan\\"), \\"b\\": 1}"}',
              headers={"Content-Type": "application/json"})
    raw = c.getresponse().read().decode()
    c.close()
    assert "NaN" not in raw.replace("'a': nan", "")
    res = main_result([json.loads(l) for l in raw.splitlines()])
    assert res["text"] == "{'a': nan, 'b': 1}" and "json" not in res


def test_a_kernel_ignoring_the_interrupt_is_killed(daemon):
    ctx = daemon.create("python")
    daemon.execute("mark = 1", context_id=ctx["id"])
    t0 = time.monotonic()
    ev = daemon.execute("import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                        "time.sleep(120)", context_id=ctx["id"], timeout=1)
    assert time.monotonic() - t0 < 20
    err = error(ev)
    assert err["name"] == "TimeoutError" and "killed" in err["value"]
    ev = daemon.execute("'mark' in globals()", context_id=ctx["id"])
    assert main_result(ev)["text"] == "False"
