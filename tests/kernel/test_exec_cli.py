"""`space-kernel exec` and `space-kernel contexts`: NDJSON out, exit codes, signals,
starting the daemon on demand."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

from conftest import SPACE_KERNEL, error, main_result, of_type, stdout


def run(daemon, args, code="", timeout=120, env=None):
    p = subprocess.run([sys.executable, SPACE_KERNEL] + args, input=code.encode(),
                       capture_output=True, timeout=timeout, env=env or daemon.env())
    events = [json.loads(l) for l in p.stdout.decode().splitlines() if l.strip()]
    return p.returncode, events, p.stderr.decode()


def test_exec_success_in_a_new_context(daemon):
    rc, ev, err = run(daemon, ["exec"], "print('hi')\n6 * 7")
    assert rc == 0, err
    assert ev[0]["type"] == "context" and ev[0]["language"] == "python"
    assert stdout(ev) == "hi\n" and main_result(ev)["text"] == "42"
    assert ev[-1] == {"type": "end_of_execution"}
    # The new context is kept: a later exec can name it.
    rc, ev2, _ = run(daemon, ["exec", "--context", ev[0]["id"]], "_ + 0")
    assert rc == 0 and main_result(ev2)["text"] == "42"


def test_exec_rm_deletes_the_new_context(daemon):
    rc, ev, _ = run(daemon, ["exec", "--rm", "-l", "bash"], "echo x")
    assert rc == 0
    ids = [c["id"] for c in daemon.get("/contexts")[1]]
    assert ev[0]["id"] not in ids


def test_exec_error_exits_1(daemon):
    rc, ev, _ = run(daemon, ["exec", "--context", "default"], "1/0")
    assert rc == 1
    assert error(ev)["name"] == "ZeroDivisionError"


def test_exec_timeout_and_env(daemon):
    rc, ev, _ = run(daemon, ["exec", "-l", "js", "--env", "SK_A=b=c", "--rm"],
                    "console.log(process.env.SK_A)")
    assert rc == 0 and stdout(ev) == "b=c\n"
    t0 = time.monotonic()
    rc, ev, _ = run(daemon, ["exec", "--timeout", "1", "--rm"], "import time; time.sleep(60)")
    assert rc == 1 and error(ev)["name"] == "TimeoutError"
    assert time.monotonic() - t0 < 15


def test_exec_usage_errors_exit_2(daemon):
    for args in (["exec", "--env", "NOEQUALS"], ["exec", "--language", "cobol"],
                 ["exec", "--timeout", "0"], ["bogus"], [], ["contexts"]):
        rc, ev, err = run(daemon, args, "1")
        assert rc == 2, (args, err)
        assert ev == [] and err
    rc, ev, err = run(daemon, ["exec", "--context", "no-such"], "1")
    assert rc == 2 and "not found" in err


def test_exec_connection_error_exits_2(daemon, tmp_path):
    # A socket path whose directory cannot be created: the daemon cannot be started.
    blocker = tmp_path / "file"
    blocker.write_text("")
    rc, ev, err = run(daemon, ["exec", "--socket", str(blocker / "k.sock")], "1")
    assert rc == 2 and "cannot reach the daemon" in err


def test_sigint_interrupts_the_cell(daemon):
    p = subprocess.Popen([sys.executable, SPACE_KERNEL, "exec", "--rm"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=daemon.env())
    p.stdin.write(b"import time\nprint('running', flush=True)\ntime.sleep(120)\n")
    p.stdin.close()
    lines = []
    while True:
        line = p.stdout.readline()
        assert line, lines
        lines.append(json.loads(line))
        if lines[-1]["type"] == "stdout":
            break
    p.send_signal(signal.SIGINT)
    rest = p.stdout.read().decode().splitlines()
    rc = p.wait(timeout=30)
    events = lines + [json.loads(l) for l in rest]
    assert rc == 1
    assert error(events)["name"] == "KeyboardInterrupt"
    assert events[-1]["type"] == "end_of_execution"


def test_sigterm_interrupts_too(daemon):
    p = subprocess.Popen([sys.executable, SPACE_KERNEL, "exec", "-l", "bash", "--rm"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=daemon.env())
    p.stdin.write(b"echo up; sleep 120")
    p.stdin.close()
    while json.loads(p.stdout.readline())["type"] != "stdout":
        pass
    p.send_signal(signal.SIGTERM)
    events = [json.loads(l) for l in p.stdout.read().decode().splitlines()]
    assert p.wait(timeout=30) == 1
    assert error(events)["name"] == "KeyboardInterrupt"


def test_slow_stdout_reader_loses_nothing(daemon):
    p = subprocess.Popen([sys.executable, SPACE_KERNEL, "exec", "--rm"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=daemon.env())
    p.stdin.write(b"for i in range(3000):\n    print(i)\n")
    p.stdin.close()
    time.sleep(3)  # nobody reads exec's stdout meanwhile
    events = [json.loads(l) for l in p.stdout.read().decode().splitlines()]
    assert p.wait(timeout=60) == 0
    assert stdout(events) == "".join("%d\n" % i for i in range(3000))


def test_contexts_commands(daemon, tmp_path):
    rc, ev, _ = run(daemon, ["contexts", "create", "--language", "bash", "--cwd", str(tmp_path)])
    assert rc == 0
    ctx = ev[0]
    assert ctx["language"] == "bash" and ctx["cwd"] == str(tmp_path)
    rc, ev, _ = run(daemon, ["contexts", "list"])
    assert rc == 0 and ctx in ev[0]
    rc, ev, _ = run(daemon, ["contexts", "restart", ctx["id"]])
    assert rc == 0 and ev[0] == {"id": ctx["id"], "restarted": True}
    rc, ev, _ = run(daemon, ["contexts", "delete", ctx["id"]])
    assert rc == 0 and ev[0] == {"id": ctx["id"], "deleted": True}
    rc, ev, _ = run(daemon, ["contexts", "delete", ctx["id"]])
    assert rc == 1 and ev[0]["error"]["code"] == "not_found"
    rc, ev, _ = run(daemon, ["contexts", "create", "--language", "cobol"])
    assert rc == 1 and ev[0]["error"]["code"] == "invalid_argument"


def test_exec_starts_the_daemon_once(tmp_path):
    sock = str(tmp_path / "auto.sock")
    env = dict(os.environ, SPACE_KERNEL_SOCKET=sock, SPACE_KERNEL_PORT="0")
    env.pop("PYTEST_CURRENT_TEST", None)
    results = []

    def one():
        p = subprocess.run([sys.executable, SPACE_KERNEL, "exec", "-l", "bash", "--rm"],
                           input=b"echo auto", capture_output=True, env=env, timeout=120)
        results.append((p.returncode, p.stdout.decode(), p.stderr.decode()))

    threads = [threading.Thread(target=one) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pid = int(open(sock + ".pid").read())
    try:
        for rc, out, err in results:
            assert rc == 0, err
            assert "auto\\n" in out
        log = open(sock + ".log").read()
        assert log.count("serving on") == 1, log
    finally:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        while os.path.exists(sock) and time.monotonic() < deadline:
            time.sleep(0.1)
    assert not os.path.exists(sock)


def test_exec_names_the_default_context(daemon):
    rc, ev, _ = run(daemon, ["exec", "-l", "bash", "--context", "default"], "echo d")
    assert rc == 0
    assert ev[0]["type"] == "context" and ev[0]["language"] == "bash"
    assert ev[0]["cwd"] == daemon.cwd


def test_serve_refuses_a_busy_port_or_socket(daemon, tmp_path):
    for args, fragment in (
            (["--port", str(daemon.port), "--host", "127.0.0.1", "--socket", str(tmp_path / "x.sock")],
             "in use"),
            (["--port", "0", "--socket", daemon.socket], "already serves")):
        p = subprocess.run([sys.executable, SPACE_KERNEL, "serve", "--no-default-contexts"] + args,
                           capture_output=True, timeout=60, env=daemon.env())
        assert p.returncode == 2, p.stderr
        assert fragment in p.stderr.decode()
    assert not (tmp_path / "x.sock").exists()
    assert daemon.get("/health")[0] == 200
