#!/usr/bin/env bash
# Tears down what a spaced left on the host for one data dir: its sandboxes (containers, VMs),
# the mounts under the data dir (storage pool, runtime namespace), and with --purge the
# data dir itself. Stop spaced first (it leaves sandboxes running on purpose).
# Usage: scripts/space-down.sh DATA_DIR [--purge]
set -euo pipefail
DATA=${1:?usage: space-down.sh DATA_DIR [--purge]}
DATA=$(realpath "$DATA")
STATE="$DATA/runtime/oci"
if [ -d "$STATE" ]; then
  for rt in crun runc; do
    [ -d "$STATE/$rt" ] || continue
    for id in $(ls "$STATE/$rt" 2>/dev/null); do
      if [ -e "$STATE/ns/mnt" ]; then
        nsenter --mount="$STATE/ns/mnt" "$rt" --root "$STATE/$rt" delete -f "$id" >/dev/null 2>&1 || true
      else
        "$rt" --root "$STATE/$rt" delete -f "$id" >/dev/null 2>&1 || true
      fi
    done
  done
  # Leftover cgroups of the sandboxes (crun removes them; this covers crashes), and the
  # memory cgroups kept for later sandboxes (spaced --parked-memory-cgroups; empty ones only).
  for dir in /sys/fs/cgroup/*/space/sb-* /sys/fs/cgroup/space/sb-* /sys/fs/cgroup/memory/space/.park-*; do
    [ -d "$dir" ] && grep -q . "$dir/cgroup.procs" 2>/dev/null && continue
    [ -d "$dir" ] && rmdir "$dir" 2>/dev/null || true
  done
fi
# microVMs: each QEMU's pid is in its state dir; kill it only if its command line is ours
# (its -name: space-vm-<id>, or the restore-pool slot it came from, recorded in vm.json).
for pf in "$DATA"/runtime/microvm/vms/*/qemu.pid "$DATA"/runtime/microvm/vms/.pool-*/qemu.pid; do
  [ -f "$pf" ] || continue
  pid=$(cat "$pf")
  dir=$(dirname "$pf")
  name=$(grep -o '"marker":"[^"]*"' "$dir/vm.json" 2>/dev/null | cut -d'"' -f4 || true)
  [ -n "$name" ] || name="space-vm-$(basename "$dir")"
  if tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q -F -- "-name $name "; then
    kill -9 "$pid" 2>/dev/null || true
  fi
done
# Runtime plugins (docs/runtime-plugins.md): each one destroys what it lists, from its own
# state alone (plugin.json names the executable and state dir spaced used).
for pj in "$DATA"/runtime-plugins/*/plugin.json; do
  [ -f "$pj" ] || continue
  exe=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["executable"])' "$pj" 2>/dev/null || true)
  sd=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["state_dir"])' "$pj" 2>/dev/null || true)
  [ -x "$exe" ] && [ -n "$sd" ] || continue
  req='{"version":"space-runtime/v1","state_dir":"'"$sd"'"}'
  ids=$(echo "$req" | timeout 60 setsid "$exe" list 2>/dev/null | /usr/bin/python3 -c 'import json,sys; print(" ".join(json.load(sys.stdin).get("ids", [])))' 2>/dev/null || true)
  for h in "$(dirname "$pj")"/handles/*; do [ -e "$h" ] && ids="$ids $(basename "${h%.*}")"; done
  for id in $ids; do
    echo '{"version":"space-runtime/v1","state_dir":"'"$sd"'","id":"'"$id"'","handle":null}' |
      timeout 90 setsid "$exe" destroy >/dev/null 2>&1 || true
  done
done
# Unmount deepest first.
# Networking (docs/networking.md): the namespaces, host veths and nftables table named
# after the data dir's tag (BLAKE2b-128 of its path, first 6 hex digits).
TAG=$(printf %s "$DATA" | b2sum -l 128 | cut -c1-6)
for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^space-$TAG-"); do ip netns del "$ns" 2>/dev/null || true; done
for l in $(ls /sys/class/net 2>/dev/null | grep "^s$TAG-"); do ip link del "$l" 2>/dev/null || true; done
nft delete table inet "space_$TAG" 2>/dev/null || true
grep -F " $DATA" /proc/self/mountinfo | awk '{print $5}' | sort -r | while read -r m; do
  umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
done
if [ "${2:-}" = "--purge" ]; then rm -rf "$DATA"; fi
