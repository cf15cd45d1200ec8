// api/views: JSON renderings of core records, as documented in docs/api.md. Pure functions.
#pragma once

#include "common/json.h"
#include "core/core.h"

namespace space::api {

Json SandboxJson(const store::SandboxRecord& r);
Json OperationJson(const store::OperationRecord& r);
Json CommandJson(const core::CommandInfo& c);
Json TemplateJson(const store::TemplateRecord& t);
Json SnapshotJson(const store::SnapshotRecord& s);
Json ErrorBody(const Error& e);
// One server-sent event: "event: NAME\ndata: JSON\n\n" (GET /v1/events, docs/console.md).
std::string SseEvent(std::string_view name, const Json& data);
// The one place where error codes become HTTP statuses.
int HttpStatusFor(Errc code);

}  // namespace space::api
