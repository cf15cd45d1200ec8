// client_internal: helpers shared by the files that implement Client (client.cc,
// client_lifecycle.cc). Not part of the client's interface; include only from those files.
// Pure functions except FinishOperation, which makes requests through the given Client.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "cli/client.h"

namespace space::client::internal {

using Deadline = std::optional<std::chrono::steady_clock::time_point>;

// Percent-encodes a path segment (everything but unreserved characters).
std::string PathEscape(std::string_view segment);
// The array under `key` in an answer like {"sandboxes":[...]}; kInternal if missing.
Result<Json> ArrayField(const Json& answer, const char* key);
// True when an OP's state is succeeded or failed.
bool OperationFinished(const Json& op);
// The deadline `timeout` from now; none for 0.
Deadline DeadlineFor(milliseconds timeout);
// Time left until `deadline` (0 when past), capped at the server's 5-minute wait limit.
milliseconds NextWait(Deadline deadline);
// The server-side wait of the first request of an *AndWait helper (at least 1 ms).
milliseconds FirstWait(const WaitOptions& options, Deadline deadline);
// Returns `op` if it is finished; else calls options.on_pending(op) and waits for it with
// client.WaitOperation until `deadline`. The result may be a failed OP.
Result<Json> FinishOperation(Client& client, const Json& op, const WaitOptions& options,
                             Deadline deadline);

}  // namespace space::client::internal
