// agent/forward: reaching a service bound to the sandbox's own loopback from outside.
//
// In a microVM or a gVisor sandbox the host has no way into the guest's loopback: it can
// reach only the sandbox's address. For `op: forward` the agent starts (once per target
// port) a relay process that listens on the sandbox's address, on a port the kernel
// picks, and joins every connection it accepts to 127.0.0.1:port (then [::1]:port)
// inside. The relay exits after kForwardIdleNs without connections; the host asks again
// when its port stops answering.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "common/common.h"

namespace space::agent {

inline constexpr int64_t kForwardIdleNs = 600'000'000'000;  // 10 minutes

// Whether something inside accepts TCP connections on loopback `port` (127.0.0.1, then
// [::1]). Connecting to loopback never blocks for long: it is accepted or refused at once.
bool LoopbackListening(int port);

struct ForwardStarted {
  pid_t pid = -1;
  int listen_port = 0;  // on `address`
};

// Forks the relay for loopback `port`, listening on IPv4 `address` (port 0: any).
// Called by the agent's loop thread; the child closes every inherited fd but its own.
[[nodiscard]] Result<ForwardStarted> StartForward(const std::string& address, int port);

}  // namespace space::agent
