// Routes: GET /v1/runtimes — every runtime (built-in and plugin), its capabilities and
// whether it can run sandboxes on this host (docs/api.md, docs/runtime-plugins.md).
#include "api/http.h"

namespace space::api {

Awaitable<bool> RouteRuntimes(Ctx& ctx) {
  const auto& s = ctx.segments;
  if (s.size() != 2 || s[1] != "runtimes") co_return false;
  if (ctx.method != "GET") {
    co_await ctx.ReplyError(Error{Errc::kInvalidArgument, 0, "method not allowed"});
    co_return true;
  }
  Json body = {{"runtimes", ctx.platform->ListRuntimes()}};
  co_await ctx.Reply(200, body);
  co_return true;
}

}  // namespace space::api
