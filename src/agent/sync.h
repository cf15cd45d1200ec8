// agent: `sync` — a microVM restored from a snapshot wakes with the clock, host name,
// machine id and random state of the moment the snapshot was taken, and with the network
// address of the VM it was taken from. The host sends the real time, the clone's identity,
// fresh entropy and, for a networked sandbox, its address and the files its network needs
// (resolv.conf, the CA trust bundle); each step is best effort (a container's agent may
// not set the clock) and the response says which were applied (docs/agent-protocol.md).
#pragma once

#include "common/json.h"

namespace space::agent {

// The response body for a `sync` request.
Json SyncIdentity(const Json& j);

}  // namespace space::agent
