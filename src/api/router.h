// api/router: dispatches one request by the route table (route_table.h). api/ only.
#pragma once

#include "api/http.h"

namespace space::api {

// Answers the request: a sandbox port by Host, E2B envd by header, else the entry of the
// route table it matches (404/405 when none; authorization for the v1 routes).
Awaitable<void> RouteRequest(Ctx& ctx);

}  // namespace space::api
