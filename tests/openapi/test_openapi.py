"""src/api/openapi.json against a live spaced: it is a valid OpenAPI 3.1 document, it is
what GET /openapi.json serves, every route in it is served (the route table and the spec
name the same routes: api_routes_test), and the answers of real use of every route validate
against its schemas."""

import io
import json
import tarfile
import time
import urllib.parse

import openapi_spec_validator
import pytest

from conftest import SPEC_FILE

PROBE = {"id": "sb-openapiprobe", "sandboxID": "sb-openapiprobe", "command_id": "cmd-probe",
         "snapshot_id": "snap-probe", "operation_id": "op-probe", "key": "key-probe",
         "port": "8080", "path": "x/y"}
METHODS = ["get", "put", "post", "delete", "patch", "head", "options"]


def routes(spec):
    return [(m.upper(), p) for p, item in spec["paths"].items() for m in METHODS if m in item]


def message(r):
    try:
        j = r.json()
    except ValueError:
        return ""
    if isinstance(j, dict):
        if isinstance(j.get("error"), dict):
            return j["error"].get("message", "")
        return str(j.get("message", ""))
    return ""


def test_spec_is_a_valid_openapi_31_document():
    spec = json.loads(SPEC_FILE.read_text())
    assert spec["openapi"].startswith("3.1.")
    openapi_spec_validator.validate(spec)


def test_spaced_serves_the_spec(api, spec):
    assert spec == json.loads(SPEC_FILE.read_text()), "rebuild spaced: its built-in spec is stale"
    r = api.call("GET", "/openapi.json", auth=False, expect=200)
    etag = r.headers["ETag"]
    assert etag.startswith('"')
    api.call("GET", "/openapi.json", auth=False, headers={"If-None-Match": etag}, expect=304)


def test_every_described_route_is_served(api, spec):
    """Each METHOD and path of the spec reaches a handler: not the router's 404/405 for what
    it does not serve, not the 500 of a table entry nothing serves. Ids are made up, so most
    answer "not found" from their handler; bodies are [] so that nothing is created."""
    for method, template in routes(spec):
        body = b"[]" if method in ("POST", "PUT", "PATCH") else None
        query = {"path": "/x"} if "/files" in template else None
        if template == "/v1/events":
            query = {"duration": "200ms"}  # a stream: ends by itself
        r = api.call(method, template, params=PROBE, query=query, body=body)
        what = f"{method} {template}: {r.status} {r.body[:200]!r}"
        assert r.status not in (405, 500, 501), what
        if r.status == 404 and method != "HEAD":
            assert not message(r).startswith("no route"), what


def test_unknown_routes_and_methods(api):
    r = api.raw("GET", "/v1/nothing-here")
    assert r.status == 404 and message(r).startswith("no route"), r.body
    r = api.raw("POST", "/v1/sandboxes/sb-x", body={})
    assert r.status == 405, r.body
    assert set(r.headers["Allow"].split(", ")) == {"GET", "PATCH", "DELETE"}
    assert r.json()["error"]["code"] == "invalid_argument"
    # The E2B control plane answers in its own format.
    r = api.raw("GET", "/sandboxes/sb-x/nothing", headers={"X-API-KEY": api.key})
    assert r.status == 404 and r.json()["code"] == 404, r.body
    r = api.raw("GET", "/mcp")
    assert r.status == 405 and r.headers["Allow"] == "POST"


@pytest.fixture(scope="module")
def sandbox(api):
    r = api.call("POST", "/v1/sandboxes", query={"wait": "120s"},
                 body={"template": "base", "timeout": 900, "metadata": {"suite": "openapi"}}, expect=201)
    sb = r.json()["sandbox"]
    yield sb["id"]
    api.raw("DELETE", f"/v1/sandboxes/{sb['id']}?wait=60s&delete_snapshots=1")


def test_v1_answers_validate(api, sandbox):
    sid = {"id": sandbox}
    # Access.
    api.call("GET", "/v1/whoami", expect=200)
    api.call("GET", "/v1/keys", expect=200)
    k = api.call("POST", "/v1/keys", body={"name": f"openapi-{int(time.time() * 1000)}"}, expect=201).json()
    api.call("DELETE", "/v1/keys/{key}", params={"key": k["id"]}, expect=200)
    api.call("POST", "/v1/keys", body={"name": "bad name!"}, expect=400)
    tok = api.call("POST", "/v1/sandboxes/{id}/tokens", params=sid, body={"scopes": ["files:read"], "ttl_s": 600}, expect=201).json()
    r = api.raw("GET", "/v1/whoami", headers={"Authorization": f"Bearer {tok['token']}"})
    api.checker.check("GET", "/v1/whoami", r)
    assert r.json()["kind"] == "token"
    api.call("GET", "/v1/whoami", auth=False, expect=401)

    # Sandboxes.
    api.call("GET", "/v1/sandboxes", query={"label": "suite=openapi"}, expect=200)
    api.call("GET", "/v1/sandboxes/{id}", params=sid, expect=200)
    api.call("GET", "/v1/sandboxes/{id}", params={"id": "sb-nope"}, expect=404)
    api.call("PATCH", "/v1/sandboxes/{id}", params=sid, body={"limits": {"output_bytes": 1 << 30}}, expect=200)
    api.call("POST", "/v1/sandboxes/{id}/timeout", params=sid, body={"timeout": 900}, expect=200)
    net = api.call("GET", "/v1/sandboxes/{id}/network", params=sid, expect=200).json()
    # (A sandbox made without networking answers 409: validated all the same.)
    api.call("PUT", "/v1/sandboxes/{id}/network", params=sid, body={"mode": net["mode"]})
    api.call("POST", "/v1/sandboxes", body={"colour": "red"}, expect=400)

    # Commands.
    c = api.call("POST", "/v1/sandboxes/{id}/commands", params=sid, body={"cmd": "echo hi; echo err >&2"}, expect=201).json()
    cid = {"id": sandbox, "command_id": c["id"]}
    api.call("GET", "/v1/sandboxes/{id}/commands/{command_id}", params=cid, query={"wait": "30s"}, expect=200)
    r = api.call("GET", "/v1/sandboxes/{id}/commands/{command_id}/output", params=cid, query={"stream": "stdout"}, expect=200)
    assert r.body == b"hi\n"
    api.call("GET", "/v1/sandboxes/{id}/commands/{command_id}/output", params=cid, query={"format": "mux"}, expect=200)
    api.call("GET", "/v1/sandboxes/{id}/commands/{command_id}/output", params=cid, query={"format": "sse"}, expect=200)
    # (The command's record may say "running" a moment after its exit record went out.)
    for _ in range(100):
        r = api.call("DELETE", "/v1/sandboxes/{id}/commands/{command_id}/output", params=cid)
        if r.status != 409:
            break
        time.sleep(0.1)
    assert r.status == 200, r.body
    api.call("GET", "/v1/sandboxes/{id}/commands", params=sid, expect=200)
    # The terminal is a WebSocket: a plain GET is told so (tests/integration/console_api_test
    # speaks the protocol itself).
    api.call("GET", "/v1/sandboxes/{id}/commands/{command_id}/terminal", params=cid, expect=426)
    # Events: a snapshot first; ?duration= ends the stream.
    r = api.call("GET", "/v1/events", query={"duration": "300ms"}, expect=200)
    assert r.body.startswith(b"retry: 2000\n\nevent: snapshot\n"), r.body[:200]
    api.call("GET", "/v1/events", query={"duration": "soon"}, expect=400)
    api.call("POST", "/v1/sandboxes/{id}/commands", params=sid, query={"stream": "mux"}, body={"argv": ["true"]}, expect=201)
    api.call("POST", "/v1/sandboxes/{id}/commands", params=sid, body={"argv": []}, expect=400)
    s = api.call("POST", "/v1/sandboxes/{id}/commands", params=sid, body={"cmd": "cat", "stdin": True}, expect=201).json()
    scid = {"id": sandbox, "command_id": s["id"]}
    api.call("POST", "/v1/sandboxes/{id}/commands/{command_id}/stdin", params=scid, query={"eof": "1"},
             body=b"typed", content_type="application/octet-stream", expect=200)
    api.call("GET", "/v1/sandboxes/{id}/commands/{command_id}", params=scid, query={"wait": "30s"}, expect=200)
    p = api.call("POST", "/v1/sandboxes/{id}/commands", params=sid, body={"cmd": "sleep 60", "pty": {"cols": 80, "rows": 24}}, expect=201).json()
    pcid = {"id": sandbox, "command_id": p["id"]}
    api.call("POST", "/v1/sandboxes/{id}/commands/{command_id}/resize", params=pcid, body={"cols": 100, "rows": 30}, expect=200)
    api.call("POST", "/v1/sandboxes/{id}/commands/{command_id}/signal", params=pcid, body={"signal": "KILL"}, expect=200)
    api.call("GET", "/v1/sandboxes/{id}/commands/{command_id}", params={"id": sandbox, "command_id": "cmd-nope"}, expect=404)

    # Files.
    f = {"path": "/tmp/oa/file.txt"}
    api.call("PUT", "/v1/sandboxes/{id}/files", params=sid, query=f, body=b"content\n", content_type="application/octet-stream", expect=200)
    r = api.call("GET", "/v1/sandboxes/{id}/files", params=sid, query=f, expect=200)
    assert r.body == b"content\n"
    api.call("GET", "/v1/sandboxes/{id}/files:stat", params=sid, query=f, expect=200)
    api.call("GET", "/v1/sandboxes/{id}/files:list", params=sid, query={"path": "/tmp/oa", "depth": 2}, expect=200)
    api.call("POST", "/v1/sandboxes/{id}/files:mkdir", params=sid, query={"path": "/tmp/oa/d/e"}, expect=200)
    api.call("POST", "/v1/sandboxes/{id}/files:rename", params=sid, body={"from": "/tmp/oa/file.txt", "to": "/tmp/oa/moved"}, expect=200)
    api.call("DELETE", "/v1/sandboxes/{id}/files", params=sid, query={"path": "/tmp/oa", "recursive": "1"}, expect=200)
    api.call("GET", "/v1/sandboxes/{id}/files", params=sid, query={"path": "/no/such"}, expect=404)

    # Ports.
    api.call("POST", "/v1/sandboxes/{id}/urls", params=sid, body={"port": 8080, "ttl": 60}, expect=200)
    api.call("POST", "/v1/sandboxes/{id}/urls", params=sid, body={"port": 0}, expect=400)
    api.call("GET", "/v1/sandboxes/{id}/ports/{port}/{path}", params={**sid, "port": 8080, "path": "x"})

    # Snapshots and forks.
    snap = api.call("POST", "/v1/sandboxes/{id}/snapshots", params=sid, query={"wait": "120s"}, expect=201).json()
    snap_id = {"snapshot_id": snap["snapshot"]["id"]}
    api.call("GET", "/v1/sandboxes/{id}/snapshots", params=sid, expect=200)
    api.call("GET", "/v1/snapshots", expect=200)
    api.call("GET", "/v1/snapshots/{snapshot_id}", params=snap_id, expect=200)
    api.call("DELETE", "/v1/snapshots/{snapshot_id}", params=snap_id, expect=200)
    fork = api.call("POST", "/v1/sandboxes/{id}/fork", params=sid, query={"wait": "120s"}, body={"count": 1}, expect=200).json()
    for child in fork["sandboxes"]:
        api.call("DELETE", "/v1/sandboxes/{id}", params={"id": child["id"]}, query={"wait": "60s"}, expect=200)

    # Lifecycle, as far as the runtime can.
    caps = api.call("GET", "/v1/sandboxes/{id}", params=sid, expect=200).json().get("capabilities", {})
    if caps.get("pause"):
        api.call("POST", "/v1/sandboxes/{id}/pause", params=sid, query={"wait": "60s"}, expect=200)
        api.call("POST", "/v1/sandboxes/{id}/pause", params=sid, expect=409)
        api.call("POST", "/v1/sandboxes/{id}/resume", params=sid, query={"wait": "60s"}, expect=200)

    # Operations and templates.
    ops = api.call("GET", "/v1/operations", query={"limit": 5}, expect=200).json()["operations"]
    api.call("GET", "/v1/operations/{operation_id}", params={"operation_id": ops[0]["id"]}, expect=200)
    api.call("GET", "/v1/templates", expect=200)
    build = api.call("POST", "/v1/templates", query={"wait": "120s"},
                     body={"name": "openapi-test", "spec": "FROM base\nENV OPENAPI=1\n"}, expect=201).json()
    api.call("GET", "/v1/templates/builds/{operation_id}/log", params={"operation_id": build["operation"]["id"]}, expect=200)
    api.call("POST", "/v1/templates", body={"name": "x", "spec": "FROM nowhere-to-be-found\n"}, expect=404)

    # MCP.
    api.call("POST", "/mcp", body={"jsonrpc": "2.0", "id": 1, "method": "ping"}, expect=200)
    api.call("POST", "/mcp", body={"jsonrpc": "2.0", "method": "notifications/initialized"}, expect=202)
    api.call("POST", "/mcp", body="{", expect=400)


def test_e2b_answers_validate(api):
    e2b = {"X-API-KEY": api.key}
    sb = api.call("POST", "/v2/sandboxes", auth=False, headers=e2b,
                  body={"templateID": "base", "timeout": 300, "metadata": {"suite": "openapi"}}, expect=201).json()
    sid = {"sandboxID": sb["sandboxID"]}
    try:
        api.call("GET", "/sandboxes", auth=False, headers=e2b, expect=200)
        api.call("GET", "/v2/sandboxes", auth=False, headers=e2b, query={"state": "running,paused"}, expect=200)
        api.call("GET", "/sandboxes/{sandboxID}", params=sid, auth=False, headers=e2b, expect=200)
        api.call("GET", "/sandboxes/{sandboxID}/metrics", params=sid, auth=False, headers=e2b, expect=200)
        api.call("POST", "/sandboxes/{sandboxID}/timeout", params=sid, auth=False, headers=e2b, body={"timeout": 600}, expect=204)
        api.call("POST", "/v2/sandboxes/{sandboxID}/connect", params=sid, auth=False, headers=e2b, body={"timeout": 600}, expect=200)
        api.call("POST", "/sandboxes/{sandboxID}/pause", params=sid, auth=False, headers=e2b)
        api.call("POST", "/sandboxes/{sandboxID}/resume", params=sid, auth=False, headers=e2b, body={})
        api.call("GET", "/sandboxes/{sandboxID}", params={"sandboxID": "sb-nope"}, auth=False, headers=e2b, expect=404)
        api.call("GET", "/sandboxes", auth=False, expect=401)
    finally:
        api.call("DELETE", "/sandboxes/{sandboxID}", params=sid, auth=False, headers=e2b, expect=204)


def test_volume_answers_validate(api):
    """Named volumes (docs/volumes.md) and their E2B face: every route, good and bad input."""
    name = f"openapi-{int(time.time() * 1000)}"
    v = api.call("POST", "/v1/volumes", body={"name": name, "size_bytes": 16 << 20}, expect=201).json()
    vp = {"volume": name}
    try:
        api.call("POST", "/v1/volumes", body={"name": "bad name"}, expect=400)
        api.call("POST", "/v1/volumes", body={"name": name}, expect=409)
        api.call("GET", "/v1/volumes", expect=200)
        api.call("GET", "/v1/volumes/{volume}", params=vp, expect=200)
        api.call("GET", "/v1/volumes/{volume}", params={"volume": "no-such"}, expect=404)
        f = {"path": "/d/file.txt"}
        api.call("PUT", "/v1/volumes/{volume}/files", params=vp, query=f, body=b"vol\n",
                 content_type="application/octet-stream", expect=200)
        assert api.call("GET", "/v1/volumes/{volume}/files", params=vp, query=f, expect=200).body == b"vol\n"
        api.call("GET", "/v1/volumes/{volume}/files:stat", params=vp, query=f, expect=200)
        api.call("GET", "/v1/volumes/{volume}/files:list", params=vp, query={"path": "/", "depth": 2}, expect=200)
        api.call("POST", "/v1/volumes/{volume}/files:mkdir", params=vp, query={"path": "/e/f"}, expect=200)
        api.call("POST", "/v1/volumes/{volume}/files:rename", params=vp, body={"from": "/d/file.txt", "to": "/moved"}, expect=200)
        api.call("DELETE", "/v1/volumes/{volume}/files", params=vp, query={"path": "/e", "recursive": "1"}, expect=200)
        api.call("GET", "/v1/volumes/{volume}/files", params=vp, query={"path": "/no/such"}, expect=404)

        e2b = {"X-API-KEY": api.key}
        ev = {"volumeID": v["id"]}
        api.call("GET", "/volumes", auth=False, headers=e2b, expect=200)
        got = api.call("GET", "/volumes/{volumeID}", params=ev, auth=False, headers=e2b, expect=200).json()
        bearer = {"Authorization": f"Bearer {got['token']}"}
        api.call("PUT", "/volumecontent/{volumeID}/file", params=ev, query={"path": "/e2b.txt"}, auth=False,
                 headers=bearer, body=b"e2b", content_type="application/octet-stream", expect=201)
        assert api.call("GET", "/volumecontent/{volumeID}/file", params=ev, query={"path": "/e2b.txt"},
                        auth=False, headers=bearer, expect=200).body == b"e2b"
        api.call("GET", "/volumecontent/{volumeID}/path", params=ev, query={"path": "/e2b.txt"}, auth=False, headers=bearer, expect=200)
        api.call("PATCH", "/volumecontent/{volumeID}/path", params=ev, query={"path": "/e2b.txt"}, auth=False,
                 headers=bearer, body={"mode": 420}, expect=400)
        api.call("POST", "/volumecontent/{volumeID}/dir", params=ev, query={"path": "/dd"}, auth=False, headers=bearer, expect=201)
        api.call("GET", "/volumecontent/{volumeID}/dir", params=ev, query={"path": "/"}, auth=False, headers=bearer, expect=200)
        api.call("DELETE", "/volumecontent/{volumeID}/path", params=ev, query={"path": "/dd"}, auth=False, headers=bearer, expect=204)
        api.call("GET", "/volumecontent/{volumeID}/dir", params=ev, auth=False, expect=401)
        other = api.call("POST", "/volumes", auth=False, headers=e2b, body={"name": name + "-e2b"}, expect=201).json()
        api.call("DELETE", "/volumes/{volumeID}", params={"volumeID": other["volumeID"]}, auth=False, headers=e2b, expect=204)
        api.call("DELETE", "/volumes/{volumeID}", params={"volumeID": other["volumeID"]}, auth=False, headers=e2b, expect=404)
    finally:
        api.call("DELETE", "/v1/volumes/{volume}", params=vp, expect=200)


def test_e2b_template_build_answers_validate(api):
    """E2B's template build API (Template.build's calls): every route, good and bad input."""
    e2b = {"X-API-KEY": api.key}
    name = f"openapi-tpl-{int(time.time() * 1000)}"
    req = api.call("POST", "/v3/templates", body={"name": name, "tags": ["v1"], "cpuCount": 1, "memoryMB": 512},
                   auth=False, headers=e2b, expect=202).json()
    assert (req["templateID"], req["tags"]) == (name, ["v1"])
    api.call("POST", "/v3/templates", body={"name": "Bad Name!"}, auth=False, headers=e2b, expect=400)
    api.call("POST", "/v3/templates", body={"tags": ["x"]}, auth=False, headers=e2b, expect=400)
    api.call("POST", "/v3/templates", body={"name": name}, auth=False, expect=401)

    files = {"templateID": name, "hash": "ab" * 32}
    link = api.call("GET", "/templates/{templateID}/files/{hash}", params=files, auth=False, headers=e2b,
                    expect=201).json()
    assert link["present"] is False and "/e2b-template-files/" in link["url"], link
    api.call("GET", "/templates/{templateID}/files/{hash}", params={**files, "hash": "nothex"}, auth=False,
             headers=e2b, expect=400)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = b"copied\n"
        info = tarfile.TarInfo("f.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    sig = urllib.parse.parse_qs(urllib.parse.urlparse(link["url"]).query)["sig"][0]
    api.call("PUT", "/e2b-template-files/{hash}", params={"hash": files["hash"]}, query={"sig": "0" * 64},
             auth=False, body=buf.getvalue(), content_type="application/octet-stream", expect=403)
    api.call("PUT", "/e2b-template-files/{hash}", params={"hash": files["hash"]}, query={"sig": sig},
             auth=False, body=buf.getvalue(), content_type="application/octet-stream", expect=200)
    again = api.call("GET", "/templates/{templateID}/files/{hash}", params=files, auth=False, headers=e2b,
                     expect=201).json()
    assert again == {"present": True}, again

    build = {"templateID": name, "buildID": req["buildID"]}
    api.call("GET", "/templates/{templateID}/builds/{buildID}/status", params=build, auth=False, headers=e2b,
             expect=200)
    steps = {"fromTemplate": "base:latest", "steps": [
        {"type": "COPY", "args": ["f.txt", "/f.txt", "", ""], "filesHash": files["hash"]},
        {"type": "RUN", "args": ["cat /f.txt"]}, {"type": "ENV", "args": ["A", "b"]},
        {"type": "WORKDIR", "args": ["/"]}], "startCmd": "sleep 1000", "readyCmd": "true"}
    api.call("POST", "/v2/templates/{templateID}/builds/{buildID}", params={**build, "buildID": "bld-nosuch"},
             auth=False, headers=e2b, body=steps, expect=404)
    api.call("POST", "/v2/templates/{templateID}/builds/{buildID}", params=build, auth=False, headers=e2b,
             body={"fromImage": "someone/image:1"}, expect=400)
    api.call("POST", "/v2/templates/{templateID}/builds/{buildID}", params=build, auth=False, headers=e2b,
             body={"fromTemplate": "base:latest", "steps": [{"type": "ADD", "args": ["x"]}]}, expect=400)
    api.call("POST", "/v2/templates/{templateID}/builds/{buildID}", params=build, auth=False, headers=e2b,
             body=steps, expect=202)
    api.call("POST", "/v2/templates/{templateID}/builds/{buildID}", params=build, auth=False, headers=e2b,
             body=steps, expect=409)
    end = time.monotonic() + 120
    while True:
        st = api.call("GET", "/templates/{templateID}/builds/{buildID}/status", params=build, auth=False,
                      headers=e2b, expect=200).json()
        if st["status"] in ("ready", "error") or time.monotonic() > end:
            break
        time.sleep(0.5)
    assert st["status"] == "ready", st
    logs = api.call("GET", "/templates/{templateID}/builds/{buildID}/status", params=build, query={"logsOffset": 0},
                    auth=False, headers=e2b, expect=200).json()
    assert any("copied" in m for m in logs["logs"]), logs
    api.call("GET", "/templates/{templateID}/builds/{buildID}/status", params=build, query={"logsOffset": -1},
             auth=False, headers=e2b, expect=400)
    api.call("GET", "/templates/aliases/{alias}", params={"alias": name + ":v1"}, auth=False, headers=e2b, expect=200)
    api.call("GET", "/templates/aliases/{alias}", params={"alias": "openapi-nosuch"}, auth=False, headers=e2b,
             expect=404)

    # Tags: more names of the build; a bad or unknown one changes nothing.
    tagged = api.call("POST", "/templates/tags", body={"target": name + ":v1", "tags": ["prod"]}, auth=False,
                      headers=e2b, expect=201).json()
    assert tagged["tags"] == ["prod"] and tagged["buildID"], tagged
    api.call("POST", "/templates/tags", body={"target": name + ":v1", "tags": ["bad tag!"]}, auth=False,
             headers=e2b, expect=400)
    api.call("POST", "/templates/tags", body={"target": "openapi-nosuch:x", "tags": ["y"]}, auth=False,
             headers=e2b, expect=404)
    api.call("POST", "/templates/tags", body={"target": name + ":v1", "tags": []}, auth=False, headers=e2b,
             expect=400)
    listed = api.call("GET", "/templates/{templateID}/tags", params={"templateID": name}, auth=False, headers=e2b,
                      expect=200).json()
    assert sorted(t["tag"] for t in listed) == ["prod", "v1"], listed
    assert len({t["buildID"] for t in listed}) == 1, listed
    api.call("DELETE", "/templates/tags", body={"name": name, "tags": ["prod"]}, auth=False, headers=e2b,
             expect=204)
    api.call("DELETE", "/templates/tags", body={"name": name, "tags": ["prod"]}, auth=False, headers=e2b,
             expect=404)
    api.call("GET", "/templates/{templateID}/tags", params={"templateID": "openapi-nosuch"}, auth=False,
             headers=e2b, expect=404)


def test_every_route_was_validated(api, spec):
    """Run last: the tests above validated an answer of every route of the spec."""
    seen = {(m, t) for m, t, _ in api.checked}
    missing = [f"{m} {p}" for m, p in routes(spec) if (m, p) not in seen]
    assert not missing, missing
