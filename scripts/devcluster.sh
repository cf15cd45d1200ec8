#!/usr/bin/env bash
# A SPACE cluster on one machine (docs/cluster.md, "A cluster on one machine"): 3 etcd
# members, N nodes and 2 gateways, each in a network namespace of its own with its own
# address on a bridge of the root namespace (where the client runs). The cluster tests
# use it; so can you.
#
#   devcluster.sh up --nodes N --dir DIR [--lease-ttl S] [--lost-after S] [--bin DIR]
#       starts everything under DIR and prints SPACE_URL=… and SPACE_API_KEY=… (the first
#       gateway and the operator key every node shares), then SPACE_GATEWAYS=, SPACE_NODES=,
#       SPACE_ETCD= lines.
#   devcluster.sh down --dir DIR        stops and removes everything up started
#   devcluster.sh kill-node --dir DIR NODE
#       SIGKILLs that node's spaced and every sandbox process it runs (the machine died)
#   devcluster.sh start-node --dir DIR NODE   starts a node again (after kill-node or stop-node)
#   devcluster.sh stop-node --dir DIR NODE    SIGKILLs only its spaced (sandboxes live on)
#   devcluster.sh kill-etcd --dir DIR   SIGKILLs the etcd leader and prints its name
#   devcluster.sh start-etcd --dir DIR NAME   starts a killed etcd member again
#   devcluster.sh cut --dir DIR A B... / heal --dir DIR A B...
#       cuts (heals) the links between member A and each B, both ways (blackhole routes
#       inside their namespaces); names are e1..e3, n1..nN, g1, g2
#
# Addresses: 10.77.H.0/24 with H from DIR (so two clusters can run at once); the bridge
# (client) is .1, etcd members .11-.13, nodes .21.., gateways .31-.32; every API on :7070.
# Programs run with `nsenter --net` (not `ip netns exec`, which remounts /sys and with it
# the cgroup hierarchy spaced needs).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cmd=${1:-}
[ -n "$cmd" ] && shift || true
DIR="" NODES=3 LEASE_TTL=4 LOST_AFTER=15 BIN="$here/../build/bin" ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) DIR=$2; shift 2 ;;
    --nodes) NODES=$2; shift 2 ;;
    --lease-ttl) LEASE_TTL=$2; shift 2 ;;
    --lost-after) LOST_AFTER=$2; shift 2 ;;
    --bin) BIN=$2; shift 2 ;;
    -*) echo "devcluster: unknown option $1" >&2; exit 2 ;;
    *) ARGS+=("$1"); shift ;;
  esac
done
die() { echo "devcluster: $*" >&2; exit 1; }
[ -n "$DIR" ] || die "--dir DIR is required"
case "$NODES" in ''|*[!0-9]*) die "--nodes wants a number 1..9" ;; esac
[ "$NODES" -ge 1 ] && [ "$NODES" -le 9 ] || die "--nodes wants a number 1..9"

mkdir -p "$DIR"
DIR=$(realpath "$DIR")
H=$(( $(printf %s "$DIR" | cksum | cut -d' ' -f1) % 200 + 20 ))
NET="10.77.$H"
BR="scb$H"
PFX="sc$H"            # namespaces sc<H>-<name>, host veths sc<H><name>
PIDS="$DIR/pids"

ip_of() {
  case "$1" in
    e[1-3]) echo "$NET.1${1#e}" ;;
    n[1-9]) echo "$NET.2${1#n}" ;;
    g[1-2]) echo "$NET.3${1#g}" ;;
    *) die "unknown member $1 (e1..e3, n1..n9, g1, g2)" ;;
  esac
}
ns_of() { echo "$PFX-$1"; }
# Only in the background (`in_ns n prog &`): exec, so $! is the program itself.
in_ns() { local n=$1; shift; exec nsenter --net="/run/netns/$(ns_of "$n")" "$@"; }
alive() { [ -f "$PIDS/$1.pid" ] && kill -0 "$(cat "$PIDS/$1.pid")" 2>/dev/null; }
etcd_endpoints() { echo "http://$(ip_of e1):2379,http://$(ip_of e2):2379,http://$(ip_of e3):2379"; }
node_count() { cat "$DIR/nodes" 2>/dev/null || echo "$NODES"; }

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local limit=$1 what=$2; shift 2
  local end=$(( $(date +%s) + limit ))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$end" ] || die "timed out after ${limit}s waiting for $what"
    sleep 0.2
  done
}

make_ns() {
  local n=$1 ip; ip=$(ip_of "$n")
  local ns; ns=$(ns_of "$n")
  ip netns add "$ns"
  ip link add "$PFX$n" type veth peer name "$PFX${n}p"
  ip link set "$PFX${n}p" netns "$ns"
  ip link set "$PFX$n" master "$BR" up
  ip -n "$ns" link set lo up
  ip -n "$ns" link set "$PFX${n}p" name eth0
  ip -n "$ns" addr add "$ip/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" route add default via "$NET.1"
}

start_etcd() {
  local n=$1 ip; ip=$(ip_of "$n")
  local cluster="e1=http://$(ip_of e1):2380,e2=http://$(ip_of e2):2380,e3=http://$(ip_of e3):2380"
  local state=new
  [ -d "$DIR/$n/member" ] && state=existing
  mkdir -p "$DIR/$n"
  in_ns "$n" etcd --name "$n" --data-dir "$DIR/$n" \
    --listen-client-urls "http://$ip:2379" --advertise-client-urls "http://$ip:2379" \
    --listen-peer-urls "http://$ip:2380" --initial-advertise-peer-urls "http://$ip:2380" \
    --initial-cluster "$cluster" --initial-cluster-state "$state" --initial-cluster-token "space-$H" \
    --heartbeat-interval 100 --election-timeout 1000 --auto-compaction-retention 1 \
    --quota-backend-bytes 268435456 >>"$DIR/$n.log" 2>&1 &
  echo $! >"$PIDS/$n.pid"
}

start_node() {
  local n=$1 ip; ip=$(ip_of "$n")
  mkdir -p "$DIR/$n"
  chmod 711 "$DIR/$n"
  in_ns "$n" "$BIN/spaced" --role node --listen "$ip:7070" --data-dir "$DIR/$n/data" \
    --etcd "$(etcd_endpoints)" --node-name "$n" --node-label "node=$n" --advertise "$ip:7070" \
    --api-key-file "$DIR/api-key" --token-keys-file "$DIR/token-keys" \
    --lease-ttl "$LEASE_TTL" --sandbox-domain "$H.test" --log-level info >>"$DIR/$n.log" 2>&1 &
  echo $! >"$PIDS/$n.pid"
}

start_gateway() {
  local n=$1 ip; ip=$(ip_of "$n")
  in_ns "$n" "$BIN/spaced" --role gateway --listen "$ip:7070" --etcd "$(etcd_endpoints)" \
    --lost-after "$LOST_AFTER" --sandbox-domain "$H.test" --log-level info >>"$DIR/$n.log" 2>&1 &
  echo $! >"$PIDS/$n.pid"
}

etcd_ready() {
  curl -sf -m 2 -X POST "http://$(ip_of "$1"):2379/v3/maintenance/status" -d '{}' | grep -q '"leader"'
}

print_env() {
  local gws="" nodes="" n
  for g in g1 g2; do gws="$gws${gws:+,}http://$(ip_of $g):7070"; done
  for i in $(seq 1 "$(node_count)"); do nodes="$nodes${nodes:+,}n$i=http://$(ip_of n$i):7070"; done
  echo "SPACE_URL=http://$(ip_of g1):7070"
  echo "SPACE_API_KEY=$(cat "$DIR/api-key")"
  echo "SPACE_GATEWAYS=$gws"
  echo "SPACE_NODES=$nodes"
  echo "SPACE_ETCD=$(etcd_endpoints)"
}

stop_pid() {  # stop_pid NAME SIGNAL
  local f="$PIDS/$1.pid"
  [ -f "$f" ] || return 0
  local pid; pid=$(cat "$f")
  kill "-$2" "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$f"
}

kill_member() {  # SIGKILL, and wait until it is gone
  local pid; pid=$(cat "$PIDS/$1.pid")
  kill -9 "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  rm -f "$PIDS/$1.pid"
}

# Every process of a node's sandboxes: those in its containers' cgroups, and its QEMUs.
kill_sandboxes() {
  local data="$DIR/$1/data" id pid
  for d in "$data"/runtime/oci/crun/* "$data"/runtime/oci/runc/*; do
    [ -d "$d" ] || continue
    id=$(basename "$d")
    for procs in /sys/fs/cgroup/*/space/"$id"/cgroup.procs /sys/fs/cgroup/space/"$id"/cgroup.procs; do
      [ -f "$procs" ] || continue
      for pid in $(cat "$procs" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    done
  done
  for pf in "$data"/runtime/microvm/vms/*/qemu.pid; do
    [ -f "$pf" ] && kill -9 "$(cat "$pf")" 2>/dev/null || true
  done
}

case "$cmd" in
  up)
    [ -f "$DIR/cluster.up" ] && die "a cluster is up under $DIR already (down it first)"
    [ -x "$BIN/spaced" ] || die "no spaced at $BIN (build first, or --bin DIR)"
    command -v etcd >/dev/null || die "etcd is not installed (make deps)"
    ip link show "$BR" >/dev/null 2>&1 && die "bridge $BR exists already (another cluster on $NET?)"
    mkdir -p "$PIDS"
    chmod 711 "$DIR"
    echo "$NODES" >"$DIR/nodes"
    touch "$DIR/cluster.up"
    trap 'echo "devcluster: up failed; tearing down" >&2; "$0" down --dir "$DIR" >/dev/null 2>&1 || true' ERR
    ip link add "$BR" type bridge
    ip addr add "$NET.1/24" dev "$BR"
    ip link set "$BR" up
    members="e1 e2 e3 g1 g2"
    for i in $(seq 1 "$NODES"); do members="$members n$i"; done
    for m in $members; do make_ns "$m"; done
    head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' | sed 's/^/sk-/' >"$DIR/api-key"
    chmod 600 "$DIR/api-key"
    for e in e1 e2 e3; do start_etcd "$e"; done
    for e in e1 e2 e3; do wait_for 30 "etcd $e" etcd_ready "$e"; done
    # The first node writes the shared token keys; the others read them.
    start_node n1
    wait_for 60 "node n1" curl -sf -m 2 "http://$(ip_of n1):7070/healthz"
    for i in $(seq 2 "$NODES"); do start_node "n$i"; done
    for i in $(seq 2 "$NODES"); do wait_for 60 "node n$i" curl -sf -m 2 "http://$(ip_of n$i):7070/healthz"; done
    for g in g1 g2; do start_gateway "$g"; done
    for g in g1 g2; do
      wait_for 60 "gateway $g with $NODES nodes" \
        sh -c "curl -sf -m 2 http://$(ip_of $g):7070/readyz | grep -q '\"nodes\":$NODES'"
    done
    trap - ERR
    print_env
    ;;
  env)
    print_env
    ;;
  down)
    for g in g1 g2; do stop_pid "$g" TERM; done
    for i in $(seq 1 9); do
      [ -e "/run/netns/$(ns_of n$i)" ] || [ -f "$PIDS/n$i.pid" ] || continue
      stop_pid "n$i" TERM
      kill_sandboxes "n$i"
      [ -d "$DIR/n$i/data" ] && bash "$here/space-down.sh" "$DIR/n$i/data" --purge >/dev/null 2>&1 || true
    done
    for e in e1 e2 e3; do stop_pid "$e" TERM; done
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$PFX-" || true); do
      ip netns del "$ns" 2>/dev/null || true
    done
    for l in $(ls /sys/class/net 2>/dev/null | grep "^$PFX" || true); do ip link del "$l" 2>/dev/null || true; done
    ip link del "$BR" 2>/dev/null || true
    rm -rf "$DIR"
    echo "devcluster: down"
    ;;
  kill-node|stop-node)
    n=${ARGS[0]:-}; [ -n "$n" ] || die "$cmd NODE"
    alive "$n" || die "node $n is not running"
    kill_member "$n"
    if [ "$cmd" = kill-node ]; then
      kill_sandboxes "$n"
      echo "devcluster: killed $n and its sandboxes"
    else
      echo "devcluster: killed spaced of $n (its sandboxes run on)"
    fi
    ;;
  start-node|start-etcd)
    n=${ARGS[0]:-}; [ -n "$n" ] || die "$cmd NAME"
    alive "$n" && die "$n is running"
    # A killed spaced's data dir lock went with its process.
    if [ "$cmd" = start-node ]; then
      start_node "$n"
      wait_for 60 "node $n" curl -sf -m 2 "http://$(ip_of "$n"):7070/healthz"
    else
      start_etcd "$n"
      wait_for 30 "etcd $n" curl -sf -m 2 "http://$(ip_of "$n"):2379/health"
    fi
    echo "devcluster: started $n"
    ;;
  kill-etcd)
    leader=""
    end=$(( $(date +%s) + 15 ))  # an election may be under way
    while [ -z "$leader" ] && [ "$(date +%s)" -lt "$end" ]; do
    for e in e1 e2 e3; do
      alive "$e" || continue
      st=$(curl -sf -m 2 -X POST "http://$(ip_of $e):2379/v3/maintenance/status" -d '{}' || true)
      me=$(echo "$st" | sed -n 's/.*"member_id":"\([0-9]*\)".*/\1/p')
      lead=$(echo "$st" | sed -n 's/.*"leader":"\([0-9]*\)".*/\1/p')
      if [ -n "$me" ] && [ "$me" = "$lead" ]; then leader=$e; break; fi
    done
    [ -n "$leader" ] || sleep 0.3
    done
    [ -n "$leader" ] || die "no etcd leader found"
    kill_member "$leader"
    echo "$leader"
    ;;
  cut|heal)
    [ "${#ARGS[@]}" -ge 2 ] || die "$cmd A B..."
    a=${ARGS[0]}
    for b in "${ARGS[@]:1}"; do
      if [ "$cmd" = cut ]; then
        ip -n "$(ns_of "$a")" route replace blackhole "$(ip_of "$b")/32"
        ip -n "$(ns_of "$b")" route replace blackhole "$(ip_of "$a")/32"
      else
        ip -n "$(ns_of "$a")" route del blackhole "$(ip_of "$b")/32" 2>/dev/null || true
        ip -n "$(ns_of "$b")" route del blackhole "$(ip_of "$a")/32" 2>/dev/null || true
      fi
    done
    echo "devcluster: ${cmd} $a <-> ${ARGS[*]:1}"
    ;;
  *)
    sed -n '2,24p' "$0" >&2
    exit 2
    ;;
esac
