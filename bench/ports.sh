#!/bin/bash
# Ports as URLs: a request to a sandbox port through spaced (Host {port}-{id}.localhost,
# traffic token header) against the same request made inside the sandbox, both by the same
# static client (bench/port_probe.cc) against busybox httpd bound to the sandbox's
# 127.0.0.1:8080 serving 1 KiB. Figures in docs/benchmarks.md ("Ports as URLs").
#
# Usage: SPACE_URL=http://127.0.0.1:7070 SPACE_API_KEY=... bench/ports.sh [BUILD_DIR] [N]
set -euo pipefail
BUILD=${1:-build}
N=${2:-2000}
SPACE="$BUILD/bin/space"
PROBE="$BUILD/bin/port_probe"
: "${SPACE_URL:?set SPACE_URL}" "${SPACE_API_KEY:?set SPACE_API_KEY}"
PORT=${SPACE_URL##*:}
PORT=${PORT%%/*}

ID=$("$SPACE" create --timeout 900)
trap '"$SPACE" rm "$ID" >/dev/null' EXIT
"$SPACE" exec "$ID" -- sh -c 'mkdir -p /www && head -c 1024 /dev/zero | tr "\0" x > /www/index.html && busybox httpd -p 127.0.0.1:8080 -h /www'
"$SPACE" cp "$PROBE" "$ID:/tmp/port_probe" >/dev/null
"$SPACE" exec "$ID" -- chmod 755 /tmp/port_probe
TOKEN=$("$SPACE" --json url "$ID" 8080 | sed -n 's/.*"token": *"\([^"]*\)".*/\1/p')
HOST="8080-$ID.localhost:$PORT"

echo "inside the sandbox (127.0.0.1:8080, new connection each):"
"$SPACE" exec "$ID" -- /tmp/port_probe 127.0.0.1 8080 "$N" localhost
echo "through spaced ($HOST, new connection each):"
"$PROBE" 127.0.0.1 "$PORT" "$N" "$HOST" --header "Space-Traffic-Token: $TOKEN"
echo "through spaced, one keep-alive connection to spaced (upstream: new each):"
"$PROBE" 127.0.0.1 "$PORT" "$N" "$HOST" --keepalive --header "Space-Traffic-Token: $TOKEN"
