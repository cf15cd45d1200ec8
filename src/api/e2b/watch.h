// api/e2b/watch: envd's directory watching (filesystem.Filesystem/WatchDir, CreateWatcher,
// GetWatcherEvents, RemoveWatcher) for routes_e2b_envd.cc. SPACE's agent has no inotify:
// a watch polls the directory's listing (every 250 ms for WatchDir; at each
// GetWatcherEvents for a watcher) and reports the differences (parse.h, DiffWatch). So an
// entry created and removed between two polls goes unseen, and a write is seen as one
// event however many writes it was.
#pragma once

#include <string>

#include "api/http.h"

namespace space::api::e2b {

// WatchDir, request message read: streams StartEvent, then FilesystemEvents and keepalives
// until the client goes or the directory can no longer be listed (then the end-stream
// error). The response has not been started.
Awaitable<void> WatchDir(Ctx& ctx, const std::string& sandbox_id, const Json& req);

// CreateWatcher, GetWatcherEvents, RemoveWatcher: the response message.
[[nodiscard]] Result<Json> WatcherUnary(core::Platform* p, const std::string& sandbox_id,
                                        const std::string& method, const Json& req);

}  // namespace space::api::e2b
