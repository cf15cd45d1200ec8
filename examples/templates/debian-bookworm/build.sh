#!/usr/bin/env bash
# Builds a Debian bookworm template with python3, git and curl by debootstrap, from the
# Debian mirror this machine's apt is configured with, and imports it into a running spaced
# as debian:bookworm. Not needed by `make run`; takes a few minutes and ~400 MB.
# Usage: examples/templates/debian-bookworm/build.sh [NAME:TAG]   (run as root)
set -euo pipefail
TAG=${1:-debian:bookworm}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
SPACE=${SPACE:-$repo/build/bin/space}
command -v debootstrap >/dev/null || apt-get install -y -q --no-install-recommends debootstrap

# The mirror apt already uses (deb822 .sources files or classic sources.list).
mirror=$(grep -hoE '^URIs: *\S+' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v security | head -n1 || true)
if [ -z "$mirror" ]; then
  mirror=$(grep -hoE '^deb +\S+' /etc/apt/sources.list 2>/dev/null | awk '{print $2}' | grep -v security | head -n1 || true)
fi
[ -n "$mirror" ] || { echo "no Debian mirror found in apt's configuration" >&2; exit 1; }

work=$(mktemp -d /var/tmp/space-debian-XXXXXX)
chmod 711 "$work"
trap 'rm -rf "$work"' EXIT
echo "debootstrap bookworm from $mirror into $work/rootfs" >&2
debootstrap --variant=minbase --include=python3,git,curl,ca-certificates bookworm "$work/rootfs" "$mirror" >&2
# Keep the template small and free of host-specific state.
rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
: > "$work/rootfs/etc/resolv.conf"
"$SPACE" template import --dir "$work/rootfs" -t "$TAG"
