"""Fixtures of the E2B Python SDK suite: the unmodified `e2b` package (pinned in
tests/python/requirements.lock) against a real spaced, configured only by the environment
an E2B user would set: E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY (tests/python/run_pytest.sh,
ctest e2b_python_sdk_test), plus SPACE_MAX_FILE_BYTES for the oversize-upload check."""

import os
import ssl
import time
import uuid
from typing import Callable, List

import pytest
from e2b import Sandbox

try:
    from e2b import FileNotFoundException
except ImportError:  # releases before FileNotFoundException (2.7) raise NotFoundException
    from e2b import NotFoundException as FileNotFoundException
try:
    from e2b import SandboxNotFoundException
except ImportError:  # likewise
    from e2b import NotFoundException as SandboxNotFoundException

for _v in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY"):
    if not os.environ.get(_v):
        raise RuntimeError(f"{_v} must be set (run through tests/python/run_pytest.sh)")

RUN = f"e2b-py-{os.getpid()}-{uuid.uuid4().hex[:8]}"
# spaced's CA when it serves TLS (run_pytest.sh --https, docs/tls.md): what the suite's own
# raw httpx calls, which ignore the environment (trust_env=False), verify spaced with.
TLS_CA = os.environ.get("SPACE_TLS_CA", "")
VERIFY = ssl.create_default_context(cafile=TLS_CA) if TLS_CA else True
MAX_FILE_BYTES = int(os.environ.get("SPACE_MAX_FILE_BYTES", "0"))
CREATED: List[Sandbox] = []


def create(**opts) -> Sandbox:
    meta = {"suite": RUN, **opts.pop("metadata", {})}
    # SPACE's busybox base by its full name: E2B's `base` is SPACE's e2b-base (docs/e2b-compat.md).
    sbx = Sandbox.create("base:latest", timeout=opts.pop("timeout", 600), metadata=meta, **opts)
    CREATED.append(sbx)
    return sbx


@pytest.fixture(scope="session", autouse=True)
def _kill_created():
    yield
    for s in CREATED:
        try:
            s.kill()
        except Exception:
            pass


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


def wait_for(pred: Callable[[], bool], what: str, seconds: float = 10.0) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")
