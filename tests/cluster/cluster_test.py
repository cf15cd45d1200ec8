"""A SPACE cluster on one machine (issue 16, docs/cluster.md), driven end to end.

scripts/devcluster.sh starts 3 etcd members, 3 nodes and 2 gateways, each in a network
namespace of its own; these tests talk to them over HTTP from the root namespace and
break them (kill, restart, cut links) the way machines break. Real etcd, real spaced,
real crun sandboxes. Every wait is bounded; the cluster is torn down even on failure.

Run by ctest as `cluster_test` with Debian's /usr/bin/python3 (standard library only).
"""
import base64
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BIN = os.environ.get("SPACE_BIN", os.path.join(ROOT, "build", "bin"))
DEVCLUSTER = os.path.join(ROOT, "scripts", "devcluster.sh")
LEASE_TTL = 4
LOST_AFTER = 12

C = {}  # the cluster: dir, url, key, gateways, nodes, etcd


def devcluster(*args, check=True):
    p = subprocess.run(["bash", DEVCLUSTER, *args, "--dir", C["dir"]], capture_output=True, text=True,
                       timeout=180)
    if check and p.returncode != 0:
        raise AssertionError(f"devcluster {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p.stdout


def http(method, url, body=None, headers=None, timeout=30, key=True):
    h = dict(headers or {})
    if key:
        h.setdefault("Authorization", "Bearer " + C["key"])
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        h.setdefault("Content-Type", "application/json")
    req = urllib.request.Request(url, data=data, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        raw = e.read()
        status = e.code
    except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
        return 0, str(e)
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


def wait_until(pred, timeout, what):
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        last = pred()
        if last:
            return last
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def create(gateway=None, body=None, headers=None):
    status, b = http("POST", (gateway or C["url"]) + "/v1/sandboxes?wait=60s", body or {}, headers=headers,
                     timeout=90)
    return status, b


def exec_echo(gateway, sid, text):
    status, b = http("POST", f"{gateway}/v1/sandboxes/{sid}/commands", {"argv": ["echo", text]}, timeout=60)
    if status not in (200, 201, 202):
        return status, b
    s2, out = http("GET", f"{gateway}/v1/sandboxes/{sid}/commands/{b['id']}/output?stream=stdout&wait=30s",
                   timeout=40)
    return s2, out


def etcd_prefix(prefix):
    """Every key under prefix, read straight from etcd's JSON gateway (the invariant check)."""
    key = base64.b64encode(prefix.encode()).decode()
    end = base64.b64encode(prefix[:-1].encode() + bytes([prefix.encode()[-1] + 1])).decode()
    for ep in C["etcd"]:
        status, b = http("POST", ep + "/v3/kv/range", {"key": key, "range_end": end}, key=False, timeout=5)
        if status == 200:
            out = {}
            for kv in b.get("kvs", []):
                out[base64.b64decode(kv["key"]).decode()[len(prefix):]] = json.loads(base64.b64decode(kv["value"]))
            return out
    raise AssertionError("no etcd member answered")


def node_local(node):
    status, b = http("GET", C["nodes"][node] + "/v1/sandboxes", timeout=10)
    return [s["id"] for s in b["sandboxes"]] if status == 200 else None


def check_invariant(testcase):
    """No sandbox id is routed to two nodes, and a route names the node that runs it."""
    routes = etcd_prefix("/space/routes/")
    seen = {}
    for node in C["nodes"]:
        ids = node_local(node)
        if ids is None:
            continue  # that node is down
        for sid in ids:
            testcase.assertNotIn(sid, seen, f"{sid} runs on {seen.get(sid)} and {node}")
            seen[sid] = node
    for sid, r in routes.items():
        if sid in seen:
            testcase.assertEqual(r["node"], seen[sid], f"route of {sid} names {r['node']}, it runs on {seen[sid]}")


class EventStream:
    """GET /v1/events read on a thread of its own: every event, in order, as (name, data)."""

    def __init__(self, url, seconds):
        self.events, self.error = [], None
        self.cv = threading.Condition()
        req = urllib.request.Request(f"{url}/v1/events?duration={seconds}s",
                                     headers={"Authorization": "Bearer " + C["key"]})
        self.resp = urllib.request.urlopen(req, timeout=seconds + 30)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        name, data = None, ""
        try:
            for raw in self.resp:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    name = line[7:]
                elif line.startswith("data: "):
                    data += line[6:]
                elif line == "" and data:
                    with self.cv:
                        self.events.append((name, json.loads(data)))
                        self.cv.notify_all()
                    name, data = None, ""
        except Exception as e:  # the stream's end, or a broken one: the waits say which
            self.error = e
        with self.cv:
            self.cv.notify_all()

    def wait_for(self, pred, timeout, what):
        end = time.monotonic() + timeout
        with self.cv:
            while True:
                for ev in self.events:
                    if pred(*ev):
                        return ev
                left = end - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no event {what} within {timeout}s; got {self.events[-8:]!r}")
                self.cv.wait(left)

    def close(self):
        self.resp.close()


def setUpModule():
    if os.geteuid() != 0:
        raise unittest.SkipTest("needs root (network namespaces)")
    d = tempfile.mkdtemp(prefix="space-cluster-", dir="/tmp")
    os.rmdir(d)
    C["dir"] = d
    out = subprocess.run(["bash", DEVCLUSTER, "up", "--nodes", "3", "--dir", d, "--lease-ttl", str(LEASE_TTL),
                          "--lost-after", str(LOST_AFTER), "--bin", BIN], capture_output=True, text=True,
                         timeout=240)
    if out.returncode != 0:
        raise RuntimeError(f"devcluster up failed:\n{out.stdout}\n{out.stderr}")
    env = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    C["url"] = env["SPACE_URL"]
    C["key"] = env["SPACE_API_KEY"]
    C["gateways"] = env["SPACE_GATEWAYS"].split(",")
    C["nodes"] = dict(x.split("=", 1) for x in env["SPACE_NODES"].split(","))
    C["etcd"] = env["SPACE_ETCD"].split(",")


def tearDownModule():
    if "dir" in C:
        if os.environ.get("SPACE_KEEP_CLUSTER"):
            print("cluster kept under", C["dir"], file=sys.stderr)
            return
        for name in ["n1", "n2", "n3", "g1", "g2"]:
            log = os.path.join(C["dir"], name + ".log")
            if os.path.exists(log) and os.environ.get("SPACE_CLUSTER_LOGS"):
                with open(log) as f:
                    print(f"---- {name} ----\n" + f.read()[-4000:], file=sys.stderr)
        subprocess.run(["bash", DEVCLUSTER, "down", "--dir", C["dir"]], timeout=240)


class ClusterTest(unittest.TestCase):
    def tearDown(self):
        check_invariant(self)

    def test_01_bootstrap(self):
        for g in C["gateways"]:
            status, b = http("GET", g + "/readyz", key=False)
            self.assertEqual(status, 200, b)
            self.assertEqual(b["nodes"], 3)
        for n, url in C["nodes"].items():
            status, b = http("GET", url + "/readyz", key=False)
            self.assertEqual((status, b), (200, {"ready": True}), n)
        nodes = etcd_prefix("/space/nodes/")
        self.assertEqual(sorted(nodes), ["n1", "n2", "n3"])
        for name, rec in nodes.items():
            self.assertEqual(rec["address"], C["nodes"][name].split("//")[1])
            self.assertIn("oci", rec["runtimes"])
        # A gateway knows no credentials itself: the nodes refuse a wrong key.
        status, b = http("GET", C["url"] + "/v1/sandboxes", headers={"Authorization": "Bearer sk-wrong"})
        self.assertEqual(status, 401, b)

    def test_01b_keys_and_console_sessions_are_the_clusters(self):
        """A key made through a gateway works on every node at once; a console login holds
        on every node; logout and revocation reach every node."""
        g1, g2 = C["gateways"]
        nodes = list(C["nodes"].values())
        status, made = http("POST", g1 + "/v1/keys", {"name": "ci-shared"})
        self.assertIn(status, (200, 201), made)
        key = made["key"]
        self.assertEqual(made.get("scope"), "cluster", made)
        for url in nodes:  # at once: a node that has not heard of it yet asks etcd
            status, b = http("GET", url + "/v1/sandboxes", headers={"Authorization": "Bearer " + key})
            self.assertEqual(status, 200, (url, b))
        status, keys = http("GET", g2 + "/v1/keys")
        self.assertEqual(status, 200, keys)
        scopes = {k["name"]: k.get("scope") for k in keys["keys"]}
        self.assertEqual(scopes.get("ci-shared"), "cluster", keys)
        self.assertIn("node", scopes.values(), keys)
        status, b = http("POST", g2 + "/v1/keys", {"name": "ci-shared"})
        self.assertEqual(status, 409, b)
        own = [k for k in keys["keys"] if k.get("scope") == "node"][0]
        status, b = http("DELETE", g1 + "/v1/keys/" + own["id"])
        self.assertEqual(status, 409, b)

        def login(url):
            req = urllib.request.Request(url + "/ui/login", data=json.dumps({"api-key": key}).encode(),
                                         method="POST", headers={"Content-Type": "application/json",
                                                                 "Accept": "application/json"})
            with urllib.request.urlopen(req, timeout=10) as r:
                cookies = [v.split(";")[0] for k, v in r.headers.items() if k.lower() == "set-cookie"]
                return "; ".join(cookies), json.loads(r.read())["csrf"]

        def session(url, cookie):
            return http("GET", url + "/ui/session", headers={"Cookie": cookie, "Accept": "application/json"},
                        key=False)[0]

        cookie, csrf = login(g1)
        for url in nodes:
            self.assertEqual(session(url, cookie), 200, url)
            # A change with the session: allowed with its CSRF token (404: no such key), on any node.
            status, b = http("DELETE", url + "/v1/keys/no-such-key", key=False,
                             headers={"Cookie": cookie, "X-CSRF-Token": csrf})
            self.assertEqual(status, 404, (url, b))
            status, b = http("DELETE", url + "/v1/keys/no-such-key", key=False, headers={"Cookie": cookie})
            self.assertEqual(status, 403, (url, b))
        status, b = http("POST", nodes[1] + "/ui/logout", key=False,
                         headers={"Cookie": cookie, "X-CSRF-Token": csrf, "Accept": "application/json"})
        self.assertEqual(status, 200, b)
        wait_until(lambda: all(session(u, cookie) == 401 for u in nodes), 5, "the logout on every node")

        cookie2, _ = login(g2)
        self.assertEqual(session(nodes[2], cookie2), 200)
        status, b = http("DELETE", g1 + "/v1/keys/ci-shared")
        self.assertEqual(status, 200, b)

        def refused_everywhere():
            return all(http("GET", u + "/v1/sandboxes", headers={"Authorization": "Bearer " + key})[0] == 401
                       and session(u, cookie2) == 401 for u in nodes)
        wait_until(refused_everywhere, 5, "the revoked key refused on every node")

    def test_01c_a_template_reaches_the_node_that_needs_it(self):
        """A template built on one node is pulled, by digest, by the node a create lands on;
        once, and by digest as well as by name."""
        n1, n2, n3 = (C["nodes"][n] for n in ("n1", "n2", "n3"))
        status, b = http("POST", n1 + "/v1/templates?wait=60s",
                         {"name": "ci-pulled", "tag": "v1", "spec": "FROM base\nRUN echo pulled-ok > /marker\n"},
                         timeout=90)
        self.assertEqual(status, 201, b)
        digest = b["operation"]["result"]["digest"]
        # n2 learns where it is from n1's record (republished every 2 s).
        wait_until(lambda: "ci-pulled:v1" in etcd_prefix("/space/nodes/")["n1"].get("templates", {}), 10,
                   "n1 to publish its template")
        status, sb = http("POST", n2 + "/v1/sandboxes?wait=60s", {"template": "ci-pulled:v1"}, timeout=90)
        self.assertEqual(status, 201, sb)
        sid = sb["sandbox"]["id"]
        status, cmd = http("POST", f"{n2}/v1/sandboxes/{sid}/commands", {"argv": ["cat", "/marker"]})
        self.assertIn(status, (200, 201, 202), cmd)
        status, out = http("GET", f"{n2}/v1/sandboxes/{sid}/commands/{cmd['id']}/output?stream=stdout&wait=30s")
        self.assertEqual(out, "pulled-ok\n")
        status, ts = http("GET", n2 + "/v1/templates")
        here = {t["name"] + ":" + t["tag"]: t["digest"] for t in ts["templates"]}
        self.assertEqual(here.get("ci-pulled:v1"), digest, ts)
        with open(os.path.join(C["dir"], "n2.log")) as f:
            self.assertEqual(f.read().count("template ci-pulled:v1 (" + digest), 1, "pulled more than once")
        # By digest on n3; a template no node has is still a plain 404.
        status, sb3 = http("POST", n3 + "/v1/sandboxes?wait=60s", {"template": digest}, timeout=90)
        self.assertEqual(status, 201, sb3)
        status, b = http("POST", n3 + "/v1/sandboxes?wait=60s", {"template": "ci-nowhere:v1"})
        self.assertEqual(status, 404, b)
        for url, gone in ((n2, sid), (n3, sb3["sandbox"]["id"])):
            self.assertIn(http("DELETE", f"{url}/v1/sandboxes/{gone}")[0], (200, 202))
        # Through a gateway, creates from a template only n1 has go to n1 (no pull), while
        # it has room.
        status, b = http("POST", n1 + "/v1/templates?wait=60s",
                         {"name": "ci-local", "tag": "v1", "spec": "FROM base\nRUN echo local > /marker\n"},
                         timeout=90)
        self.assertEqual(status, 201, b)
        wait_until(lambda: "ci-local:v1" in etcd_prefix("/space/nodes/")["n1"].get("templates", {}), 10,
                   "n1 to publish ci-local")
        for _ in range(3):
            status, sb = create(body={"template": "ci-local:v1"})
            self.assertEqual(status, 201, sb)
            self.assertEqual(sb["sandbox"]["node"], "n1", sb)
            self.assertIn(http("DELETE", f"{C['url']}/v1/sandboxes/{sb['sandbox']['id']}?wait=30s")[0], (200, 202))

    def test_01d_a_snapshot_restores_on_another_node_by_shipping(self):
        """A filesystem snapshot taken on n1 restores on n2: n2 ships it in first."""
        n1, n2 = C["nodes"]["n1"], C["nodes"]["n2"]
        status, b = http("POST", n1 + "/v1/sandboxes?wait=60s", {}, timeout=90)
        self.assertEqual(status, 201, b)
        src = b["sandbox"]["id"]
        req = urllib.request.Request(f"{n1}/v1/sandboxes/{src}/files?path=/data/shipped.txt", data=b"shipped-ok\n",
                                     method="PUT", headers={"Authorization": "Bearer " + C["key"]})
        with urllib.request.urlopen(req, timeout=30) as r:
            self.assertEqual(r.status, 200)
        status, b = http("POST", f"{n1}/v1/sandboxes/{src}/snapshots?wait=60s", timeout=90)
        self.assertEqual(status, 201, b)
        snap = b["snapshot"]["id"]
        status, b = http("POST", n2 + "/v1/sandboxes?wait=60s", {"snapshot": snap}, timeout=120)
        self.assertEqual(status, 201, b)
        restored = b["sandbox"]["id"]
        status, body = http("GET", f"{n2}/v1/sandboxes/{restored}/files?path=/data/shipped.txt")
        self.assertEqual((status, body), (200, "shipped-ok\n"))
        status, b = http("GET", f"{n2}/v1/snapshots/{snap}")
        self.assertEqual(status, 200, b)
        # Through a gateway, where the holder cannot take it (a node_selector excludes n1 and
        # n2 has it now too, so n3 is the only choice): the create goes to n3, which ships it.
        status, b = create(body={"snapshot": snap, "node_selector": {"node": "n3"}})
        self.assertEqual(status, 201, b)
        self.assertEqual(b["sandbox"]["node"], "n3", b)
        far = b["sandbox"]["id"]
        status, body = http("GET", f"{C['url']}/v1/sandboxes/{far}/files?path=/data/shipped.txt")
        self.assertEqual((status, body), (200, "shipped-ok\n"))
        n3 = C["nodes"]["n3"]
        for url, sid in ((n1, src), (n2, restored), (n3, far)):
            self.assertIn(http("DELETE", f"{url}/v1/sandboxes/{sid}")[0], (200, 202))
        for url in (n1, n2, n3):
            http("DELETE", f"{url}/v1/snapshots/{snap}")

    def test_02_spread_and_routing_from_both_gateways(self):
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda i: create(C["gateways"][i % 2]), range(9)))
        placed = {}
        for status, b in results:
            self.assertIn(status, (200, 201, 202), b)
            self.assertEqual(b["sandbox"]["state"], "running", b)
            placed[b["sandbox"]["id"]] = b["sandbox"]["node"]
        per_node = {n: list(placed.values()).count(n) for n in C["nodes"]}
        self.assertTrue(all(c >= 1 for c in per_node.values()), per_node)
        self.assertTrue(all(c <= 6 for c in per_node.values()), per_node)
        for sid, node in placed.items():
            self.assertIn(sid, node_local(node))
            for g in C["gateways"]:
                status, out = exec_echo(g, sid, "hello " + sid)
                self.assertEqual(status, 200, out)
                self.assertIn("hello " + sid, out if isinstance(out, str) else json.dumps(out))
        # The CLI through a gateway: every node's sandboxes, each with its node.
        env = dict(os.environ, SPACE_URL=C["url"], SPACE_API_KEY=C["key"])
        ls = subprocess.run([os.path.join(BIN, "space"), "ls", "--json"], env=env, capture_output=True,
                            text=True, timeout=30)
        self.assertEqual(ls.returncode, 0, ls.stderr)
        listed = {s["id"]: s["node"] for s in json.loads(ls.stdout)}
        for sid, node in placed.items():
            self.assertEqual(listed.get(sid), node)
        C["placed"] = placed

    def test_02b_events_of_every_node_through_a_gateway(self):
        """/v1/events through a gateway: one snapshot of every node, then every node's changes."""
        placed = C["placed"]
        ev = EventStream(C["gateways"][1], 60)
        try:
            _, snap = ev.wait_for(lambda n, d: n == "snapshot", 15, "snapshot")
            seen = {s["id"]: s["node"] for s in snap["sandboxes"]}
            for sid, node in placed.items():
                self.assertEqual(seen.get(sid), node, f"{sid} in the snapshot")
            made = {}
            for node in ("n1", "n2"):
                status, b = http("POST", C["nodes"][node] + "/v1/sandboxes?wait=60s", {}, timeout=90)
                self.assertEqual(status, 201, b)
                made[b["sandbox"]["id"]] = node
            for sid, node in made.items():
                ev.wait_for(lambda n, d: n == "sandbox.created" and d["sandbox"]["id"] == sid
                            and d["sandbox"]["node"] == node, 15, f"sandbox.created {sid} on {node}")
                self.assertIn(http("DELETE", f"{C['nodes'][node]}/v1/sandboxes/{sid}?wait=30s")[0], (200, 202))
            for sid, node in made.items():
                ev.wait_for(lambda n, d: n == "sandbox.deleted" and d["id"] == sid and d["node"] == node, 15,
                            f"sandbox.deleted {sid}")
        finally:
            ev.close()

    def test_02c_volumes_live_on_their_node(self):
        """A volume made through one gateway: found by the other at once, its sandboxes placed
        on its node, its files reached there, listed once, its name taken cluster-wide."""
        g1, g2 = C["gateways"]
        name = "ci-vol-" + os.urandom(3).hex()
        status, v = http("POST", g1 + "/v1/volumes", {"name": name})
        self.assertEqual(status, 201, v)
        home = v["node"]
        status, b = create(g2, {"volumes": [{"name": name, "path": "/mnt/v"}]})
        self.assertEqual(status, 201, b)
        self.assertEqual(b["sandbox"]["node"], home, b)
        sid = b["sandbox"]["id"]
        status, cmd = http("POST", f"{g2}/v1/sandboxes/{sid}/commands", {"cmd": "echo from-" + sid + " > /mnt/v/x"})
        self.assertEqual(status, 201, cmd)
        http("GET", f"{g2}/v1/sandboxes/{sid}/commands/{cmd['id']}/output?stream=stdout&wait=30s", timeout=40)
        status, body = http("GET", f"{g2}/v1/volumes/{name}/files?path=/x")
        self.assertEqual((status, body), (200, f"from-{sid}\n"))
        status, b = http("POST", g2 + "/v1/volumes", {"name": name})
        self.assertEqual(status, 409, b)
        wait_until(lambda: name in etcd_prefix("/space/nodes/")[home].get("volumes", {}), 10, "its node to publish it")
        status, lst = http("GET", g1 + "/v1/volumes")
        self.assertEqual(status, 200, lst)
        self.assertEqual([x["node"] for x in lst["volumes"] if x["name"] == name], [home])
        status, e2b = http("GET", g2 + "/volumes", headers={"X-API-KEY": C["key"]}, key=False)
        self.assertEqual(status, 200, e2b)
        self.assertIn(name, [x["name"] for x in e2b])
        # Mounting it where it is not cannot be asked for: the node_selector and the volume disagree.
        other = next(n for n in C["nodes"] if n != home)
        status, b = create(g1, {"volumes": [{"name": name, "path": "/mnt/v"}], "node_selector": {"node": other}})
        self.assertEqual(status, 503, b)
        self.assertIn(home, json.dumps(b))
        self.assertIn(http("DELETE", f"{g1}/v1/sandboxes/{sid}?wait=30s")[0], (200, 202))
        status, b = http("DELETE", f"{g2}/v1/volumes/{name}")
        self.assertEqual(status, 200, b)
        wait_until(lambda: http("GET", f"{g1}/v1/volumes/{name}")[0] == 404, 10, "the volume gone")

    def test_03_two_gateways_race_for_one_id(self):
        sid = "sb-race" + os.urandom(6).hex()[:12]
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            futs = [pool.submit(create, g, None, {"X-Space-Sandbox-Id": sid}) for g in C["gateways"]]
            answers = [f.result() for f in futs]
        self.assertEqual(sorted(a[0] for a in answers)[1], 409, answers)
        self.assertIn(sorted(a[0] for a in answers)[0], (200, 201, 202), answers)
        holders = [n for n in C["nodes"] if sid in (node_local(n) or [])]
        self.assertEqual(len(holders), 1, holders)
        status, _ = http("DELETE", f"{C['url']}/v1/sandboxes/{sid}?wait=30s")
        self.assertIn(status, (200, 202))

    def test_04_node_killed_unavailable_then_lost(self):
        placed = C.get("placed") or {}
        victims = [sid for sid, n in placed.items() if n == "n3"]
        self.assertTrue(victims, placed)
        ev = EventStream(C["gateways"][0], 120)
        self.addCleanup(ev.close)
        ev.wait_for(lambda n, d: n == "snapshot", 15, "snapshot")
        devcluster("kill-node", "n3")
        t0 = time.monotonic()
        env = dict(os.environ, SPACE_URL=C["url"], SPACE_API_KEY=C["key"])

        def state_of(sid):
            p = subprocess.run([os.path.join(BIN, "space"), "get", sid, "--json"], env=env, capture_output=True,
                               text=True, timeout=30)
            return json.loads(p.stdout).get("state") if p.returncode == 0 else None

        wait_until(lambda: state_of(victims[0]) == "unavailable", LEASE_TTL + 4, "unavailable")
        detected = time.monotonic() - t0
        # The gateway's event stream says so too.
        ev.wait_for(lambda n, d: n == "sandbox.state" and d["sandbox"]["id"] == victims[0]
                    and d["to"] == "unavailable" and d["sandbox"]["node"] == "n3", LEASE_TTL + 4,
                    "sandbox.state -> unavailable")
        status, b = exec_echo(C["url"], victims[0], "x")
        self.assertEqual(status, 503, b)
        self.assertIn("node unavailable", json.dumps(b))
        # New creates avoid the dead node.
        for _ in range(3):
            status, b = create()
            self.assertIn(status, (200, 201, 202), b)
            self.assertNotEqual(b["sandbox"]["node"], "n3")
            placed[b["sandbox"]["id"]] = b["sandbox"]["node"]
        wait_until(lambda: state_of(victims[0]) == "lost", LOST_AFTER + 6, "lost")
        print(f"\n  node death -> unavailable in {detected:.1f}s", file=sys.stderr)
        # Back: it rejoins and deletes what the cluster gave up.
        devcluster("start-node", "n3")
        wait_until(lambda: "n3" in etcd_prefix("/space/nodes/"), 30, "n3 registered again")
        wait_until(lambda: node_local("n3") == [], 30, "n3 deleted its lost sandboxes")
        # The stream subscribes to n3 again and tells what the cluster gave up as deleted.
        for sid in victims:
            ev.wait_for(lambda n, d: n == "sandbox.deleted" and d["id"] == sid, 15, f"sandbox.deleted {sid}")
        for sid in victims:
            placed.pop(sid, None)
            status, b = http("GET", f"{C['url']}/v1/sandboxes/{sid}")
            self.assertEqual(status, 404, b)

    def test_05_node_restart_inside_grace_keeps_its_sandboxes(self):
        placed = C["placed"]
        mine = [sid for sid, n in placed.items() if n == "n2"]
        self.assertTrue(mine, placed)
        devcluster("stop-node", "n2")  # spaced only: its sandboxes live on
        devcluster("start-node", "n2")
        for sid in mine:
            wait_until(lambda: exec_echo(C["url"], sid, "still here")[0] == 200, 30, f"{sid} answers again")
        routes = etcd_prefix("/space/routes/")
        for sid in mine:
            self.assertEqual(routes[sid]["node"], "n2")

    def test_06_etcd_leader_killed(self):
        leader = devcluster("kill-etcd").strip()
        self.assertIn(leader, ("e1", "e2", "e3"))
        try:
            t0 = time.monotonic()
            created = wait_until(lambda: (lambda r: r if r[0] in (200, 201, 202) else None)(create()), 30,
                                 "a create after the leader died")
            print(f"\n  etcd leader {leader} killed: creates back after {time.monotonic() - t0:.1f}s",
                  file=sys.stderr)
            C["placed"][created[1]["sandbox"]["id"]] = created[1]["sandbox"]["node"]
            self.assertEqual(sorted(etcd_prefix("/space/nodes/")), ["n1", "n2", "n3"])
        finally:
            devcluster("start-etcd", leader)

    def test_07_quorum_lost_creates_fail_sandboxes_answer(self):
        some = next(iter(C["placed"]))
        a = devcluster("kill-etcd").strip()
        time.sleep(2)  # a new leader among the two left
        b = devcluster("kill-etcd").strip()
        try:
            t0 = time.monotonic()
            status, body = create()
            self.assertEqual(status, 503, body)
            self.assertLess(time.monotonic() - t0, 20)
            self.assertTrue("etcd" in json.dumps(body) or "cut off" in json.dumps(body), body)
            status, out = exec_echo(C["url"], some, "cached route")
            self.assertEqual(status, 200, out)
        finally:
            devcluster("start-etcd", a)
            devcluster("start-etcd", b)
        wait_until(lambda: create()[0] in (200, 201, 202), 40, "creates after quorum is back")
        # No sandbox falsely lost.
        status, body = http("GET", C["url"] + "/v1/sandboxes")
        self.assertEqual(status, 200, body)
        self.assertEqual([s for s in body["sandboxes"] if s["state"] in ("lost", "unavailable")], [])

    def test_08_partitioned_node_fences_itself_and_comes_back(self):
        mine = [sid for sid, n in C["placed"].items() if n == "n1"]
        devcluster("cut", "n1", "e1", "e2", "e3")
        try:
            # Cut off for a whole TTL, the node refuses creates itself.
            def refused():
                s, b = create(C["nodes"]["n1"])
                return s == 503 and "cut off" in json.dumps(b)
            wait_until(refused, LEASE_TTL + 8, "n1 refusing creates")
            status, b = http("GET", C["nodes"]["n1"] + "/readyz", key=False)
            self.assertEqual(status, 503, b)
            self.assertIn("cut off", b["reason"])
            wait_until(lambda: "n1" not in etcd_prefix("/space/nodes/"), LEASE_TTL + 6, "n1 dropped")
            if mine:
                s, b = exec_echo(C["url"], mine[0], "x")
                self.assertEqual(s, 503, b)
            status, b = create()
            self.assertIn(status, (200, 201, 202), b)
            self.assertNotEqual(b["sandbox"]["node"], "n1")
            C["placed"][b["sandbox"]["id"]] = b["sandbox"]["node"]
        finally:
            devcluster("heal", "n1", "e1", "e2", "e3")
        wait_until(lambda: "n1" in etcd_prefix("/space/nodes/"), 20, "n1 registered again")
        for sid in mine:
            wait_until(lambda: exec_echo(C["url"], sid, "back")[0] == 200, 20, f"{sid} answers again")

    def test_09_partitioned_gateway(self):
        g1, g2 = C["gateways"]
        devcluster("cut", "g2", "e1", "e2", "e3")
        try:
            wait_until(lambda: create(g2)[0] == 503, 20, "g2 refusing creates")
            status, b = create(g1)
            self.assertIn(status, (200, 201, 202), b)
            C["placed"][b["sandbox"]["id"]] = b["sandbox"]["node"]
        finally:
            devcluster("heal", "g2", "e1", "e2", "e3")
        wait_until(lambda: create(g2)[0] in (200, 201, 202), 30, "g2 creating again")

    def test_10_e2b_and_ports_through_the_gateways(self):
        """E2B's control plane and envd, and a sandbox's port, through both gateways."""
        g1, g2 = C["gateways"]
        e2b = {"X-API-KEY": C["key"]}
        status, b = http("POST", g1 + "/sandboxes", {"templateID": "base:latest", "timeout": 300}, headers=e2b,
                         key=False, timeout=90)
        self.assertEqual(status, 201, b)
        sid, token = b["sandboxID"], b["envdAccessToken"]
        C["placed"][sid] = "?"
        status, info = http("GET", f"{g2}/sandboxes/{sid}", headers=e2b, key=False)
        self.assertEqual(status, 200, info)
        self.assertEqual(info["sandboxID"], sid)
        # envd: routed by E2b-Sandbox-Id, authorised by the node with the sandbox's token.
        envd = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983", "X-Access-Token": token}
        status, health = http("GET", g2 + "/health", headers=envd, key=False)
        self.assertIn(status, (200, 204), health)
        status, _ = http("GET", g2 + "/health", headers={"E2b-Sandbox-Id": sid}, key=False)
        self.assertIn(status, (200, 204, 401, 403))
        # A port, through a gateway, the node's proxy and the sandbox's namespace.
        status, cmd = http("POST", f"{g1}/v1/sandboxes/{sid}/commands",
                           {"cmd": "mkdir -p /www && echo served-by-$(hostname) > /www/index.html && "
                                   "exec busybox httpd -f -p 127.0.0.1:8080 -h /www"})
        self.assertEqual(status, 201, cmd)

        def served():
            s, body = http("GET", f"{g2}/v1/sandboxes/{sid}/ports/8080/index.html")
            return body if s == 200 else None
        self.assertIn("served-by-", wait_until(served, 20, "the sandbox's httpd through the gateway"))
        # Lists on E2B's surface merge every node.
        status, lst = http("GET", g1 + "/v2/sandboxes", headers=e2b, key=False)
        self.assertEqual(status, 200, lst)
        self.assertIn(sid, [x["sandboxID"] for x in lst])
        # Pages across nodes: every sandbox once, newest first, X-Next-Token until the end.
        everything = sorted(lst, key=lambda x: (x["startedAt"], x["sandboxID"]), reverse=True)
        self.assertGreater(len({x["sandboxID"] for x in lst}), 2, lst)
        paged, token, total = [], None, None
        for _ in range(len(lst) + 2):
            url = g1 + "/v2/sandboxes?limit=2" + (f"&nextToken={urllib.parse.quote(token)}" if token else "")
            with urllib.request.urlopen(urllib.request.Request(url, headers=e2b), timeout=30) as r:
                page = json.loads(r.read())
                token, total = r.headers.get("X-Next-Token"), r.headers.get("X-Total-Running")
            self.assertLessEqual(len(page), 2, page)
            paged += page
            if not token:
                break
        self.assertEqual([x["sandboxID"] for x in paged], [x["sandboxID"] for x in everything])
        self.assertEqual(int(total), sum(1 for x in lst if x["state"] == "running"))
        status, _ = http("DELETE", f"{g2}/sandboxes/{sid}", headers=e2b, key=False)
        self.assertEqual(status, 204)
        C["placed"].pop(sid, None)
        status, b = http("GET", f"{g1}/sandboxes/{sid}", headers=e2b, key=False)
        self.assertEqual(status, 404, b)
        self.assertEqual(b.get("code"), 404, b)


if __name__ == "__main__":
    unittest.main(verbosity=2)
