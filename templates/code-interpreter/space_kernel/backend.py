"""The interface every language backend implements, and the supervision loop they share.

A backend owns one interpreter process (ipykernel, node, bash). Its context's worker thread
calls start(), run(job) (one at a time) and kill(); interrupt() and kill() may also be
called from other threads. run() returns once the job is finished (job.finish() called).
"""

import os
import signal
import time

from space_kernel.jobs import error_event

# After an interrupt (timeout, client gone, SIGINT to `exec`), how long the kernel gets to
# report before it is killed; the context then starts afresh on its next cell.
INTERRUPT_GRACE_S = 5.0


class BackendError(Exception):
    """The interpreter could not be started."""


class Backend:
    language = "?"

    def __init__(self, cwd, env, state_dir):
        self.cwd = cwd
        self.env = env
        self.state_dir = state_dir
        self.execution_count = 0
        self.dying_reason = None  # set by the context before a deliberate kill()

    def start(self):
        raise NotImplementedError

    def alive(self):
        raise NotImplementedError

    def pid(self):
        raise NotImplementedError

    def exit_description(self):
        return "exited"

    def interrupt(self):
        """SIGINT to the interpreter's process group (the cell's children get it too)."""
        pid = self.pid()
        if pid:
            try:
                os.killpg(pid, signal.SIGINT)
            except (ProcessLookupError, PermissionError):
                pass

    def kill(self):
        raise NotImplementedError

    def run(self, job):
        raise NotImplementedError

    def supervise(self, job, step):
        """Calls step(timeout) until it returns True (the cell is done), interrupting the
        interpreter when the job asks (timeout, client gone, interrupt request) and killing
        it when it does not stop within INTERRUPT_GRACE_S, or noticing that it died.
        Always ends with job.finish()."""
        interrupted_at = None
        try:
            while True:
                done = step(0.05)
                if self.dying_reason in ("restart", "delete"):
                    # Killed on purpose: whatever the kernel said last, the cell ends so.
                    job.emit(self.death_error())
                    return
                if done:
                    return
                if interrupted_at is None:
                    if job.interrupt_requested():
                        self.interrupt()
                        interrupted_at = time.monotonic()
                elif time.monotonic() - interrupted_at > INTERRUPT_GRACE_S:
                    self.dying_reason = "unresponsive"
                    self.kill()
                    why = ("the %s interpreter did not stop within %gs of the interrupt and "
                           "was killed; the context's state is lost (its next cell starts "
                           "afresh)" % (self.language, INTERRUPT_GRACE_S))
                    if job.interrupt_reason == "timeout":
                        job.emit(error_event("TimeoutError", "Execution timed out after %g "
                                             "seconds; %s" % (job.timeout, why)))
                    else:
                        job.emit(error_event("KeyboardInterrupt", "Execution interrupted; " + why))
                    return
                if not self.alive():
                    # Drain what it said before dying.
                    step(0.2)
                    if not job.finished():
                        job.emit(self.death_error())
                    return
        finally:
            job.finish()

    def death_error(self):
        reason = self.dying_reason
        if reason == "restart":
            return error_event("ContextRestarting", "Context was restarted")
        if reason == "delete":
            return error_event("ContextDeleted", "Context was deleted")
        return error_event(
            "KernelDied",
            "The %s interpreter %s; the context's state is lost (its next cell starts a "
            "fresh interpreter, or restart the context)" % (self.language, self.exit_description()))


def describe_returncode(rc):
    if rc is None:
        return "exited"
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = "signal %d" % -rc
        return "was killed by %s" % name
    return "exited with code %d" % rc
