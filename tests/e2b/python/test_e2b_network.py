"""Egress under policy and ports by URL through the unmodified E2B Python SDK
(docs/networking.md, docs/ports.md).

The egress cases need the fake internet that ctest's e2b_sdk_test makes for
E2bPythonSdkTest.NetworkUnderPolicy (tests/e2b/e2b_sdk_test.cc): 203.0.113.10 and .66 with
HTTP servers that log every connection to SPACE_FAKE_INTERNET_LOG, so "blocked" means that
no connection reached the server, and api.example.test resolving to .10. Without it they
are skipped (the plain e2b_python_sdk_test run); the port cases run anywhere."""

import os
import time
from urllib.parse import urlparse

import httpx
import pytest
from e2b import AsyncSandbox, CommandExitException

from conftest import RUN, create

API = os.environ["E2B_API_URL"]
NET_LOG = os.environ.get("SPACE_FAKE_INTERNET_LOG", "")
needs_internet = pytest.mark.skipif(not NET_LOG, reason="no fake internet here")

# Enforcement must not depend on the proxy variables, so the transparent path is tested;
# wget where the template has it (busybox's; its -T crashes), curl otherwise.
FETCH = ("unset http_proxy HTTP_PROXY https_proxy HTTPS_PROXY; "
         "if command -v wget >/dev/null; then wget -q -O - {url}; else curl -fsS --max-time 20 {url}; fi")


def reached(listen: str) -> int:
    with open(NET_LOG, encoding="utf-8") as f:
        return sum(1 for line in f if f'"listen": "{listen}"' in line and '"kind": "connect"' in line)


def fetch(sbx, url: str):
    return sbx.commands.run(FETCH.format(url=url), timeout=60)


@needs_internet
def test_allow_internet_access_true_reaches_public_addresses_false_reaches_nothing():
    on = create(metadata={"role": "egress-on"}, allow_internet_access=True)
    assert "GET /e2b-py-on" in fetch(on, "http://203.0.113.10/e2b-py-on").stdout
    off = create(metadata={"role": "egress-off"}, allow_internet_access=False)
    before = reached("203.0.113.10:80")
    with pytest.raises(CommandExitException):
        fetch(off, "http://203.0.113.10/e2b-py-off")
    assert reached("203.0.113.10:80") == before, "a connection reached the server"


@needs_internet
def test_deny_out_blocks_a_cidr_and_allow_out_with_deny_all_allows_only_its_domains():
    deny = create(metadata={"role": "egress-deny"}, network={"deny_out": ["203.0.113.66/32"]})
    assert "GET /ok" in fetch(deny, "http://203.0.113.10/ok").stdout
    before = reached("203.0.113.66:80")
    with pytest.raises(CommandExitException):
        fetch(deny, "http://203.0.113.66/denied")
    assert reached("203.0.113.66:80") == before

    only = create(metadata={"role": "egress-only"},
                  network={"allow_out": ["api.example.test"], "deny_out": ["0.0.0.0/0"]})
    assert "GET /named" in fetch(only, "http://api.example.test/named").stdout
    before = reached("203.0.113.66:80")
    with pytest.raises(CommandExitException):
        fetch(only, "http://203.0.113.66/other")
    assert reached("203.0.113.66:80") == before


@needs_internet
@pytest.mark.anyio
async def test_async_sandbox_egress_by_policy():
    sbx = await AsyncSandbox.create("base", timeout=300, metadata={"suite": RUN, "role": "egress-async"},
                                    network={"deny_out": ["203.0.113.66/32"]})
    try:
        r = await sbx.commands.run(FETCH.format(url="http://203.0.113.10/async-ok"), timeout=60)
        assert "GET /async-ok" in r.stdout
        before = reached("203.0.113.66:80")
        with pytest.raises(CommandExitException):
            await sbx.commands.run(FETCH.format(url="http://203.0.113.66/async-denied"), timeout=60)
        assert reached("203.0.113.66:80") == before
    finally:
        await sbx.kill()


def get_through(host: str, headers=None) -> httpx.Response:
    """A request to spaced's port with the sandbox host as Host (*.localhost is not in this
    machine's resolver)."""
    port = urlparse(API).port
    return httpx.get(f"http://127.0.0.1:{port}/hostname", headers={"Host": host, **(headers or {})},
                     trust_env=False, timeout=30)


def serve(sbx, port: int) -> None:
    sbx.commands.run(f"mkdir -p /w && echo port-ok > /w/hostname && busybox httpd -p {port} -h /w")


def test_get_host_and_traffic_access_token_without_public_traffic():
    sbx = create(metadata={"role": "ports-private"}, network={"allow_public_traffic": False})
    assert sbx.get_host(3000) == f"3000-{sbx.sandbox_id}.localhost:{urlparse(API).port}"
    assert sbx.traffic_access_token and sbx.traffic_access_token.startswith("tt1.")
    serve(sbx, 3000)
    token = {"e2b-traffic-access-token": sbx.traffic_access_token}
    r = None
    for _ in range(100):
        r = get_through(sbx.get_host(3000), token)
        if r.status_code == 200:
            break
        time.sleep(0.05)
    assert (r.status_code, r.text) == (200, "port-ok\n")
    assert get_through(sbx.get_host(3000)).status_code == 401
    assert get_through(sbx.get_host(3000), {"e2b-traffic-access-token": "tt1.bogus"}).status_code == 403


def test_ports_are_public_by_default_as_on_e2b():
    sbx = create(metadata={"role": "ports-public"})
    assert sbx.traffic_access_token is None
    serve(sbx, 3001)
    r = None
    for _ in range(100):
        r = get_through(sbx.get_host(3001))
        if r.status_code == 200:
            break
        time.sleep(0.05)
    assert r.status_code == 200
    # Nothing listening: a plain 502 naming the port.
    r = get_through(sbx.get_host(3999))
    assert r.status_code == 502 and "3999" in r.text
