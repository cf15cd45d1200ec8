#!/usr/bin/env bash
# helm_chart_run_test: the chart's node and gateway, as rendered, run. Renders the chart for an
# external etcd that this script starts on loopback, takes the node DaemonSet's and the
# gateway Deployment's container args and the generated Secret out of the rendering, does
# what the kubelet would (expands $(NODE_NAME) and $(HOST_IP), mounts the Secret's keys as
# files, the hostPath data dir at its path), and starts the real spaced with exactly those
# args. Then: the node registers in etcd, the gateway becomes ready seeing one node, and the
# generated operator key works through the gateway (a wrong one is refused).
# Deviations from a cluster, all on loopback: listen addresses 0.0.0.0 -> 127.0.0.1, HOST_IP
# is 127.0.0.1, ports are free ones (node.port, gateway.port), the data dir is a temporary one
# (node.dataDir), /etc/space/auth is a temporary directory.
#   usage: run-smoke.sh BIN_DIR      exit 0 pass, 1 fail, 77 skip (go not installed)
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
chart="$here/../space"
bin="$(cd "${1:?usage: run-smoke.sh BIN_DIR}" && pwd)"
repo="$here/../../.."

tools="$("$here/build-tools.sh")"
rc=$?
[ $rc -eq 77 ] && exit 77
[ $rc -ne 0 ] && { echo "FAIL: building helm and the checker (exit $rc)"; exit 1; }
helm=$(awk '$1=="helm"{print $2}' <<<"$tools")
check=$(awk '$1=="check"{print $2}' <<<"$tools")
command -v etcd >/dev/null || { echo "FAIL: no etcd (scripts/install-deps.sh installs etcd-server)"; exit 1; }

# /tmp/space-it-*: integration_cleanup removes it if this script is killed.
tmp="$(mktemp -d /tmp/space-it-helm.XXXXXX)"
chmod 755 "$tmp"   # user-namespaced sandboxes need o+x on the data dir's parents
data="$tmp/data"
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do
    for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null
  done
  [ -d "$data" ] && bash "$repo/scripts/space-down.sh" "$data" --purge >/dev/null 2>&1
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 143' TERM INT
export HELM_CACHE_HOME="$tmp/helm/cache" HELM_CONFIG_HOME="$tmp/helm/config" HELM_DATA_HOME="$tmp/helm/data"

passed=0 failed=0
pass() { echo "ok   $1"; passed=$((passed + 1)); }
fail() { echo "FAIL $1"; failed=$((failed + 1)); }
logs() { local f; for f in "$tmp"/*.log; do echo "---- $f (last 40 lines)"; tail -n 40 "$f"; done; }
finish() { echo "helm_chart_run_test: $passed passed, $failed failed"; [ "$failed" -eq 0 ] && exit 0; logs; exit 1; }

# Four distinct free ports, picked while all four sockets are held open: one at a time, the
# kernel may hand the same port out twice (a CI run lost etcd's peer port to the node this way).
read -r ec ep np gp < <(/usr/bin/python3 -c 'import socket
ss = [socket.socket() for _ in range(4)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))')

# etcd, one member on loopback.
setpriv --pdeathsig KILL -- etcd --name smoke --data-dir "$tmp/etcd" \
  --listen-client-urls "http://127.0.0.1:$ec" --advertise-client-urls "http://127.0.0.1:$ec" \
  --listen-peer-urls "http://127.0.0.1:$ep" --initial-advertise-peer-urls "http://127.0.0.1:$ep" \
  --initial-cluster "smoke=http://127.0.0.1:$ep" >"$tmp/etcd.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do
  curl -fsS --noproxy '*' -m 1 "http://127.0.0.1:$ec/health" 2>/dev/null | grep -q '"health":"true"' && break
  sleep 0.1
done
curl -fsS --noproxy '*' -m 1 "http://127.0.0.1:$ec/health" >/dev/null 2>&1 || { fail "etcd did not start"; finish; }

# The rendering, and what the kubelet would hand the containers.
if ! "$helm" template sp "$chart" --namespace space --set etcd.mode=external \
    --set "etcd.endpoints={http://127.0.0.1:$ec}" --set node.port="$np" --set gateway.port="$gp" \
    --set node.dataDir="$data" --set node.labels.zone=smoke >"$tmp/rendered.yaml" 2>"$tmp/helm.log"; then
  fail "helm template"; finish
fi
"$check" --namespace space --external-etcd "http://127.0.0.1:$ec" "$tmp/rendered.yaml" >"$tmp/check.log" 2>&1 &&
  pass "the rendering passes the checker" || fail "the rendering fails the checker"
mkdir -p "$tmp/auth" "$data"
"$check" --write-secret "$tmp/auth" "$tmp/rendered.yaml" || { fail "no Secret in the rendering"; finish; }
kubelet_args() { # kubelet_args COMPONENT: the container's args, expanded, one per line
  "$check" --print-args "$1" "$tmp/rendered.yaml" |
    sed -e 's/\$(NODE_NAME)/helm-smoke/g' -e 's/\$(HOST_IP)/127.0.0.1/g' \
        -e 's/^0\.0\.0\.0:/127.0.0.1:/' -e "s#^/etc/space/auth/#$tmp/auth/#"
}
mapfile -t node_args < <(kubelet_args node)
mapfile -t gw_args < <(kubelet_args gateway)
[ ${#node_args[@]} -gt 0 ] && [ ${#gw_args[@]} -gt 0 ] || { fail "no node or gateway args"; finish; }
echo "node:    spaced ${node_args[*]}"
echo "gateway: spaced ${gw_args[*]}"

start_node() {
  setpriv --pdeathsig KILL -- "$bin/spaced" "${node_args[@]}" >>"$tmp/node.log" 2>&1 &
  node_pid=$!
  pids+=($node_pid)
}
start_node
setpriv --pdeathsig KILL -- "$bin/spaced" "${gw_args[@]}" >"$tmp/gateway.log" 2>&1 &
pids+=($!)

gw="http://127.0.0.1:$gp"
up=""
for _ in $(seq 1 600); do
  for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || { fail "a spaced exited during start-up"; finish; }; done
  if curl -fsS --noproxy '*' -m 2 "$gw/readyz" >"$tmp/readyz.json" 2>/dev/null; then up=1; break; fi
  sleep 0.1
done
[ -n "$up" ] && pass "gateway /readyz 200 within 60 s: $(cat "$tmp/readyz.json")" || { fail "gateway never ready"; finish; }
grep -q '"nodes":1' "$tmp/readyz.json" && pass "the gateway sees the one node" || fail "readyz does not count one node"
curl -fsS --noproxy '*' -m 2 "$gw/healthz" >/dev/null && pass "gateway /healthz" || fail "gateway /healthz"
curl -fsS --noproxy '*' -m 2 "http://127.0.0.1:$np/healthz" >/dev/null && pass "node /healthz on --advertise" ||
  fail "node /healthz on its advertised address"

# The node's record in etcd: registered under NODE_NAME, advertising HOST_IP:port, labelled.
key=$(printf '/space/nodes/helm-smoke' | base64 -w0)
curl -fsS --noproxy '*' -m 2 -X POST "http://127.0.0.1:$ec/v3/kv/range" -d "{\"key\":\"$key\"}" >"$tmp/range.json"
rec=$(/usr/bin/python3 -c 'import base64,json,sys; kv=json.load(open(sys.argv[1])).get("kvs",[]); print(base64.b64decode(kv[0]["value"]).decode() if kv else "")' "$tmp/range.json")
[ -n "$rec" ] && pass "etcd holds nodes/helm-smoke" || fail "no nodes/helm-smoke in etcd"
[[ "$rec" == *"127.0.0.1:$np"* ]] && pass "its record advertises HOST_IP:node.port" || fail "record lacks 127.0.0.1:$np: $rec"
[[ "$rec" == *'"zone":"smoke"'* ]] && pass "its record carries node.labels" || fail "record lacks zone=smoke: $rec"

# The generated operator key, through the gateway to the node (which enforces it).
api_key=$(cat "$tmp/auth/api-key")
code=$(curl -sS --noproxy '*' -m 10 -o "$tmp/list.json" -w '%{http_code}' -H "Authorization: Bearer $api_key" "$gw/v1/sandboxes")
[ "$code" = 200 ] && pass "GET /v1/sandboxes through the gateway with the Secret's api-key: 200" ||
  fail "GET /v1/sandboxes with the Secret's key: $code $(head -c 300 "$tmp/list.json")"
code=$(curl -sS --noproxy '*' -m 10 -o /dev/null -w '%{http_code}' -H "Authorization: Bearer sk-not-the-key-0000000000" "$gw/v1/sandboxes")
[ "$code" = 401 ] && pass "a wrong key is refused (401)" || fail "a wrong key got $code"

# A node Pod restart: spaced dies (SIGKILL, as a crashed or replaced container), its sandbox
# does not; the new spaced, same args, same hostPath data dir, adopts it again and the
# gateway routes to it. The marker lives in the sandbox's /dev/shm (memory): only the same
# running sandbox still has it.
auth=(-H "Authorization: Bearer $api_key")
api() { curl -sS --noproxy '*' -m 90 "${auth[@]}" "$@"; }
api -X POST -H 'Content-Type: application/json' -d '{"template":"base:latest"}' \
  -o "$tmp/create.json" -w '%{http_code}' "$gw/v1/sandboxes?wait=60s" >"$tmp/create.code"
sid=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["sandbox"]["id"])' "$tmp/create.json" 2>/dev/null)
if [ "$(cat "$tmp/create.code")" = 201 ] && [ -n "$sid" ]; then
  pass "create through the gateway: $sid"
else
  fail "create through the gateway: $(cat "$tmp/create.code") $(head -c 400 "$tmp/create.json")"; finish
fi
code=$(api -X PUT --data-binary "before-restart" -o "$tmp/put.json" -w '%{http_code}' "$gw/v1/sandboxes/$sid/files?path=/dev/shm/marker")
[ "$code" = 200 ] && pass "marker written to the sandbox's /dev/shm" || fail "writing the marker: $code $(cat "$tmp/put.json")"

kill -KILL "$node_pid"; wait "$node_pid" 2>/dev/null
code=$(api -o /dev/null -w '%{http_code}' "$gw/v1/sandboxes/$sid/files?path=/dev/shm/marker")
[ "$code" != 200 ] && pass "node down: the gateway cannot reach the sandbox ($code)" || fail "node down, yet 200"
start_node
back=""
for _ in $(seq 1 120); do
  if [ "$(api -o "$tmp/marker" -w '%{http_code}' "$gw/v1/sandboxes/$sid/files?path=/dev/shm/marker")" = 200 ]; then back=1; break; fi
  sleep 0.5
done
[ -n "$back" ] && pass "after the node restart the gateway reaches the sandbox again" || fail "sandbox unreachable after the node restart"
[ "$(cat "$tmp/marker" 2>/dev/null)" = before-restart ] && pass "the same running sandbox (its /dev/shm marker is there)" ||
  fail "marker lost: $(head -c 200 "$tmp/marker" 2>/dev/null)"
# A sandbox token minted before the restart (signed with the Secret's token-keys) still works.
stoken=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["token"])' "$tmp/create.json" 2>/dev/null)
code=$(curl -sS --noproxy '*' -m 10 -H "Authorization: Bearer $stoken" -o /dev/null -w '%{http_code}' \
  "$gw/v1/sandboxes/$sid/files?path=/dev/shm/marker")
[ "$code" = 200 ] && pass "the sandbox token minted before the restart still verifies" || fail "old sandbox token: $code"
code=$(api -X DELETE -o "$tmp/delete.json" -w '%{http_code}' "$gw/v1/sandboxes/$sid?wait=30s")
[ "$code" = 200 ] && pass "delete through the gateway" || fail "delete: $code $(cat "$tmp/delete.json")"
finish
