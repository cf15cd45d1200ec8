"""Cluster benchmark (issue 16, docs/cluster.md): what the gateway costs and what it buys.

  sudo /usr/bin/python3 bench/cluster.py [--nodes 2] [--creates 40] [--requests 300] [--clients 8]

Starts a cluster with scripts/devcluster.sh (3 etcd members, N nodes, 2 gateways in
network namespaces), then measures, each against a baseline in the same run:
  - creates per second with `clients` concurrent clients: straight to one node (the
    baseline), through one gateway, through both gateways;
  - routing overhead per request: GET /v1/sandboxes/{id} through a gateway against the
    same request straight to the sandbox's node (p50/p99);
  - time from a node's death (devcluster kill-node) to its sandboxes reported unavailable
    through the gateway.
Tears everything down at the end, even on failure.
"""
import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEVCLUSTER = os.path.join(ROOT, "scripts", "devcluster.sh")


def http(method, url, key, body=None, timeout=60):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def creates_per_second(urls, key, n, clients):
    ids = []

    def one(i):
        t = time.monotonic()
        s, b = http("POST", urls[i % len(urls)] + "/v1/sandboxes?wait=60s", key, {"timeout": 600})
        if s not in (200, 201, 202):
            raise RuntimeError(f"create failed: {s} {b}")
        ids.append(b["sandbox"]["id"])
        return time.monotonic() - t

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        lat = list(pool.map(one, range(n)))
    wall = time.monotonic() - t0
    return n / wall, sorted(lat), ids


def pct(xs, p):
    return xs[min(len(xs) - 1, int(len(xs) * p))] * 1000


def latency(url, key, n):
    out = []
    for _ in range(n):
        t = time.monotonic()
        s, _ = http("GET", url, key)
        out.append(time.monotonic() - t)
        assert s == 200, s
    return sorted(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--creates", type=int, default=40)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--clients", type=int, default=8)
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="space-cluster-bench-", dir="/tmp")
    os.rmdir(d)
    up = subprocess.run(["bash", DEVCLUSTER, "up", "--nodes", str(a.nodes), "--dir", d], capture_output=True,
                        text=True, timeout=300)
    try:
        if up.returncode != 0:
            raise SystemExit(f"devcluster up failed:\n{up.stdout}\n{up.stderr}")
        env = dict(line.split("=", 1) for line in up.stdout.splitlines() if "=" in line)
        key = env["SPACE_API_KEY"]
        gws = env["SPACE_GATEWAYS"].split(",")
        nodes = dict(x.split("=", 1) for x in env["SPACE_NODES"].split(","))
        everyone = []
        print(f"cluster: {a.nodes} nodes, 2 gateways, 3 etcd members; {a.creates} creates with {a.clients} clients")
        base, base_lat, ids = creates_per_second([nodes["n1"]], key, a.creates, a.clients)
        everyone += ids
        print(f"  creates/s  one node direct (baseline)  {base:6.1f}   p50 {pct(base_lat, .5):6.1f} ms  p99 {pct(base_lat, .99):6.1f} ms")
        for label, urls in (("one gateway", gws[:1]), ("two gateways", gws)):
            r, lat, ids = creates_per_second(urls, key, a.creates, a.clients)
            everyone += ids
            print(f"  creates/s  {label:<28} {r:6.1f}   p50 {pct(lat, .5):6.1f} ms  p99 {pct(lat, .99):6.1f} ms"
                  f"   {r / base:.2f}x baseline")
        # Routing overhead: one request, gateway against direct.
        s, b = http("GET", gws[0] + "/v1/sandboxes/" + everyone[-1], key)
        node = b["node"]
        direct = latency(nodes[node] + "/v1/sandboxes/" + everyone[-1], key, a.requests)
        routed = latency(gws[0] + "/v1/sandboxes/" + everyone[-1], key, a.requests)
        print(f"  GET sandbox direct (baseline)  p50 {pct(direct, .5):6.2f} ms  p99 {pct(direct, .99):6.2f} ms")
        print(f"  GET sandbox via gateway        p50 {pct(routed, .5):6.2f} ms  p99 {pct(routed, .99):6.2f} ms"
              f"   +{pct(routed, .5) - pct(direct, .5):.2f} ms p50 ({pct(routed, .5) / pct(direct, .5):.2f}x)")
        # Node death -> unavailable.
        victim = "n2" if a.nodes > 1 else "n1"
        s, b = http("GET", gws[0] + "/v1/sandboxes", key)
        mine = [x["id"] for x in b["sandboxes"] if x.get("node") == victim]
        if mine:
            subprocess.run(["bash", DEVCLUSTER, "kill-node", "--dir", d, victim], check=True, capture_output=True)
            t0 = time.monotonic()
            while time.monotonic() - t0 < 30:
                s, b = http("GET", gws[0] + "/v1/sandboxes/" + mine[0], key)
                if s == 200 and b.get("state") == "unavailable":
                    break
                time.sleep(0.05)
            print(f"  node death -> sandbox unavailable   {time.monotonic() - t0:.2f} s "
                  f"(its lease TTL is 4 s: the gateway saw the node refuse first)")
    finally:
        subprocess.run(["bash", DEVCLUSTER, "down", "--dir", d], capture_output=True, timeout=300)


if __name__ == "__main__":
    main()
