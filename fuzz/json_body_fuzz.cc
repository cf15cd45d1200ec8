// Fuzz target json_body: request bodies as spaced's API reads them.
//
// The route parsers live in anonymous namespaces of src/api/*.cc and cannot be linked, so this
// target does what they do with the same public pieces: ParseJson of the raw bytes (the API
// caps bodies at ApiOptions::max_json_body, 1 MiB), then the safe accessors of common/json.h
// over every key of every route in docs/api.md and every key the body has, then the typed
// reads the routes make after checking a type (get<double>, get<int64_t>, get<std::string>,
// iteration over items()). Nothing may throw or hit undefined behaviour.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "fuzz/fuzz_util.h"

namespace {

using space::Json;
using space::fuzz::Check;

constexpr size_t kMaxJsonBody = 1 << 20;

constexpr const char* kRouteKeys[] = {
    // POST /v1/sandboxes
    "template", "snapshot", "runtime", "limits", "env", "metadata", "network", "timeout",
    "on_timeout", "idle_timeout", "snapshot_every", "keep_last",
    // limits
    "memory_bytes", "pids", "cpus", "disk_bytes",
    // POST .../commands
    "argv", "cmd", "cwd", "user", "stdin",
    // signal, fork, rename, timeout
    "signal", "count", "from", "to",
    // error bodies the CLI reads back
    "error", "code", "message"};

void Accessors(const Json& j) {
  for (const char* k : kRouteKeys) {
    const Json* f = space::JsonField(j, k);
    Check(!f || j.is_object(), "JsonField found a key in a non-object");
    Check(!f || !f->is_null(), "JsonField returned null");
    auto s = space::JsonString(j, k);
    auto i = space::JsonInt(j, k);
    auto b = space::JsonBool(j, k);
    Check(!s || f->is_string(), "JsonString of a non-string");
    Check(!i || f->is_number_integer(), "JsonInt of a non-integer");
    Check(!b || f->is_boolean(), "JsonBool of a non-boolean");
    (void)space::JsonStringOr(j, k, "");
    (void)space::JsonIntOr(j, k, 0);
    (void)space::JsonBoolOr(j, k, false);
  }
  if (!j.is_object()) return;
  for (const auto& [k, v] : j.items()) {
    Check(space::JsonField(j, k.c_str()) != nullptr || v.is_null() ||
              k.find('\0') != std::string::npos,
          "JsonField misses a key the object has");
    (void)space::JsonString(j, k.c_str());
    (void)space::JsonInt(j, k.c_str());
    (void)space::JsonBool(j, k.c_str());
  }
}

// The typed reads of the create-sandbox and exec routes, after their type checks.
void RouteReads(const Json& body) {
  if (const Json* l = space::JsonField(body, "limits"); l && l->is_object()) {
    for (const auto& [k, v] : l->items()) {
      if (k == "cpus" && v.is_number()) (void)v.get<double>();
      if (v.is_number_integer() && v.get<int64_t>() >= 0) (void)v.get<int64_t>();
    }
  }
  for (const char* key : {"env", "metadata"}) {
    if (const Json* m = space::JsonField(body, key); m && m->is_object()) {
      std::map<std::string, std::string> out;
      for (const auto& [k, v] : m->items()) {
        if (v.is_string()) out[k] = v.get<std::string>();
      }
    }
  }
  for (const char* key : {"timeout", "idle_timeout"}) {
    if (const Json* t = space::JsonField(body, key)) {
      if (t->is_number() && t->get<double>() >= 0 && t->get<double>() <= 366.0 * 24 * 3600)
        (void)static_cast<int64_t>(t->get<double>());
    }
  }
  for (const char* key : {"snapshot_every", "keep_last", "count"}) {
    if (const Json* t = space::JsonField(body, key); t && t->is_number_integer())
      (void)t->get<int64_t>();
  }
  if (const Json* a = space::JsonField(body, "argv"); a && a->is_array()) {
    std::vector<std::string> argv;
    for (const auto& e : *a) {
      if (e.is_string()) argv.push_back(e.get<std::string>());
    }
  }
  if (const Json* s = space::JsonField(body, "signal")) {
    if (s->is_number_integer()) (void)s->get<int64_t>();
    if (s->is_string()) (void)s->get<std::string>();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > kMaxJsonBody) return 0;  // the API answers 413 before parsing
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto body = space::ParseJson(text);
  if (!body) return 0;
  Accessors(*body);
  RouteReads(*body);
  // Error replies and logs quote the body back.
  std::string dumped = body->dump(-1, ' ', false, Json::error_handler_t::replace);
  auto again = space::ParseJson(dumped);
  Check(again.has_value(), "ParseJson rejects its own dump");
  return 0;
}
