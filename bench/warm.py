#!/usr/bin/env python3
"""Where a warm create's time goes (issue 17): claim a warm-pool sandbox, then run `echo`
in it at once, again right after, and again after 300 ms idle; medians over --n claims.

    PROG=warm.py bash bench/run.sh [--n 15]

One keep-alive HTTP connection (no connect in the figures); each command is
POST /v1/sandboxes/{id}/commands?wait=10s, so it is timed to its end, not its first byte.
Uses /usr/bin/python3 (the standard library only)."""
import argparse
import http.client
import json
import statistics
import time
import urllib.parse


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--data-dir")
    ap.add_argument("--bin")
    ap.add_argument("--n", type=int, default=15)
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    conn = http.client.HTTPConnection(u.hostname, u.port)
    headers = {"Authorization": "Bearer " + a.key, "Content-Type": "application/json"}

    def req(method, path, body=None):
        t = time.perf_counter()
        conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
        r = conn.getresponse()
        data = r.read()
        if r.status >= 300:
            raise SystemExit(f"{method} {path}: {r.status} {data[:200]!r}")
        return (time.perf_counter() - t) * 1000, data

    def run(sid):
        return req("POST", f"/v1/sandboxes/{sid}/commands?wait=10s", {"argv": ["echo", "hi"]})[0]

    time.sleep(2)  # the pool fills
    claim, first, right_after, after_idle, cold = [], [], [], [], 0
    for _ in range(a.n):
        time.sleep(0.4)  # the pool refills
        ms, data = req("POST", "/v1/sandboxes", {})
        j = json.loads(data)
        sid = j["sandbox"]["id"]
        if j["operation"]["result"].get("warm"):
            claim.append(ms)
            first.append(run(sid))
            right_after.append(run(sid))
            time.sleep(0.3)
            after_idle.append(run(sid))
        else:
            cold += 1
        req("DELETE", f"/v1/sandboxes/{sid}?wait=30s")
    if not claim:
        raise SystemExit("no warm claim")
    m = statistics.median
    print(f"warm claims {len(claim)} (cold fallbacks {cold}): create {m(claim):.2f} ms p50; "
          f"echo to its end: first {m(first):.2f} ms, right after {m(right_after):.2f} ms, "
          f"after 300 ms idle {m(after_idle):.2f} ms")


if __name__ == "__main__":
    main()
