"""Fixtures of the E2B code-interpreter Python SDK suite: the unmodified
`e2b-code-interpreter` package (pinned with its dependencies in tests/python/requirements.lock)
against a real spaced, configured only by the environment an E2B user would set:
E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY (tests/python/run_pytest.sh, ctest
e2b_code_interpreter_python_sdk_test).

Before any test, the session makes sure spaced has the built-in code-interpreter template
(the SDK's default template, code-interpreter-v1, maps to it) through SPACE's own API
(POST /v1/templates {"builtin": "code-interpreter"}; E2B_API_KEY is SPACE's operator key):
imported from the shared template cache, or built there on a miss."""

import json
import os
import time
import urllib.request
import uuid
from typing import List

import pytest
from e2b_code_interpreter import Sandbox

for _v in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY"):
    if not os.environ.get(_v):
        raise RuntimeError(f"{_v} must be set (run through tests/python/run_pytest.sh)")

RUN = f"e2b-ci-py-{os.getpid()}-{uuid.uuid4().hex[:8]}"
CREATED: List[object] = []


def _prepare_template() -> None:
    """Asks for the template and follows its operation: a wait is capped at 5 minutes a
    request, and a build on a cache miss can take longer."""
    t0 = time.monotonic()
    headers = {"Authorization": "Bearer " + os.environ["E2B_API_KEY"],
               "Content-Type": "application/json"}
    base = os.environ["E2B_API_URL"]
    req = urllib.request.Request(base + "/v1/templates?wait=300s", method="POST", headers=headers,
                                 data=json.dumps({"builtin": "code-interpreter"}).encode())
    with urllib.request.urlopen(req, timeout=360) as r:
        op = json.loads(r.read())["operation"]
    deadline = time.monotonic() + 1800
    while op.get("state") not in ("succeeded", "failed") and time.monotonic() < deadline:
        req = urllib.request.Request(f"{base}/v1/operations/{op['id']}?wait=300s", headers=headers)
        with urllib.request.urlopen(req, timeout=360) as r:
            op = json.loads(r.read())
    assert op.get("state") == "succeeded", op
    print(f"code-interpreter template ready in {time.monotonic() - t0:.1f} s")


def pytest_sessionstart(session) -> None:
    _prepare_template()


def create(**opts) -> Sandbox:
    sbx = Sandbox.create(timeout=opts.pop("timeout", 600), metadata={"suite": RUN}, **opts)
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


@pytest.fixture(scope="module")
def sbx() -> Sandbox:
    return create()
