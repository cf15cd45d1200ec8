// Client: sandbox lifecycle transitions, timeouts, snapshots and forks (see client.h).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "cli/client.h"
#include "cli/client_internal.h"

namespace space::client {

using internal::ArrayField;
using internal::DeadlineFor;
using internal::FinishOperation;
using internal::FirstWait;
using internal::PathEscape;

const char* TransitionName(Transition t) {
  switch (t) {
    case Transition::kPause:
      return "pause";
    case Transition::kResume:
      return "resume";
    case Transition::kSuspend:
      return "suspend";
    case Transition::kWake:
      return "wake";
  }
  return "pause";
}

std::optional<Transition> ParseTransition(std::string_view name) {
  for (Transition t :
       {Transition::kPause, Transition::kResume, Transition::kSuspend, Transition::kWake}) {
    if (name == TransitionName(t)) return t;
  }
  return std::nullopt;
}

Result<std::vector<ForkedSandbox>> ForkedSandboxesOf(const Json& op) {
  const Json* result = JsonField(op, "result");
  const Json* list = result ? JsonField(*result, "sandboxes") : nullptr;
  if (!list || !list->is_array()) {
    return Fail(Errc::kInternal, "fork " + JsonStringOr(op, "id", "operation") +
                                     " has no \"sandboxes\" in its result");
  }
  std::vector<ForkedSandbox> out;
  for (const Json& entry : *list) {
    ForkedSandbox f;
    f.id = JsonStringOr(entry, "id", "");
    f.state = JsonStringOr(entry, "state", "");
    // The per-fork error may be a plain message or an {"code","message"} object.
    if (const Json* e = JsonField(entry, "error"); e && !e->is_null()) {
      if (e->is_string()) {
        f.error = e->get<std::string>();
      } else if (e->is_object()) {
        f.error = JsonStringOr(*e, "message", JsonStringOr(*e, "code", ""));
      }
      if (f.error.empty()) f.error = e->dump(-1, ' ', false, Json::error_handler_t::replace);
    }
    out.push_back(std::move(f));
  }
  return out;
}

Result<std::pair<Json, Json>> Client::StartAndFollow(std::string_view method,
                                                     const std::string& path,
                                                     const std::optional<Json>& body,
                                                     const WaitOptions& options) {
  auto deadline = DeadlineFor(options.timeout);
  auto answer = Call(method, path + "?wait=" + FormatWait(FirstWait(options, deadline)), body);
  if (!answer) return tl::unexpected(answer.error());
  const Json* op = JsonField(*answer, "operation");
  if (!op || !op->is_object()) return std::make_pair(std::move(*answer), Json(nullptr));
  auto done = FinishOperation(*this, *op, options, deadline);
  if (!done) return tl::unexpected(done.error());
  return std::make_pair(std::move(*answer), std::move(*done));
}

namespace {

// The OP of a StartAndFollow result that must have one.
Result<Json> RequireOperation(std::pair<Json, Json> r, std::string_view what) {
  if (r.second.is_null()) {
    return Fail(Errc::kInternal, "spaced's answer to " + std::string(what) + " has no operation");
  }
  return std::move(r.second);
}

}  // namespace

// ---- Lifecycle and timeouts ----

Result<Json> Client::StartTransition(std::string_view id, Transition transition,
                                     milliseconds wait) {
  std::string path = SandboxPath(id) + "/" + TransitionName(transition);
  if (wait.count() > 0) path += "?wait=" + FormatWait(wait);
  return Call("POST", path, Json::object());
}

Result<Json> Client::TransitionAndWait(std::string_view id, Transition transition,
                                       const WaitOptions& options) {
  std::string name = TransitionName(transition);
  auto r = StartAndFollow("POST", SandboxPath(id) + "/" + name, Json::object(), options);
  if (!r) return tl::unexpected(r.error());
  bool finished_at_once = false;
  if (const Json* first = JsonField(r->first, "operation")) {
    finished_at_once = internal::OperationFinished(*first);
  }
  Json answer = r->first;
  auto op = RequireOperation(std::move(*r), name + " " + std::string(id));
  if (!op) return tl::unexpected(op.error());
  if (JsonStringOr(*op, "state", "") == "failed") return tl::unexpected(OperationError(*op));
  // spaced reads the sandbox after the operation when it finished within the wait; otherwise
  // the answer's copy predates the transition.
  if (const Json* sb = JsonField(answer, "sandbox"); finished_at_once && sb && sb->is_object()) {
    return *sb;
  }
  return GetSandbox(id);
}

Result<Json> Client::SetTimeout(std::string_view id, int64_t seconds, std::string_view on_timeout) {
  if (seconds < 0) return Fail(Errc::kInvalidArgument, "timeout must be >= 0 seconds");
  Json body = {{"timeout", seconds}};
  if (!on_timeout.empty()) body["on_timeout"] = std::string(on_timeout);
  return Call("POST", SandboxPath(id) + "/timeout", body);
}

// ---- Snapshots and forks ----

Result<Json> Client::StartSnapshot(std::string_view id, milliseconds wait) {
  std::string path = SandboxPath(id) + "/snapshots";
  if (wait.count() > 0) path += "?wait=" + FormatWait(wait);
  return Call("POST", path, Json::object());
}

Result<std::string> Client::SnapshotAndWait(std::string_view id, const WaitOptions& options) {
  auto r = StartAndFollow("POST", SandboxPath(id) + "/snapshots", Json::object(), options);
  if (!r) return tl::unexpected(r.error());
  std::string from_answer;
  if (const Json* snap = JsonField(r->first, "snapshot"); snap && snap->is_object()) {
    from_answer = JsonStringOr(*snap, "id", "");
  }
  auto op = RequireOperation(std::move(*r), "snapshot " + std::string(id));
  if (!op) return tl::unexpected(op.error());
  if (JsonStringOr(*op, "state", "") == "failed") return tl::unexpected(OperationError(*op));
  if (const Json* result = JsonField(*op, "result")) {
    if (auto sid = JsonString(*result, "snapshot_id"); sid && !sid->empty()) return *sid;
  }
  if (!from_answer.empty()) return from_answer;
  return Fail(Errc::kInternal, "snapshot " + JsonStringOr(*op, "id", "operation") +
                                   " succeeded without a snapshot_id");
}

Result<Json> Client::ListSnapshots(std::string_view sandbox_id) {
  auto r = Call("GET", sandbox_id.empty() ? std::string("/v1/snapshots")
                                          : SandboxPath(sandbox_id) + "/snapshots");
  if (!r) return r;
  return ArrayField(*r, "snapshots");
}

Result<Json> Client::GetSnapshot(std::string_view snapshot_id) {
  return Call("GET", "/v1/snapshots/" + PathEscape(snapshot_id));
}

Status Client::DeleteSnapshot(std::string_view snapshot_id) {
  auto r = Call("DELETE", "/v1/snapshots/" + PathEscape(snapshot_id));
  if (!r) return tl::unexpected(r.error());
  return Ok();
}

Result<Json> Client::StartFork(std::string_view id, int count, milliseconds wait) {
  if (count < 1) return Fail(Errc::kInvalidArgument, "fork count must be at least 1");
  std::string path = SandboxPath(id) + "/fork";
  if (wait.count() > 0) path += "?wait=" + FormatWait(wait);
  return Call("POST", path, Json{{"count", count}});
}

Result<std::vector<ForkedSandbox>> Client::ForkAndWait(std::string_view id, int count,
                                                       const WaitOptions& options) {
  if (count < 1) return Fail(Errc::kInvalidArgument, "fork count must be at least 1");
  auto r = StartAndFollow("POST", SandboxPath(id) + "/fork", Json{{"count", count}}, options);
  if (!r) return tl::unexpected(r.error());
  auto op = RequireOperation(std::move(*r), "fork " + std::string(id));
  if (!op) return tl::unexpected(op.error());
  if (JsonStringOr(*op, "state", "") != "failed") return ForkedSandboxesOf(*op);
  // spaced fails the operation when no fork came up; the entries then say why each failed,
  // which is more than the operation's summary does.
  auto forks = ForkedSandboxesOf(*op);
  if (forks && std::any_of(forks->begin(), forks->end(),
                           [](const ForkedSandbox& f) { return f.state != "running"; })) {
    return forks;
  }
  Error e = OperationError(*op);
  // Forks reported running still exist; say which, so they can be removed.
  if (forks) {
    std::string running;
    for (const ForkedSandbox& f : *forks) running += (running.empty() ? "" : ", ") + f.id;
    if (!running.empty()) e.message += " (running forks: " + running + ")";
  }
  return tl::unexpected(std::move(e));
}

}  // namespace space::client
