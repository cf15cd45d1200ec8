#!/usr/bin/env bash
# Starts a private spaced on a free port with a temporary data dir, runs space_bench (or
# PROG, e.g. PROG=space_load) against it, and cleans up. Usage: bench/run.sh [args...]
# SPACED_ARGS adds flags to spaced.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/bin}
DIR=$(mktemp -d /tmp/space-bench-XXXXXX)
chmod 711 "$DIR"
cleanup() {
  if [ -n "${PID:-}" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
  if [ -n "${PID2:-}" ]; then kill "$PID2" 2>/dev/null || true; wait "$PID2" 2>/dev/null || true; fi
  # microVMs left behind: their QEMU pids are in the runtime's state dirs.
  for pf in "$DIR"/*/runtime/microvm/vms/*/qemu.pid "$DIR"/*/runtime/microvm/vms/.pool-*/qemu.pid; do
    [ -f "$pf" ] || continue
    p=$(cat "$pf"); grep -q "space-vm-" "/proc/$p/cmdline" 2>/dev/null && kill -9 "$p" 2>/dev/null || true
  done
  # Remove every sandbox the run may have left, then the pool.
  if [ -d "$DIR/data/runtime/oci/crun" ]; then
    for id in $(ls "$DIR/data/runtime/oci/crun" 2>/dev/null); do
      nsenter --mount="$DIR/data/runtime/oci/ns/mnt" crun --root "$DIR/data/runtime/oci/crun" delete -f "$id" 2>/dev/null || true
    done
  fi
  # The bare-crun baselines' parent cgroups (space_bench), empty once their runs are deleted.
  rmdir /sys/fs/cgroup/*/space-bench /sys/fs/cgroup/space-bench 2>/dev/null || true
  grep " $DIR" /proc/self/mountinfo | awk '{print $5}' | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
  rm -rf "$DIR"
}
trap cleanup EXIT
# shellcheck disable=SC2086
$BIN/spaced --listen 127.0.0.1:0 --data-dir "$DIR/data" --log-level warn --warm-pool base=2 ${SPACED_ARGS:-} >"$DIR/spaced.log" 2>&1 &
PID=$!
export SPACED_PID=$PID
for _ in $(seq 1 300); do [ -s "$DIR/data/url" ] && break; sleep 0.1; done
URL=$(cat "$DIR/data/url")
KEY=$(cat "$DIR/data/api-key")
PROG=${PROG:-space_bench}
MVM_ARGS=()
if [ "$PROG" = space_bench ]; then
  # MICROVM=N (default 3; 0 skips): microVM figures. Cold boots are timed on a second spaced
  # that boots every VM (no template snapshots).
  MICROVM=${MICROVM:-3}
  if [ "$MICROVM" -gt 0 ] && [ -f "$BIN/../share/space/microvm/vmlinux" ]; then
    $BIN/spaced --listen 127.0.0.1:0 --data-dir "$DIR/cold" --log-level warn --no-microvm-template-snapshots >"$DIR/spaced-cold.log" 2>&1 &
    PID2=$!
    for _ in $(seq 1 300); do [ -s "$DIR/cold/url" ] && break; sleep 0.1; done
    MVM_ARGS=(--microvm "$MICROVM" --microvm-cold-url "$(cat "$DIR/cold/url")" --microvm-cold-key "$(cat "$DIR/cold/api-key")")
  fi
fi
echo "# $PROG $(date -u +%FT%TZ) on $(nproc) cores; spaced at $URL"
# PROG is a program in $BIN, or a Python script in bench/ (e.g. PROG=peer.py).
if [[ "$PROG" == *.py ]]; then
  /usr/bin/python3 "bench/$PROG" --url "$URL" --key "$KEY" --data-dir "$DIR/data" --bin "$BIN" "$@"
else
  $BIN/$PROG --url "$URL" --key "$KEY" --data-dir "$DIR/data" "${MVM_ARGS[@]}" "$@"
fi
