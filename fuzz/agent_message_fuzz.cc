// Fuzz target agent_message: DecodeMessage on arbitrary payloads, then the reads the host and
// the agent make of a message's JSON through the safe accessors of common/json.h.
//
// The key names are those of docs/agent-protocol.md (HELLO, requests, responses, EXIT), so the
// accessors meet every JSON type under the names the real code asks for. Nothing may throw.
#include <cstdint>
#include <string>
#include <string_view>

#include "agent/protocol.h"
#include "common/json.h"
#include "fuzz/fuzz_util.h"

namespace {

using space::Json;
using space::fuzz::Check;

constexpr const char* kKeys[] = {
    "op",        "ok",        "error",       "code",          "message",        "version",
    "pid",       "agent",     "commands",    "stream",        "id",             "running",
    "argv",      "shell",     "env",         "cwd",           "user",           "stdin",
    "timeout_ms", "signal",   "path",        "depth",         "offset",         "length",
    "truncate",  "mode",      "create_parents", "parents",    "recursive",      "from",
    "to",        "size",      "eof",         "entry",         "entries",        "truncated",
    "exit_code", "timed_out", "time_ns",     "stdout_acked",  "stderr_acked",   "stdout_produced",
    "stderr_produced", "stdout_end", "stderr_end", "name",    "type",           "mtime_ms",
    "uid",       "gid",       "link_target", "not_found"};

// Reads one object the way the host and agent do: every accessor under every known key,
// and the same again for each key the object actually has.
void ReadObject(const Json& j, int depth) {
  for (const char* k : kKeys) {
    const Json* f = space::JsonField(j, k);
    auto s = space::JsonString(j, k);
    auto i = space::JsonInt(j, k);
    auto b = space::JsonBool(j, k);
    Check(!s || (f && f->is_string()), "JsonString without a string");
    Check(!i || (f && f->is_number_integer()), "JsonInt without an integer");
    Check(!b || (f && f->is_boolean()), "JsonBool without a boolean");
    (void)space::JsonStringOr(j, k, "d");
    (void)space::JsonIntOr(j, k, -1);
    (void)space::JsonBoolOr(j, k, false);
  }
  if (depth > 4) return;
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      (void)space::JsonString(j, k.c_str());
      (void)space::JsonInt(j, k.c_str());
      (void)space::JsonBool(j, k.c_str());
      if (v.is_object() || v.is_array()) ReadObject(v, depth + 1);
    }
  } else if (j.is_array()) {
    for (const auto& v : j) ReadObject(v, depth + 1);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view payload(reinterpret_cast<const char*>(data), size);
  auto m = space::agent::DecodeMessage(payload);
  if (!m) return 0;
  Check(m->json.is_object(), "DecodeMessage returned a non-object");
  Check(m->body.size() <= payload.size(), "message body larger than the payload");
  ReadObject(m->json, 0);
  if (auto e = space::agent::ErrorFromJson(m->json)) {
    Json back = space::agent::ErrorJson(*e);
    auto again = space::agent::ErrorFromJson(back);
    Check(again && again->code == e->code && again->message == e->message,
          "ErrorJson/ErrorFromJson round trip");
  }
  // The agent answers malformed requests and logs what it got: both dump the JSON.
  (void)m->json.dump(-1, ' ', false, Json::error_handler_t::replace);
  return 0;
}
