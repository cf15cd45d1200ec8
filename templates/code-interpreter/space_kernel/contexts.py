"""Contexts: named, stateful interpreters, and the registry that owns them.

A Context runs its jobs one at a time, in submission order, on its own worker thread, so
a slow HTTP reader never holds up the kernel and two requests to one context queue up (as
E2B's server does). restart() and delete() may be called while a cell runs: the
interpreter is killed, the running cell ends with an error event, and (for restart) a new
interpreter starts with the same id and cwd. A context whose interpreter died starts a new
one for its next cell. The Registry is thread-safe.
"""

import logging
import os
import queue
import threading
import uuid

from space_kernel.backend import BackendError
from space_kernel.jobs import error_event
from space_kernel.lang import RequestError, normalize_language
from space_kernel.proc_backend import BashBackend, NodeBackend
from space_kernel.python_backend import PythonBackend

log = logging.getLogger("space-kernel")

BACKENDS = {"python": PythonBackend, "javascript": NodeBackend, "bash": BashBackend}
# E2B starts these two at boot; bash starts on first use.
BOOT_LANGUAGES = ("python", "javascript")
# A new python context costs an ipykernel start (~2 s on 2 cores): one is kept started
# ahead, so "a new context per request" answers as fast as a warm one.
SPARE_LANGUAGES = ("python",)


class Context:
    def __init__(self, language, cwd, env, state_dir):
        self.id = str(uuid.uuid4())
        self.language = language
        self.cwd = cwd
        self._env = env
        self._state_dir = state_dir
        self._jobs = queue.Queue()
        self._mu = threading.Lock()  # held by the worker while it runs a job
        self._backend = None
        self._closed = False
        self._running = None
        self._worker = threading.Thread(target=self._work, daemon=True,
                                        name="ctx-%s" % self.id[:8])

    def to_json(self):
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    def _new_backend(self):
        b = BACKENDS[self.language](self.cwd, self._env, self._state_dir)
        b.start()
        return b

    def start(self):
        """Starts the interpreter (blocks until it is ready) and the worker."""
        self._backend = self._new_backend()
        self._worker.start()

    def alive(self):
        return self._backend is not None and self._backend.alive()

    def submit(self, job):
        job.context_id = self.id
        if self._closed:
            job.emit(error_event("ContextDeleted", "Context %s was deleted" % self.id))
            job.finish()
            return
        self._jobs.put(job)

    def _work(self):
        while True:
            job = self._jobs.get()
            if job is None:
                while True:  # a job submitted while closing
                    try:
                        late = self._jobs.get_nowait()
                    except queue.Empty:
                        return
                    if late is not None:
                        self._run(late)
            with self._mu:
                self._run(job)

    def _run(self, job):
        if self._closed:
            job.emit(error_event("ContextDeleted", "Context %s was deleted" % self.id))
            job.finish()
            return
        if job.interrupt_requested():
            # Interrupted (or its client left) before it started: never run it.
            job.emit(error_event("KeyboardInterrupt", "Execution interrupted before it started"))
            job.finish()
            return
        if self._backend is None or not self._backend.alive():
            if self._backend is not None:
                self._backend.kill()
            try:
                self._backend = self._new_backend()
            except BackendError as e:
                self._backend = None
                job.emit(error_event("KernelStartError", str(e)))
                job.finish()
                return
        job.start()
        self._running = job
        try:
            self._backend.run(job)
        except BaseException as e:  # a bug, a broken pipe: the cell still ends, the worker lives
            log.exception("context %s: cell failed", self.id)
            job.emit(error_event("InternalError", "space-kernel: %s" % e))
        finally:
            self._running = None
            job.finish()

    def interrupt(self):
        job = self._running
        if job is not None:
            job.request_interrupt("interrupt")

    def restart(self):
        """Kills the interpreter (ending a running cell with ContextRestarting) and starts a
        fresh one. Blocks until it is ready. Raises BackendError."""
        backend = self._backend
        if backend is not None:
            backend.dying_reason = "restart"
            backend.kill()
        with self._mu:
            if self._backend is not None and self._backend is not backend:
                return  # the worker already replaced it
            self._backend = None
            self._backend = self._new_backend()

    def close(self):
        self._closed = True
        backend = self._backend
        if backend is not None:
            backend.dying_reason = "delete"
            backend.kill()
        self._jobs.put(None)  # queued jobs before it end with ContextDeleted in _run


class Registry:
    def __init__(self, default_cwd, env, state_dir, spares=True):
        self.default_cwd = default_cwd
        self.env = env
        self.state_dir = state_dir
        self._spare_languages = SPARE_LANGUAGES if spares else ()
        self._spares = {}  # language -> a started Context, not listed
        self._refilling = set()
        self._shut = False
        self._lock = threading.Lock()
        self._contexts = {}  # id -> Context, in creation order
        self._defaults = {}  # language -> id
        self._default_locks = {lang: threading.Lock() for lang in BACKENDS}

    def create(self, language=None, cwd=None):
        lang = normalize_language(language)
        if cwd is None or cwd == "":
            cwd = self.default_cwd
        if not isinstance(cwd, str):
            raise RequestError(400, "invalid_argument", "cwd must be a string")
        if not os.path.isabs(cwd):
            cwd = os.path.join(self.default_cwd, cwd)
        if not os.path.isdir(cwd):
            raise RequestError(400, "invalid_argument", "cwd %s is not a directory" % cwd)
        ctx = self._take_spare(lang, cwd)
        if ctx is None:
            ctx = Context(lang, cwd, self.env, self.state_dir)
            try:
                ctx.start()
            except BackendError as e:
                raise RequestError(500, "internal", str(e))
        with self._lock:
            self._contexts[ctx.id] = ctx
        self.refill(lang)
        log.info("context %s (%s) created in %s", ctx.id, lang, cwd)
        return ctx

    def _take_spare(self, lang, cwd):
        with self._lock:
            spare = self._spares.get(lang)
            if spare is None or spare.cwd != cwd:
                return None
            del self._spares[lang]
        if not spare.alive():
            spare.close()
            return None
        return spare

    def refill(self, lang):
        """Starts a spare context for lang in the background, if it keeps one."""
        if lang not in self._spare_languages:
            return
        with self._lock:
            if self._shut or lang in self._spares or lang in self._refilling:
                return
            self._refilling.add(lang)

        def make():
            ctx = Context(lang, self.default_cwd, self.env, self.state_dir)
            try:
                ctx.start()
            except BackendError as e:
                log.warning("spare %s context: %s", lang, e)
                ctx = None
            with self._lock:
                self._refilling.discard(lang)
                if ctx is not None and not self._shut and lang not in self._spares:
                    self._spares[lang] = ctx
                    ctx = None
            if ctx is not None:
                ctx.close()

        threading.Thread(target=make, daemon=True, name="spare-%s" % lang).start()

    def get(self, context_id):
        with self._lock:
            ctx = self._contexts.get(context_id)
        if ctx is None:
            raise RequestError(404, "not_found", "Context %s not found" % context_id)
        return ctx

    def default(self, language):
        """The language's default context, created the first time (E2B's semantics)."""
        lang = normalize_language(language)
        with self._default_locks[lang]:
            with self._lock:
                cid = self._defaults.get(lang)
                if cid in self._contexts:
                    return self._contexts[cid]
            ctx = self.create(lang)
            with self._lock:
                self._defaults[lang] = ctx.id
            return ctx

    def list(self):
        with self._lock:
            return [c.to_json() for c in self._contexts.values()]

    def delete(self, context_id):
        ctx = self.get(context_id)
        with self._lock:
            self._contexts.pop(context_id, None)
            for lang, cid in list(self._defaults.items()):
                if cid == context_id:
                    del self._defaults[lang]
        ctx.close()
        log.info("context %s deleted", context_id)

    def boot(self):
        """Starts the default python and javascript contexts in the background."""
        def make(lang):
            try:
                self.default(lang)
            except Exception as e:
                log.warning("default %s context: %s", lang, e)
        for lang in BOOT_LANGUAGES:
            threading.Thread(target=make, args=(lang,), daemon=True).start()

    def shutdown(self):
        with self._lock:
            self._shut = True
            contexts = list(self._contexts.values()) + list(self._spares.values())
            self._spares.clear()
            self._contexts.clear()
            self._defaults.clear()
        for ctx in contexts:
            ctx.close()
