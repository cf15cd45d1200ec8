"""Fixtures of the OpenAPI tests: the live spaced (SPACE_URL, SPACE_API_KEY, set by
tests/python/run_pytest.sh), the spec as spaced serves it, and a checker that validates a
response against the operation's response schema in that spec (jsonschema, draft 2020-12).

Interpreter: the pinned venv of tests/openapi/requirements.lock, made from /usr/bin/python3."""

import json
import os
import pathlib
import urllib.error
import urllib.parse
import urllib.request

import pytest
import referencing
import jsonschema
from referencing.jsonschema import DRAFT202012

SPEC_FILE = pathlib.Path(__file__).resolve().parents[2] / "src" / "api" / "openapi.json"


class Response:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    @property
    def content_type(self):
        return (self.headers.get("Content-Type") or "").split(";")[0].strip()

    def json(self):
        return json.loads(self.body)


class Api:
    """Plain HTTP to spaced (stdlib only), every answer checked against the spec."""

    def __init__(self, url, key, checker):
        self.url, self.key, self.checker = url.rstrip("/"), key, checker
        self.checked = []  # (METHOD, template, status) of every validated answer

    def raw(self, method, path, body=None, headers=None, content_type="application/json", auth=True):
        h = {}
        if auth:
            h["Authorization"] = f"Bearer {self.key}"
        if body is not None:
            h["Content-Type"] = content_type
            if not isinstance(body, (bytes, str)):
                body = json.dumps(body)
            if isinstance(body, str):
                body = body.encode()
        h.update(headers or {})
        req = urllib.request.Request(self.url + path, data=body, method=method, headers=h)
        try:
            # Long enough for a first E2B create that imports or builds e2b-base (minutes on 2 busy cores).
            with urllib.request.urlopen(req, timeout=600) as r:
                return Response(r.status, r.headers, r.read())
        except urllib.error.HTTPError as e:
            return Response(e.code, e.headers, e.read())

    def call(self, method, template, params=None, query=None, expect=None, **kw):
        """Requests `template` (an OpenAPI path) with its {params} filled in and checks the
        answer against the spec; `expect` is the status it must have."""
        path = template
        for k, v in (params or {}).items():
            path = path.replace("{" + k + "}", urllib.parse.quote(str(v), safe="/" if k == "path" else ""))
        if query:
            path += "?" + urllib.parse.urlencode(query, doseq=True)
        r = self.raw(method, path, **kw)
        if expect is not None:
            assert r.status == expect, f"{method} {path}: {r.status} {r.body[:500]!r}"
        self.checker.check(method, template, r)
        self.checked.append((method, template, r.status))
        return r


class Checker:
    def __init__(self, spec):
        self.spec = spec
        resource = referencing.Resource.from_contents(spec, default_specification=DRAFT202012)
        self.registry = referencing.Registry().with_resource("urn:spec", resource)

    @staticmethod
    def _ptr(*parts):
        return "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in parts)

    def check(self, method, template, r):
        op = self.spec["paths"][template][method.lower()]
        responses = op["responses"]
        status = str(r.status)
        key = status if status in responses else "default"
        assert key in responses, f"{method} {template}: status {status} is not described"
        content = responses[key].get("content")
        if not content:
            return
        if not r.body and r.status in (204, 304):
            return
        ctype = r.content_type
        assert ctype in content, f"{method} {template} {status}: content type {ctype!r} not described ({list(content)})"
        if ctype != "application/json":
            return
        ref = "urn:spec#/" + self._ptr("paths", template, method.lower(), "responses", key, "content", ctype, "schema")
        validator = jsonschema.Draft202012Validator({"$ref": ref}, registry=self.registry,
                                                    format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
        errors = sorted(validator.iter_errors(json.loads(r.body)), key=lambda e: list(e.path))
        assert not errors, f"{method} {template} {status}: " + "; ".join(
            f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors[:5])


@pytest.fixture(scope="session")
def spaced():
    url, key = os.environ.get("SPACE_URL"), os.environ.get("SPACE_API_KEY")
    if not url or not key:
        pytest.fail("SPACE_URL and SPACE_API_KEY must be set (tests/python/run_pytest.sh does)")
    return url.rstrip("/"), key


@pytest.fixture(scope="session")
def spec(spaced):
    with urllib.request.urlopen(spaced[0] + "/openapi.json", timeout=30) as r:
        return json.loads(r.read())


@pytest.fixture(scope="session")
def api(spaced, spec):
    return Api(spaced[0], spaced[1], Checker(spec))
