#!/usr/bin/env bash
# Run by ctest after the integration tests (a FIXTURES_CLEANUP step): removes what a test
# binary that crashed could not (its spaced was killed with it, but sandboxes run detached):
# containers, mounts and data dirs of /tmp/space-it-* that no live spaced uses.
# Prints what it removed; a clean run prints "nothing left behind".
set -uo pipefail
here=$(dirname "$0")
left=0
for dir in /tmp/space-it-*; do
  [ -d "$dir" ] || continue
  if pgrep -f -- "--data-dir $dir/data" >/dev/null 2>&1; then continue; fi
  echo "cleanup: removing leftovers of $dir"
  bash "$here/space-down.sh" "$dir/data" --purge || true
  rm -rf "$dir"
  left=$((left + 1))
done
# Clusters of cluster_test (scripts/devcluster.sh) whose test died first.
if ! pgrep -f tests/cluster/cluster_test.py >/dev/null 2>&1; then
  for dir in /tmp/space-cluster-*; do
    [ -d "$dir" ] || continue
    echo "cleanup: removing the cluster under $dir"
    bash "$here/devcluster.sh" down --dir "$dir" >/dev/null 2>&1 || true
    rm -rf "$dir"
    left=$((left + 1))
  done
fi
# The fake internet of network_test (and bench/net.sh), when its process died first.
if ! pgrep -x network_test >/dev/null 2>&1 && ! pgrep -f bench/net.sh >/dev/null 2>&1; then
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^fakenet-'); do
    echo "cleanup: removing namespace $ns"
    ip netns del "$ns" 2>/dev/null || true
    left=$((left + 1))
  done
  for l in $(ls /sys/class/net 2>/dev/null | grep -E '^fk[hb]'); do ip link del "$l" 2>/dev/null || true; done
  ip route del 203.0.113.0/24 via 198.51.100.2 2>/dev/null || true
fi
[ "$left" -eq 0 ] && echo "cleanup: nothing left behind"
exit 0
