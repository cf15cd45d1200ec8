"""Fixtures of the space_sandbox tests. They drive a real spaced, configured only by the
environment a user would set (SPACE_URL, SPACE_API_KEY); tests/python/run_pytest.sh
starts that spaced and installs the SDK's wheel (ctest python_sdk_test)."""

import os
import time
import uuid
from typing import Callable, List

import httpx
import pytest

from space_sandbox import Sandbox

for _v in ("SPACE_URL", "SPACE_API_KEY"):
    if not os.environ.get(_v):
        raise RuntimeError(f"{_v} must be set (run through tests/python/run_pytest.sh)")

RUN = f"py-{os.getpid()}-{uuid.uuid4().hex[:8]}"
MAX_FILE_BYTES = int(os.environ.get("SPACE_MAX_FILE_BYTES", "0"))


def spaced_flag(name: str, default: int = 0) -> int:
    """The value of one of spaced's flags, as run_pytest.sh started it."""
    args = os.environ.get("SPACE_SPACED_ARGS", "").split()
    for i, a in enumerate(args[:-1]):
        if a == name:
            return int(args[i + 1])
    return default


@pytest.fixture(scope="session")
def run_id() -> str:
    return RUN


@pytest.fixture(scope="session")
def make_sandbox():
    """Creates sandboxes tagged with this run's metadata; kills them all at the end."""
    made: List[Sandbox] = []

    def make(**kw) -> Sandbox:
        meta = {"suite": RUN, **kw.pop("metadata", {})}
        sb = Sandbox.create(timeout=kw.pop("timeout", 600), metadata=meta, **kw)
        made.append(sb)
        return sb

    yield make
    for sb in made:
        try:
            sb.kill()
        finally:
            sb.close()


@pytest.fixture(scope="module")
def sb(make_sandbox) -> Sandbox:
    """One sandbox shared by a module's tests."""
    return make_sandbox(metadata={"role": "shared"}, envs={"GREETING": "hello from envs"})


CODE_TEMPLATE = "code-interpreter"


@pytest.fixture(scope="session")
def code_template() -> str:
    """The built-in ``code-interpreter`` template, ensured once per session: spaced imports
    it from the shared template cache (about a minute for a fresh data dir) or builds it
    from Debian on a machine that has none (bounded at 25 minutes)."""
    url, key = os.environ["SPACE_URL"], os.environ["SPACE_API_KEY"]
    deadline = time.monotonic() + 1500
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, trust_env=False,
                      timeout=httpx.Timeout(420.0, connect=10.0)) as c:
        r = c.post("/v1/templates", params={"wait": "300s"}, json={"builtin": CODE_TEMPLATE})
        if r.status_code == 202:
            op = r.json()["operation"]
            while op.get("state") not in ("succeeded", "failed"):
                assert time.monotonic() < deadline, f"building {CODE_TEMPLATE} took too long: {op}"
                op = c.get(f"/v1/operations/{op['id']}", params={"wait": "60s"}).json()
            assert op["state"] == "succeeded", op
        else:
            assert r.status_code == 201, (r.status_code, r.text)
    return CODE_TEMPLATE


@pytest.fixture(scope="module")
def code_sb(make_sandbox, code_template) -> Sandbox:
    """One code-interpreter sandbox shared by a module's tests."""
    return make_sandbox(template=code_template, metadata={"role": "code"})


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
