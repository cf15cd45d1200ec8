"""JavaScript and bash contexts: one long-lived interpreter process per context.

Both read requests on a pipe and signal the end of each cell on another ("events") pipe.
The interpreter's own stdout and stderr are pipes too (a cell's child processes write there).
One I/O thread per context reads all three with select() and hands what it reads to the
running job; on a cell's end it first drains stdout and stderr, so everything written
before the end is delivered before it. Output while no cell runs is dropped, as in E2B.
"""

import fcntl
import json
import os
import select
import shlex
import shutil
import subprocess
import threading

from space_kernel.backend import Backend, BackendError, describe_returncode
from space_kernel.jobs import error_event, result_event

HERE = os.path.dirname(os.path.abspath(__file__))
JS_RUNNER = os.path.join(HERE, "js_runner.js")


def _nonblocking(fd):
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)


class ProcBackend(Backend):
    def __init__(self, cwd, env, state_dir):
        super().__init__(cwd, env, state_dir)
        self.proc = None
        self._req_w = None
        self._lock = threading.Lock()
        self._job = None
        self._done = threading.Event()
        self._io = None

    # Subclasses: argv and env for the interpreter; how to handle one event line.
    def command(self, req_fd, evt_fd):
        raise NotImplementedError

    def handle_event_line(self, job, line):
        raise NotImplementedError

    def start(self):
        req_r, req_w = os.pipe()
        evt_r, evt_w = os.pipe()
        self.stdin_is_requests = False
        argv, env = self.command(req_r, evt_w)
        try:
            self.proc = subprocess.Popen(
                argv, cwd=self.cwd, env=env,
                stdin=req_r if self.stdin_is_requests else subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                pass_fds=(evt_w,) if self.stdin_is_requests else (req_r, evt_w),
                start_new_session=True)
        except OSError as e:
            for fd in (req_r, req_w, evt_r, evt_w):
                os.close(fd)
            raise BackendError("cannot start %s: %s" % (argv[0], e)) from e
        os.close(req_r)
        os.close(evt_w)
        os.set_inheritable(req_w, False)
        self._req_w = req_w
        self.dying_reason = None
        self.execution_count = 0
        fds = {self.proc.stdout.fileno(): "stdout", self.proc.stderr.fileno(): "stderr",
               evt_r: "events"}
        for fd in fds:
            _nonblocking(fd)
        self._io = threading.Thread(target=self._io_loop, args=(fds, evt_r, self.proc),
                                    daemon=True, name="io-%s" % self.language)
        self._io.start()
        self.after_start()

    def after_start(self):
        pass

    def _deliver(self, stream, data):
        with self._lock:
            job = self._job
        if job is not None:
            job.stream(stream, data.decode("utf-8", "replace"))

    def _io_loop(self, fds, evt_r, proc):
        buffers = {fd: b"" for fd in fds}
        open_fds = set(fds)
        while open_fds:
            try:
                ready, _, _ = select.select(list(open_fds), [], [], 1.0)
            except (OSError, ValueError):
                break
            # Drain output before events, so a cell's output precedes its end.
            ready.sort(key=lambda fd: fds[fd] == "events")
            for fd in ready:
                if fds[fd] == "events":
                    self._drain_output(fds, open_fds)
                try:
                    data = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    open_fds.discard(fd)
                    continue
                if fds[fd] != "events":
                    self._deliver(fds[fd], data)
                    continue
                buffers[fd] += data
                while b"\n" in buffers[fd]:
                    line, buffers[fd] = buffers[fd].split(b"\n", 1)
                    self._on_event_line(line)
        for fd in fds:
            if fds[fd] == "events":
                try:
                    os.close(fd)
                except OSError:
                    pass

    def _drain_output(self, fds, open_fds):
        for fd, name in fds.items():
            if name == "events" or fd not in open_fds:
                continue
            while True:
                try:
                    data = os.read(fd, 65536)
                except (BlockingIOError, OSError):
                    break
                if not data:
                    break
                self._deliver(name, data)

    def _on_event_line(self, line):
        try:
            msg = json.loads(line)
        except ValueError:
            return
        with self._lock:
            job = self._job
        if job is None:
            return
        if self.handle_event_line(job, msg):
            self._done.set()

    def send(self, obj):
        self._write_all((json.dumps(obj) + "\n").encode())

    def _write_all(self, data):
        view = memoryview(data)
        while view:
            n = os.write(self._req_w, view)
            view = view[n:]

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def pid(self):
        return self.proc.pid if self.proc is not None else None

    def exit_description(self):
        return describe_returncode(self.proc.poll() if self.proc else None)

    def kill(self):
        proc = self.proc
        if proc is None:
            return
        try:
            os.killpg(proc.pid, 9)
        except OSError:
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        if self._req_w is not None:
            try:
                os.close(self._req_w)
            except OSError:
                pass
            self._req_w = None
        for f in (proc.stdout, proc.stderr):
            try:
                f.close()
            except OSError:
                pass

    def run(self, job):
        self.execution_count += 1
        job.emit({"type": "number_of_executions", "execution_count": self.execution_count})
        self._done.clear()
        with self._lock:
            self._job = job
        try:
            try:
                self.send(self.request(job))
            except OSError:
                pass  # it died: supervise() reports it
            self.supervise(job, lambda timeout: self._done.wait(timeout))
        finally:
            with self._lock:
                self._job = None


class NodeBackend(ProcBackend):
    language = "javascript"

    def command(self, req_fd, evt_fd):
        node = shutil.which("node", path=self.env.get("PATH")) or shutil.which("node")
        if node is None:
            raise BackendError("node is not installed (the javascript language needs nodejs)")
        env = dict(self.env)
        env["SPACE_KERNEL_REQ_FD"] = str(req_fd)
        env["SPACE_KERNEL_EVT_FD"] = str(evt_fd)
        return [node, JS_RUNNER], env

    def request(self, job):
        return {"type": "execute", "code": job.code, "env": job.env_vars}

    def handle_event_line(self, job, msg):
        kind = msg.get("type")
        if kind in ("stdout", "stderr"):
            job.stream(kind, msg.get("text", ""))
        elif kind == "result":
            job.emit(result_event(msg.get("data", {}), msg.get("main", True)))
        elif kind == "error":
            job.emit(error_event(msg.get("name", "Error"), msg.get("value", ""),
                                 msg.get("traceback", "")))
        elif kind == "done":
            return True
        return False


class BashBackend(ProcBackend):
    language = "bash"

    def command(self, req_fd, evt_fd):
        bash = shutil.which("bash") or "/bin/bash"
        env = dict(self.env)
        self._evt_fd = evt_fd
        self._cells = os.path.join(self.state_dir, "bash-%s" % os.urandom(6).hex())
        os.makedirs(self._cells, mode=0o700, exist_ok=True)
        # bash reads its commands from the request pipe (its stdin), a line at a time. The
        # SIGINT trap that returns ends the sourced cell without ending the shell (an
        # untrapped SIGINT would end a non-interactive bash).
        self.stdin_is_requests = True
        return [bash, "--noprofile", "--norc"], env

    def after_start(self):
        self.send("trap 'return 130 2>/dev/null' INT\n")

    def request(self, job):
        cell = os.path.join(self._cells, "cell.sh")
        env_file = os.path.join(self._cells, "env.sh")
        restore_file = os.path.join(self._cells, "restore.sh")
        with open(cell, "w") as f:
            f.write(job.code)
            if not job.code.endswith("\n"):
                f.write("\n")
        sets, restores = [], []
        for i, (k, v) in enumerate(job.env_vars.items()):
            sets.append('if [ "${%s+x}" = x ]; then __space_had_%d=1 __space_old_%d="$%s"; '
                        'else __space_had_%d=0; fi; export %s=%s'
                        % (k, i, i, k, i, k, shlex.quote(v)))
            restores.append('if [ "$__space_had_%d" = 1 ]; then export %s="$__space_old_%d"; '
                            'else unset %s; fi; unset __space_had_%d __space_old_%d'
                            % (i, k, i, k, i, i))
        with open(env_file, "w") as f:
            f.write("\n".join(sets) + "\n")
        with open(restore_file, "w") as f:
            f.write("\n".join(restores) + "\n")
        return (". %s; . %s </dev/null; __space_rc=$?; . %s; printf '{\"type\":\"done\",\"rc\":%%d}\\n' "
                "\"$__space_rc\" >&%d\n" % (shlex.quote(env_file), shlex.quote(cell),
                                            shlex.quote(restore_file), self._evt_fd))

    def send(self, obj):
        self._write_all(obj.encode())

    def handle_event_line(self, job, msg):
        if msg.get("type") != "done":
            return False
        rc = msg.get("rc", 0)
        if rc != 0:
            if rc == 130 and job.interrupt_reason is not None:
                job.emit(error_event("KeyboardInterrupt", "Execution interrupted"))
            else:
                job.emit(error_event("CommandExitError", "exit status %d" % rc))
        return True
