#!/usr/bin/env bash
# Builds the microVM guest artefacts into OUTDIR (run by the build; cheap when fresh):
#   vmlinux      the uncompressed kernel of the newest installed Debian cloud kernel
#                (PVH entry: QEMU boots it directly, ~0.25 s faster than the bzImage)
#   initrd.cpio  uncompressed newc cpio: busybox, /init (guest-init.sh), space-agent and
#                the virtio modules of that kernel (disk, console, network) plus fuse and
#                virtiofs (named volumes; loaded only by VMs that mount some)
#   kernel-version
# Usage: make-guest.sh OUTDIR AGENT_BINARY INIT_SCRIPT [BUSYBOX]
# Without an installed kernel it prints a warning and exits 0 (spaced then reports the
# microvm runtime as unavailable).
set -euo pipefail
out=$1 agent=$2 init=$3 busybox=${4:-/bin/busybox}
vmlinuz=$(ls -1 /boot/vmlinuz-*-cloud-amd64 2>/dev/null | sort -V | tail -n 1 || true)
if [ -z "$vmlinuz" ]; then
  echo "make-guest: no /boot/vmlinuz-*-cloud-amd64 (package linux-image-cloud-amd64): microvm guest not built" >&2
  exit 0
fi
kver=${vmlinuz#/boot/vmlinuz-}
mods=/lib/modules/$kver/kernel
mkdir -p "$out"
# Fresh? (inputs older than both outputs and the same kernel)
if [ -f "$out/vmlinux" ] && [ -f "$out/initrd.cpio" ] && [ "$(cat "$out/kernel-version" 2>/dev/null)" = "$kver" ] &&
   [ "$out/initrd.cpio" -nt "$agent" ] && [ "$out/initrd.cpio" -nt "$init" ] && [ "$out/vmlinux" -nt "$vmlinuz" ]; then
  exit 0
fi
tmp=$(mktemp -d "$out/.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# The bzImage carries an LZ4 (legacy frame) payload: cut from its magic and decompress.
python3 - "$vmlinuz" "$tmp/vmlinux.lz4" <<'PY'
import sys
d = open(sys.argv[1], 'rb').read()
i = d.find(b'\x02\x21\x4c\x18')
if i < 0:
    sys.exit("make-guest: no LZ4 payload in " + sys.argv[1])
open(sys.argv[2], 'wb').write(d[i:])
PY
lz4 -dcq "$tmp/vmlinux.lz4" > "$tmp/vmlinux" 2>/dev/null || true  # trailing bytes after the frame
[ "$(head -c 4 "$tmp/vmlinux" | od -An -tx1 | tr -d ' ')" = "7f454c46" ] || { echo "make-guest: $vmlinuz: not an LZ4 ELF kernel" >&2; exit 1; }
root=$tmp/root
mkdir -p "$root/bin" "$root/dev" "$root/proc" "$root/sys" "$root/newroot" "$root/lib/modules"
cp "$busybox" "$root/bin/busybox"
cp "$agent" "$root/space-agent"
cp "$init" "$root/init"
chmod 0755 "$root/init" "$root/space-agent" "$root/bin/busybox"
for m in drivers/virtio/virtio drivers/virtio/virtio_ring drivers/virtio/virtio_mmio drivers/block/virtio_blk \
         drivers/char/virtio_console net/core/failover drivers/net/net_failover drivers/net/virtio_net \
         fs/fuse/fuse fs/fuse/virtiofs; do
  f=$(ls "$mods/$m".ko* | head -n 1)
  case $f in
    *.xz) xz -dc "$f" > "$root/lib/modules/$(basename "$m").ko" ;;
    *.zst) zstd -dcq "$f" > "$root/lib/modules/$(basename "$m").ko" ;;
    *) cp "$f" "$root/lib/modules/" ;;
  esac
done
(cd "$root" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) > "$tmp/initrd.cpio"
mv "$tmp/vmlinux" "$out/vmlinux"
mv "$tmp/initrd.cpio" "$out/initrd.cpio"
echo "$kver" > "$out/kernel-version"
