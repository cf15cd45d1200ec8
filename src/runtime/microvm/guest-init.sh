#!/bin/busybox sh
# /init of the SPACE microVM initramfs: loads the virtio modules (disk, console, NIC), mounts the root disk
# (/dev/vda, the sandbox's qcow2 overlay on its template image), puts space-agent on a
# tmpfs at /.space inside it and hands PID 1 over to the agent on the virtio-serial port
# named space.0. Kernel command line: SPACE_HOSTNAME=NAME sets the host name;
# SPACE_VOLUMES=1 loads fuse and virtiofs (the agent mounts the volumes at its first sync:
# docs/volumes.md; other VMs do without the ~50 ms under TCG); errors end in poweroff so
# the host sees QEMU exit instead of a hung boot.
/bin/busybox mount -t devtmpfs dev /dev
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sys /sys
fail() {
  echo "space-init: $*" > /dev/ttyS0
  /bin/busybox poweroff -f
}
for m in virtio_ring virtio virtio_mmio virtio_blk virtio_console failover net_failover virtio_net; do
  /bin/busybox insmod /lib/modules/$m.ko 2>/dev/ttyS0 || fail "insmod $m"
done
if [ "$SPACE_VOLUMES" = 1 ]; then
  for m in fuse virtiofs; do
    /bin/busybox insmod /lib/modules/$m.ko 2>/dev/ttyS0 || fail "insmod $m"
  done
fi
i=0
while [ ! -b /dev/vda ]; do
  i=$((i+1)); [ $i -gt 2000 ] && fail "no root disk /dev/vda"
  /bin/busybox usleep 1000
done
/bin/busybox mkdir -p /newroot
/bin/busybox mount -t ext4 -o rw,noatime /dev/vda /newroot || fail "mount /dev/vda"
port=""
i=0
while [ -z "$port" ]; do
  for p in /sys/class/virtio-ports/*; do
    [ -f "$p/name" ] && [ "$(/bin/busybox cat $p/name)" = "space.0" ] && port=/dev/${p##*/}
  done
  [ -n "$port" ] && [ -c "$port" ] && break
  port=""
  i=$((i+1)); [ $i -gt 2000 ] && fail "no virtio-serial port space.0"
  /bin/busybox usleep 1000
done
/bin/busybox mkdir -p /newroot/.space /newroot/dev /newroot/proc /newroot/sys /newroot/tmp
/bin/busybox mount -t tmpfs -o mode=0755,size=64m space /newroot/.space || fail "tmpfs /.space"
/bin/busybox mkdir -p /newroot/.space/bin
/bin/busybox cp /space-agent /newroot/.space/bin/space-agent || fail "copy agent"
/bin/busybox mount --move /dev /newroot/dev
/bin/busybox mkdir -p /newroot/dev/pts /newroot/dev/shm
/bin/busybox mount -t devpts -o newinstance,ptmxmode=0666,mode=0620,gid=5 devpts /newroot/dev/pts
/bin/busybox mount -t tmpfs -o nosuid,nodev,mode=1777 shm /newroot/dev/shm
/bin/busybox mount --move /proc /newroot/proc
/bin/busybox mount --move /sys /newroot/sys
[ -n "$SPACE_HOSTNAME" ] && /bin/busybox hostname "$SPACE_HOSTNAME"
exec /bin/busybox switch_root /newroot /.space/bin/space-agent --channel "$port"
