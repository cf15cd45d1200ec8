#!/usr/bin/env bash
# Egress benchmark (docs/benchmarks.md, "Networking"): the same transfers made from the host
# (the baseline) and from a networked sandbox's namespace (through spaced's nftables table
# and egress proxy), against a fake internet this script makes: a namespace holding
# 203.0.113.10 with tests/integration/fakenet_server.py. Needs root, nft, python3.
#   bench/net.sh [--bytes N] [--requests N] [--rounds N]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/bin}
BYTES=$((1024 * 1024 * 1024))
REQUESTS=300
ROUNDS=5
while [ $# -gt 0 ]; do
  case "$1" in
    --bytes) BYTES=$2; shift 2 ;;
    --requests) REQUESTS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    *) echo "usage: bench/net.sh [--bytes N] [--requests N] [--rounds N]" >&2; exit 2 ;;
  esac
done
DIR=$(mktemp -d /tmp/space-netbench-XXXXXX)
chmod 711 "$DIR"
NS=fakenet-b$$
HIF=fkb$$
HIF=${HIF:0:15}
cleanup() {
  if [ -n "${SID:-}" ]; then curl -s -X DELETE -H "Authorization: Bearer $KEY" "$URL/v1/sandboxes/$SID?wait=30s" >/dev/null || true; fi
  if [ -n "${PID:-}" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
  if [ -n "${SRV:-}" ]; then kill "$SRV" 2>/dev/null || true; wait "$SRV" 2>/dev/null || true; fi
  if [ -d "$DIR/data/runtime/oci/crun" ]; then
    for id in $(ls "$DIR/data/runtime/oci/crun" 2>/dev/null); do
      nsenter --mount="$DIR/data/runtime/oci/ns/mnt" crun --root "$DIR/data/runtime/oci/crun" delete -f "$id" 2>/dev/null || true
    done
  fi
  # What a killed spaced leaves of its network (a restart would remove it).
  if [ -n "${TAG:-}" ]; then
    for n in $(ip netns list | awk '{print $1}' | grep "^space-$TAG-"); do ip netns del "$n" 2>/dev/null || true; done
    nft delete table inet "space_$TAG" 2>/dev/null || true
  fi
  sh tests/integration/fakenet_route.sh del 198.51.100.2
  ip link del "$HIF" 2>/dev/null || true
  ip netns del "$NS" 2>/dev/null || true
  grep " $DIR" /proc/self/mountinfo | awk '{print $5}' | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  rm -rf "$DIR"
}
trap cleanup EXIT

# The fake internet's addresses and route are shared with the tests' (tests/integration/
# fakenet.h): one at a time, under the same lock.
exec 9>/run/lock/space-fakenet.lock
flock 9
ip netns add "$NS"
ip link add "$HIF" type veth peer name eth0 netns "$NS"
ip addr add 198.51.100.1/24 dev "$HIF"; ip link set "$HIF" up
ip -n "$NS" link set lo up; ip -n "$NS" link set eth0 up
ip -n "$NS" addr add 198.51.100.2/24 dev eth0
ip -n "$NS" addr add 203.0.113.10/32 dev lo
ip -n "$NS" route add default via 198.51.100.1
sh tests/integration/fakenet_route.sh add 198.51.100.2
ip netns exec "$NS" /usr/bin/python3 tests/integration/fakenet_server.py --log "$DIR/servers.log" \
  --ready "$DIR/ready" --http 203.0.113.10:80 >/dev/null 2>&1 &
SRV=$!
for _ in $(seq 1 100); do [ -f "$DIR/ready" ] && break; sleep 0.05; done

$BIN/spaced --listen 127.0.0.1:0 --data-dir "$DIR/data" --log-level warn --sandbox-subnet 10.215.0.0/24 \
  >"$DIR/spaced.log" 2>&1 &
PID=$!
for _ in $(seq 1 300); do [ -s "$DIR/data/url" ] && break; sleep 0.1; done
URL=$(cat "$DIR/data/url")
KEY=$(cat "$DIR/data/api-key")
SID=$(curl -s -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
  -d '{"network":{"mode":"internet"}}' "$URL/v1/sandboxes?wait=60s" | python3 -c 'import json,sys; print(json.load(sys.stdin)["sandbox"]["id"])')
TAG=$(ip netns list | awk '{print $1}' | grep -- "-$SID\$" | sed 's/^space-\([0-9a-f]*\)-.*/\1/')
IN="ip netns exec space-$TAG-$SID"
echo "# net bench $(date -u +%FT%TZ) on $(nproc) cores; sandbox $SID"

jiffies() {  # "busy total" of all CPUs from /proc/stat (busy: all but idle and iowait)
  awk '/^cpu /{t=0; for (i=2; i<=NF; i++) t+=$i; print t-$5-$6, t}' /proc/stat
}
speed() {  # bytes/s of one download of $BYTES from the producer $PRODUCER, then ",busy":
           # the share of the machine's CPU time that was busy meanwhile (1.0: both cores)
  local b0 t0 b1 t1 bps
  read -r b0 t0 < <(jiffies)
  bps=$("$@" curl -s -o /dev/null -w '%{speed_download}' "http://203.0.113.10/$PRODUCER/$BYTES")
  read -r b1 t1 < <(jiffies)
  echo "$bps,$(( (b1 - b0) * 1000 / (t1 - t0 > 0 ? t1 - t0 : 1) ))"
}
# Two producers: Python writing 64 KiB blocks (send(2), a copy per byte), and sendfile(2)
# from memory (no copy, so the producer leaves more of the 2 cores to the path measured).
# Host and proxied downloads alternate, $ROUNDS pairs, so a pair shares the machine's load
# of the moment; the figure is the median of the pairs' ratios (and their range).
for PRODUCER in bytes file-bytes; do
  pairs=""
  for _ in $(seq 1 "$ROUNDS"); do pairs="$pairs $(speed):$(speed $IN)"; done
  python3 - "$PRODUCER" $pairs <<'EOF'
import statistics, sys
how = {"bytes": "send(2) from Python", "file-bytes": "sendfile(2)"}[sys.argv[1]]
runs = [[tuple(map(float, x.split(","))) for x in a.split(":")] for a in sys.argv[2:]]
pairs = [(h[0], p[0]) for h, p in runs]
ratios = sorted(p / h for h, p in pairs)
h = statistics.median(h for h, _ in pairs); p = statistics.median(p for _, p in pairs)
hb = statistics.median(h[1] for h, _ in runs) / 10; pb = statistics.median(p[1] for _, p in runs) / 10
print(f"download ({how}) {h/1e6:.0f} MB/s from the host, {p/1e6:.0f} MB/s through the egress proxy "
      f"(medians of {len(pairs)}): {statistics.median(ratios):.2f}x (pairs {ratios[0]:.2f}-{ratios[-1]:.2f}x); "
      f"CPU busy {hb:.0f} % and {pb:.0f} % of {__import__('os').cpu_count()} cores")
EOF
done

latency() {  # p50 and p99 ms of new-connection requests
  "$@" /usr/bin/python3 - "$REQUESTS" <<'EOF'
import socket, sys, time
n = int(sys.argv[1]); t = []
for i in range(n):
    t0 = time.perf_counter()
    s = socket.create_connection(("203.0.113.10", 80))
    s.sendall(b"GET /lat HTTP/1.1\r\nHost: 203.0.113.10\r\nConnection: close\r\n\r\n")
    while s.recv(65536): pass
    s.close()
    t.append((time.perf_counter() - t0) * 1000)
t.sort()
print(f"{t[len(t)//2]:.3f} {t[min(len(t)-1, int(len(t)*0.99))]:.3f}")
EOF
}
read -r h50 h99 < <(latency)
read -r p50 p99 < <(latency $IN)
python3 - "$h50" "$h99" "$p50" "$p99" <<'EOF'
import sys
h50, h99, p50, p99 = map(float, sys.argv[1:])
print(f"new connection + request: host p50 {h50:.3f} ms p99 {h99:.3f} ms; through the proxy p50 {p50:.3f} ms p99 {p99:.3f} ms; extra p50 {p50-h50:.3f} ms")
EOF
