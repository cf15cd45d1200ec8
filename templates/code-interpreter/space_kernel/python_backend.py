"""Python contexts: one ipykernel per context, driven through jupyter_client.

The kernel is Debian's python3-ipykernel, started with jupyter_client's KernelManager (it
sets JPY_PARENT_PID, so the kernel exits if the daemon dies). The inline matplotlib backend
turns figures into image/png display data; ipython_startup.py adds JSON for dicts and lists
and e2b/data for pandas DataFrames, as E2B's template does.
"""

import asyncio
import json
import os
import queue
import time

from jupyter_client import KernelManager

from space_kernel.backend import Backend, BackendError, describe_returncode
from space_kernel.jobs import error_event, result_event

STARTUP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ipython_startup.py")


class PythonBackend(Backend):
    language = "python"

    def __init__(self, cwd, env, state_dir):
        super().__init__(cwd, env, state_dir)
        self.km = None
        self.kc = None

    def start(self):
        env = dict(self.env)
        env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
        env.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
        env["JUPYTER_RUNTIME_DIR"] = os.path.join(self.state_dir, "jupyter")
        os.makedirs(env["JUPYTER_RUNTIME_DIR"], mode=0o700, exist_ok=True)
        # ZeroMQ over unix sockets (ipc), not loopback TCP: it works whether or not the
        # sandbox's lo is up, and no other process in the sandbox can dial the kernel's ports.
        name = "k-%s" % os.urandom(6).hex()
        km = KernelManager(kernel_name="python3", transport="ipc",
                           ip=os.path.join(env["JUPYTER_RUNTIME_DIR"], name))
        km.connection_file = os.path.join(env["JUPYTER_RUNTIME_DIR"], name + ".json")
        try:
            km.start_kernel(
                extra_arguments=["--InteractiveShell.colors=NoColor",
                                 "--IPKernelApp.exec_files=%s" % STARTUP],
                cwd=self.cwd, env=env)
            kc = km.client()
            kc.start_channels()
            kc.wait_for_ready(timeout=60)
        except Exception as e:  # jupyter_client raises RuntimeError, OSError, ...
            try:
                km.shutdown_kernel(now=True)
            except Exception:
                pass
            raise BackendError("cannot start the python kernel: %s" % e) from e
        self.km, self.kc = km, kc
        self.dying_reason = None

    def alive(self):
        return self.km is not None and self.km.is_alive()

    def pid(self):
        if self.km is None or self.km.provisioner is None:
            return None
        proc = getattr(self.km.provisioner, "process", None)
        return proc.pid if proc is not None else None

    def exit_description(self):
        proc = getattr(self.km.provisioner, "process", None) if self.km else None
        return describe_returncode(proc.poll() if proc is not None else None)

    def interrupt(self):
        if self.km is not None:
            try:
                self.km.interrupt_kernel()
            except Exception:
                super().interrupt()

    def kill(self):
        km, kc = self.km, self.kc
        if kc is not None:
            try:
                kc.stop_channels()
            except Exception:
                pass
        if km is not None:
            try:
                km.shutdown_kernel(now=True)
            except Exception:
                pid = self.pid()
                if pid:
                    try:
                        os.killpg(pid, 9)
                    except OSError:
                        pass
        self.kc = None

    def _silent(self, code, timeout=10.0):
        """Runs code without output or history (env var setup); best effort."""
        msg_id = self.kc.execute(code, silent=True, store_history=False)
        end = timeout / 0.05
        while end > 0:
            end -= 1
            try:
                msg = self.kc.get_iopub_msg(timeout=0.05)
            except queue.Empty:
                if not self.alive():
                    return
                continue
            if (msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "status"
                    and msg["content"].get("execution_state") == "idle"):
                return

    def run(self, job):
        if job.env_vars:
            self._silent("__import__('builtins').__space_saved_env = "
                         "(lambda o, e: ({k: o.environ.get(k) for k in e}, o.environ.update(e))[0])"
                         "(__import__('os'), %s)" % json.dumps(job.env_vars))
        # stop_on_error=False: with True, ipykernel aborts (no result, no error) a request that
        # reaches it while the previous cell's error (an interrupt) is being handled, so a
        # cell sent right after an interrupted one could come back empty.
        msg_id = self.kc.execute(job.code, store_history=True, allow_stdin=False,
                                 stop_on_error=False)

        def step(timeout):
            try:
                msg = self.kc.get_iopub_msg(timeout=timeout)
            except queue.Empty:
                return False
            except (Exception, asyncio.CancelledError):  # channels closed under us (restart)
                time.sleep(timeout)
                return False
            if msg["parent_header"].get("msg_id") != msg_id:
                return False
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                job.stream("stderr" if content.get("name") == "stderr" else "stdout",
                           content.get("text", ""))
            elif kind == "execute_input":
                self.execution_count = content.get("execution_count", self.execution_count)
                job.emit({"type": "number_of_executions",
                          "execution_count": self.execution_count})
            elif kind == "display_data":
                job.emit(result_event(content.get("data", {}), False))
            elif kind == "execute_result":
                job.emit(result_event(content.get("data", {}), True))
            elif kind == "error":
                job.emit(error_event(content.get("ename", ""), content.get("evalue", ""),
                                     "\n".join(content.get("traceback", []))))
            elif kind == "status" and content.get("execution_state") == "idle":
                return True
            return False

        self.supervise(job, step)
        if job.env_vars and self.alive():
            self._silent("(lambda o, s: [o.environ.__setitem__(k, v) if v is not None else "
                         "o.environ.pop(k, None) for k, v in s.items()])(__import__('os'), "
                         "__import__('builtins').__dict__.pop('__space_saved_env', {}))")
