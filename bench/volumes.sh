#!/bin/bash
# Named volumes on both runtimes (docs/benchmarks.md, "Volumes in microVMs"): one volume
# mounted by an oci sandbox and a microVM (virtiofs), the same static small-file workload
# (bench/smallfiles.cc) on the volume and on each sandbox's own disk, in the same run; and
# what a microVM create costs with a volume (a cold boot) against without (template
# snapshot or restore pool).
#
# Usage: SPACE_URL=http://127.0.0.1:7070 SPACE_API_KEY=... bench/volumes.sh [BUILD_DIR] [N] [ROUNDS]
set -euo pipefail
BUILD=${1:-build}
N=${2:-1000}
ROUNDS=${3:-3}
SPACE="$BUILD/bin/space"
PROG="$BUILD/bin/smallfiles"
: "${SPACE_URL:?set SPACE_URL}" "${SPACE_API_KEY:?set SPACE_API_KEY}"
VOL=bench-vol-$$
IDS=()
cleanup() {
  for id in "${IDS[@]}"; do "$SPACE" rm "$id" >/dev/null 2>&1 || true; done
  "$SPACE" volume rm "$VOL" >/dev/null 2>&1 || true
}
trap cleanup EXIT
ms() { date +%s%3N; }
"$SPACE" volume create "$VOL" --size 256M >/dev/null
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"

echo "create, microvm (256 MiB, 1 cpu):"
# The first create of a template makes its snapshot and fills the restore pool: timed apart.
t=$(ms); id=$("$SPACE" create --runtime microvm --memory 256M); IDS+=("$id")
echo "  first (makes the template snapshot) $(( $(ms) - t )) ms"
for i in $(seq 1 "$ROUNDS"); do
  t=$(ms); id=$("$SPACE" create --runtime microvm --memory 256M); IDS+=("$id"); plain=$(( $(ms) - t ))
  t=$(ms); id=$("$SPACE" create --runtime microvm --memory 256M -v "$VOL:/vol"); IDS+=("$id"); vol=$(( $(ms) - t ))
  echo "  without volumes ${plain} ms, with one volume (cold boot) ${vol} ms"
done
MVM=${IDS[-1]}
OCI=$("$SPACE" create --runtime oci -v "$VOL:/vol"); IDS+=("$OCI")
for id in "$OCI" "$MVM"; do
  "$SPACE" cp "$PROG" "$id:/tmp/smallfiles" >/dev/null
  "$SPACE" exec "$id" -- chmod 755 /tmp/smallfiles
done
echo "small files: $N files of 1 KiB created, stat'ed, read, unlinked ($ROUNDS rounds each)"
for r in $(seq 1 "$ROUNDS"); do
  echo "  oci     volume: $("$SPACE" exec "$OCI" -- /tmp/smallfiles /vol/oci-$r "$N" 1024)"
  echo "  microvm volume: $("$SPACE" exec "$MVM" -- /tmp/smallfiles /vol/vm-$r "$N" 1024)"
  echo "  oci     own disk: $("$SPACE" exec "$OCI" -- /tmp/smallfiles /root/oci-$r "$N" 1024)"
  echo "  microvm own disk: $("$SPACE" exec "$MVM" -- /tmp/smallfiles /root/vm-$r "$N" 1024)"
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
