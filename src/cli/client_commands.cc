// Client: commands, their output (plain, mux streams, resumed), stdin and signals (see
// client.h).
#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "cli/client.h"
#include "cli/client_internal.h"

namespace space::client {

using internal::ArrayField;
using internal::ParseAnswer;
using internal::PathEscape;

// ---------------------------------------------------------------------------------------------
// Commands

Result<Json> Client::StartCommand(std::string_view id, const Json& body) {
  return Call("POST", SandboxPath(id) + "/commands", body);
}

Result<Json> Client::ListCommands(std::string_view id) {
  auto r = Call("GET", SandboxPath(id) + "/commands");
  if (!r) return r;
  return ArrayField(*r, "commands");
}

Result<Json> Client::GetCommand(std::string_view id, std::string_view cid, milliseconds wait) {
  std::string path = SandboxPath(id) + "/commands/" + PathEscape(cid);
  if (wait.count() > 0) path += "?wait=" + FormatWait(wait);
  return Call("GET", path);
}

Result<OutputChunk> Client::ReadOutput(std::string_view id, std::string_view cid,
                                       std::string_view stream, uint64_t offset, milliseconds wait,
                                       int64_t limit) {
  std::string path = SandboxPath(id) + "/commands/" + PathEscape(cid) +
                     "/output?stream=" + QueryEscape(stream) + "&offset=" + std::to_string(offset);
  if (limit >= 0) path += "&limit=" + std::to_string(limit);
  if (wait.count() > 0) path += "&wait=" + FormatWait(wait);
  auto r = Request("GET", path);
  if (!r) return tl::unexpected(r.error());
  if (!r->ok()) return tl::unexpected(ErrorFromResponse(*r));
  OutputChunk chunk;
  chunk.bytes = std::move(r->body);
  chunk.next_offset = offset + chunk.bytes.size();
  if (auto v = r->Header("Space-Next-Offset")) {
    char* end = nullptr;
    unsigned long long n = std::strtoull(v->c_str(), &end, 10);
    if (end == v->c_str() || *end != '\0') {
      return Fail(Errc::kInternal, "spaced sent a bad Space-Next-Offset: " + *v);
    }
    chunk.next_offset = n;
  }
  chunk.state = r->Header("Space-Command-State").value_or("");
  if (auto v = r->Header("Space-Exit-Code"); v && !v->empty()) {
    char* end = nullptr;
    long n = std::strtol(v->c_str(), &end, 10);
    if (end != v->c_str() && *end == '\0') chunk.exit_code = static_cast<int>(n);
  }
  return chunk;
}

Result<Json> Client::StreamMux(std::string_view id, std::string_view cid, MuxOffsets& offsets,
                               const MuxCallback& callback) {
  Transfer t;
  t.method = "GET";
  t.path = SandboxPath(id) + "/commands/" + PathEscape(cid) +
           "/output?format=mux&stdout_offset=" + std::to_string(offsets.stdout_offset) +
           "&stderr_offset=" + std::to_string(offsets.stderr_offset);
  return PerformMux(t, cid, offsets, callback, nullptr);
}

Result<Json> Client::StartAndStream(std::string_view id, const Json& body, MuxOffsets& offsets,
                                    const MuxCallback& callback, std::string* cid) {
  std::string text = body.dump(-1, ' ', false, Json::error_handler_t::replace);
  Transfer t;
  t.method = "POST";
  t.path = SandboxPath(id) + "/commands?stream=mux";
  t.body = text;
  t.send_body = true;
  t.content_type = "application/json";
  offsets = MuxOffsets{};
  cid->clear();
  auto r = PerformMux(t, "the new command", offsets, callback, cid);
  if (r && cid->empty()) return Fail(Errc::kInternal, "spaced sent no Space-Command-Id");
  return r;
}

Result<Json> Client::PerformMux(Transfer& t, std::string_view what, MuxOffsets& offsets,
                                const MuxCallback& callback, std::string* command_id) {
  t.headers.push_back("Accept: application/vnd.space.mux");
  MuxParser parser;
  std::optional<Error> parse_error;
  std::optional<std::string> exit_payload;
  auto on_record = [&](MuxKind kind, std::string_view bytes) {
    if (kind == MuxKind::kStdout) offsets.stdout_offset += bytes.size();
    if (kind == MuxKind::kStderr) offsets.stderr_offset += bytes.size();
    if (kind == MuxKind::kExit) exit_payload = std::string(bytes);
    return callback(kind, bytes);
  };
  t.sink = [&](std::string_view data) {
    // Headers are complete once the body flows.
    if (command_id && command_id->empty()) {
      if (auto v = t.response.Header("Space-Command-Id")) *command_id = *v;
    }
    auto r = parser.Feed(data, on_record);
    if (!r) {
      parse_error = r.error();
      return false;
    }
    return *r;
  };
  auto r = Perform(t);
  if (parse_error) return tl::unexpected(*parse_error);
  if (exit_payload) {
    // The exit record is the last thing the server sends; whatever happened to the
    // connection afterwards does not matter.
    auto command = ParseJson(*exit_payload);
    if (!command || !command->is_object()) {
      return Fail(Errc::kInternal,
                  "output stream of " + std::string(what) + ": exit record is not a JSON object");
    }
    return *command;
  }
  if (!r) return tl::unexpected(r.error());
  if (!r->ok()) return tl::unexpected(ErrorFromResponse(*r));
  if (t.sink_stopped) return Json(nullptr);
  return Fail(Errc::kUnavailable,
              "output stream of " + std::string(what) + " ended before its exit record");
}

Result<Json> Client::FollowOutput(std::string_view id, std::string_view cid, MuxOffsets& offsets,
                                  const MuxCallback& callback, milliseconds give_up_after) {
  auto last_progress = std::chrono::steady_clock::now();
  milliseconds backoff{50};
  for (;;) {
    MuxOffsets before = offsets;
    auto r = StreamMux(id, cid, offsets, callback);
    if (r || r.error().code != Errc::kUnavailable) return r;
    auto now = std::chrono::steady_clock::now();
    if (offsets.stdout_offset != before.stdout_offset ||
        offsets.stderr_offset != before.stderr_offset) {
      last_progress = now;
      backoff = milliseconds{50};
    }
    if (now - last_progress >= give_up_after) {
      return tl::unexpected(std::move(r).error().Wrap(
          "following " + std::string(cid) + " (gave up after " +
          std::to_string(give_up_after.count() / 1000) + "s without progress)"));
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, milliseconds{1000});
  }
}

Result<Client::RunOutput> Client::Run(std::string_view id, const Json& body) {
  RunOutput out;
  MuxOffsets offsets;
  auto collect = [&](MuxKind kind, std::string_view bytes) {
    if (kind == MuxKind::kStdout) out.out.append(bytes);
    if (kind == MuxKind::kStderr) out.err.append(bytes);
    return true;
  };
  std::string cid;
  auto command = StartAndStream(id, body, offsets, collect, &cid);
  // A stream that dropped after the command started resumes where it stopped.
  if (!command && command.error().code == Errc::kUnavailable && !cid.empty())
    command = FollowOutput(id, cid, offsets, collect);
  if (!command) return tl::unexpected(command.error());
  out.command = std::move(*command);
  out.exit_code = ExitCodeOf(out.command);
  return out;
}

Result<Client::RunOutput> Client::Run(std::string_view id, const std::vector<std::string>& argv) {
  return Run(id, Json{{"argv", argv}});
}

Status Client::SendStdin(std::string_view id, std::string_view cid, std::string_view bytes,
                         bool eof) {
  std::string path = SandboxPath(id) + "/commands/" + PathEscape(cid) + "/stdin";
  if (eof) path += "?eof=1";
  auto r = Request("POST", path, bytes, "application/octet-stream");
  if (!r) return tl::unexpected(r.error());
  if (!r->ok()) return tl::unexpected(ErrorFromResponse(*r));
  return Ok();
}

Status Client::Signal(std::string_view id, std::string_view cid, std::string_view signal) {
  Json body;
  bool numeric = !signal.empty() && std::all_of(signal.begin(), signal.end(),
                                                [](char c) { return c >= '0' && c <= '9'; });
  if (numeric && signal.size() <= 3) {
    body["signal"] = std::atoi(std::string(signal).c_str());
  } else {
    body["signal"] = std::string(signal);
  }
  auto r = Call("POST", SandboxPath(id) + "/commands/" + PathEscape(cid) + "/signal", body);
  if (!r) return tl::unexpected(r.error());
  return Ok();
}

}  // namespace space::client
