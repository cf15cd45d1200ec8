"""One cell's execution (a Job) and the event objects it streams.

A Job is created by the HTTP side and run by its context's worker thread. The worker (and,
for node and bash, the context's I/O thread) calls emit(); the HTTP side reads events().
The queue is unbounded on purpose: a slow reader never blocks the kernel, the cell keeps
running and its events wait in memory. Thread-safe.
"""

import datetime
import queue
import threading
import time
import uuid

# Jupyter MIME type -> the field name E2B's SDKs read from a "result" event.
MIME_FIELDS = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
    "e2b/data": "data",
    "e2b/chart": "chart",
}


def now_iso():
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


def result_event(mime_bundle, is_main_result):
    """A "result" event from a Jupyter MIME bundle, shaped as E2B's server shapes it."""
    ev = {"type": "result"}
    extra = {}
    for mime, value in mime_bundle.items():
        field = MIME_FIELDS.get(mime)
        if field is None:
            extra[mime] = value
        else:
            ev[field] = value
    text = ev.get("text")
    # E2B's server drops the quotes of a string's repr ('bar' -> bar); its SDK tests rely
    # on it (os.getenv('FOO') reads as "bar"), so we do the same.
    if isinstance(text, str) and len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        ev["text"] = text[1:-1]
    if extra:
        ev["extra"] = extra
    ev["is_main_result"] = bool(is_main_result)
    return ev


def error_event(name, value, traceback=""):
    return {"type": "error", "name": str(name), "value": str(value), "traceback": str(traceback)}


END = {"type": "end_of_execution"}


class Job:
    """A cell to run: code, per-cell env vars, an optional timeout in seconds."""

    def __init__(self, code, env_vars=None, timeout=None):
        self.id = uuid.uuid4().hex
        self.code = code
        self.env_vars = dict(env_vars or {})
        self.timeout = timeout
        self.deadline = None  # set when the cell starts
        self.context_id = None
        self._events = queue.Queue()
        self._lock = threading.Lock()
        self._finished = threading.Event()
        self._errored = False
        self.interrupt_reason = None  # "interrupt" | "client" | "timeout"
        self._interrupt = threading.Event()
        self.started = False

    # --- worker side ---
    def start(self):
        self.started = True
        if self.timeout:
            self.deadline = time.monotonic() + self.timeout

    def emit(self, ev):
        with self._lock:
            if self._finished.is_set():
                return
            if ev["type"] == "error":
                # Like E2B: one error per cell, the first the kernel reports.
                if self._errored:
                    return
                self._errored = True
                if self.interrupt_reason == "timeout" and ev["name"] != "TimeoutError":
                    ev = error_event("TimeoutError",
                                     "Execution timed out after %g seconds" % self.timeout,
                                     ev.get("traceback", ""))
            self._events.put(ev)

    def stream(self, name, text):
        if text:
            self.emit({"type": name, "text": text, "timestamp": now_iso()})

    def finish(self):
        with self._lock:
            if self._finished.is_set():
                return
            if self.interrupt_reason == "timeout" and not self._errored:
                self._errored = True
                self._events.put(error_event(
                    "TimeoutError", "Execution timed out after %g seconds" % self.timeout))
            self._finished.set()
            self._events.put(END)

    @property
    def errored(self):
        return self._errored

    def finished(self):
        return self._finished.is_set()

    # --- control (any thread) ---
    def request_interrupt(self, reason="interrupt"):
        with self._lock:
            if self.interrupt_reason is None:
                self.interrupt_reason = reason
        self._interrupt.set()

    def interrupt_requested(self):
        if self._interrupt.is_set():
            return True
        if self.deadline is not None and time.monotonic() >= self.deadline:
            self.request_interrupt("timeout")
            return True
        return False

    # --- reader side ---
    def next_event(self, timeout):
        """The next event, or None after timeout seconds without one."""
        try:
            return self._events.get(timeout=timeout)
        except queue.Empty:
            return None
