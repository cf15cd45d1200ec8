// api/e2b/control: what the control-plane route files share (routes_e2b_control.cc for
// sandboxes, routes_e2b_snapshots.cc for snapshots, fork and logs). api/e2b only.
#pragma once

#include <string>

#include "api/e2b/e2b.h"

namespace space::api::e2b {

// How long a synchronous E2B call waits for its SPACE operation.
inline constexpr int64_t kOperationWaitMs = 5 * 60 * 1000;

// E2B's error shape: {"code":<http status>,"message"}.
Awaitable<void> ReplyError(Ctx& ctx, int status, const std::string& message);
Awaitable<void> ReplyError(Ctx& ctx, const Error& e);

// "base:latest" -> "base" (E2B names templates without the default tag).
std::string TemplateId(const std::string& ref);
// E2B's two states; "" for a sandbox E2B does not see (deleting, deleted, error).
std::string E2bState(const std::string& state);
// The sandbox as E2B may see it: kNotFound for unknown or deleted ones.
Result<store::SandboxRecord> Visible(core::Platform* p, const std::string& id);
// Waits for an operation; its failure (or not finishing in time) becomes the error.
Awaitable<Status> Finish(Ctx& ctx, const store::OperationRecord& op, int64_t wait_ms = kOperationWaitMs);
// The answer to create, connect and fork (E2B's `Sandbox`).
Json Created(const Ctx& ctx, const store::SandboxRecord& r);
// E2B's ListedSandbox.
Json Listed(const store::SandboxRecord& r);

// Snapshots, fork and logs (routes_e2b_snapshots.cc); each answers the request.
Awaitable<void> CreateSnapshot(Ctx& ctx, const std::string& sandbox_id);
Awaitable<void> ListSnapshots(Ctx& ctx);
// DELETE /templates/{id}: a snapshot id deletes that snapshot.
Awaitable<void> DeleteTemplate(Ctx& ctx, const std::string& id);
// The newest ready snapshot given `name` ("name[:tag]") by createSnapshot({name}); "" if none.
std::string SnapshotByName(core::Platform* p, const std::string& name);
Awaitable<void> Fork(Ctx& ctx, const std::string& sandbox_id);
Awaitable<void> Logs(Ctx& ctx, const std::string& sandbox_id, bool v2);

}  // namespace space::api::e2b
