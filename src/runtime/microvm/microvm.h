// microvm: the `microvm` runtime backend — each sandbox is a QEMU `microvm` machine
// (KVM where a probe boot shows it works, TCG otherwise) booting Debian's cloud kernel
// and an initramfs whose /init hands PID 1 to space-agent on a virtio-serial port.
//
// Everything lives under MicrovmOptions::state_dir:
//   images/<digest>[-<N>m].ext4  the template's tree as a sparse ext4 image of the sandbox's
//                           disk size (limits.disk_bytes: ENOSPC in the guest at it; mkfs.ext4 -d; no
//                           root mount or loop device), shared read-only by every VM
//   templates/<key>/        a template snapshot: the guest booted once to its agent, then
//                           saved with its RAM in `mem` (memory-backend-file, share=on,
//                           x-ignore-shared) plus `state` and `disk.qcow2`; later VMs of
//                           the template restore it with `mem` mapped copy-on-write
//                           (share=off) instead of booting
//   vms/<id>/               one VM: vm.json, disk.qcow2 (qcow2 overlay), qmp.sock,
//                           agent.sock (the virtio-serial chardev), console.log, qemu.log,
//                           qemu.pid, and suspend.state while suspended; with named
//                           volumes also fs.sock, virtiofsd.pid, virtiofsd.log and share/
//                           (volumes.cc)
//   vms/.pool-<hex>/        a VM of the restore pool (hidden from List): the template
//                           snapshot restored, its agent's first requests and a throwaway
//                           command run (this warms TCG's translation cache), then stopped;
//                           `pooled` once ready. A start from that template renames the dir
//                           to vms/<id> (leaving a link at the old name, which QEMU uses to
//                           reopen its disk) and only continues the guest and syncs it (QEMU
//                           keeps its -name, recorded as `marker` in vm.json). Pool VMs
//                           belong to no sandbox: the runtime's destructor and the next
//                           Init() end them
//   snapshots/<id>/         full snapshots: state (QEMU migration stream), disk.qcow2, meta.json
//   accel.json              the result of the KVM probe (cached)
// QEMU runs detached in its own session, as its own unprivileged uid (-runas), with
// seccomp (-sandbox on) and no network device: it survives a restart of spaced, which
// finds it again through vms/<id>/. Snapshot files are opened by the daemon and handed
// to QEMU over QMP (getfd), so the unprivileged QEMU needs no access to them.
//
// After a restore (template snapshot, pool VM, full snapshot, wake) the runtime tells the agent
// the real time, the clone's identity (host name, machine id) and fresh entropy (`sync`
// in docs/agent-protocol.md) before Start/Wake return; the vmgenid device gives kernels
// that have its driver a new generation id too.
//
// Thread-safety: calls for different ids may run concurrently; calls for one id are
// serialised by the caller.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/common.h"
#include "runtime/runtime.h"

namespace space::runtime {

struct MicrovmOptions {
  std::string state_dir;                      // absolute; e.g. DATA/runtime/microvm
  std::string kernel;                         // uncompressed vmlinux (or a bzImage)
  std::string initrd;                         // the initramfs with space-agent
  std::string qemu_binary = "qemu-system-x86_64";
  // Serves named volumes to VMs (virtiofs; volumes.cc). QEMU 7.2's, in qemu-system-common.
  std::string virtiofsd = "/usr/lib/qemu/virtiofsd";
  std::string accel = "auto";                 // auto | kvm | tcg
  // Template files are owned by root + this; also the map of the volumes' virtiofsd (the
  // oci sandboxes' user namespace), which VMs with volumes need.
  uint32_t template_uid_shift = 0;
  uint32_t vm_uid_base = 3000000;             // VMs run as uids from here (0: as root)
  int64_t boot_timeout_ms = 60000;            // QEMU started -> agent HELLO
  bool template_snapshots = true;             // start VMs from a per-template snapshot
  // Restored VMs kept stopped and ready per template snapshot (refilled in the
  // background, at a lower priority, after each start from that template); 0 = none.
  int restore_pool = 2;
};

// Checks the options and creates the state directories. Never fails for a missing
// kernel, initrd or QEMU: the runtime is then registered but every Start() fails with a
// clear message (so `runtime: microvm` explains itself). The acceleration is probed
// lazily, at the first start, and logged.
[[nodiscard]] Result<std::unique_ptr<Runtime>> CreateMicrovmRuntime(const MicrovmOptions& opts);

}  // namespace space::runtime
