// common/json: safe accessors for nlohmann::json values from untrusted input.
//
// nlohmann's value()/get() throw on type mismatches; these never throw. Header-only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace space {

using Json = nlohmann::json;

// Parses text into a JSON value; nullopt on malformed input (never throws).
inline std::optional<Json> ParseJson(std::string_view text) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

inline const Json* JsonField(const Json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

inline std::optional<std::string> JsonString(const Json& j, const char* key) {
  const Json* f = JsonField(j, key);
  if (!f || !f->is_string()) return std::nullopt;
  return f->get<std::string>();
}
inline std::string JsonStringOr(const Json& j, const char* key, std::string def) {
  auto s = JsonString(j, key);
  return s ? *s : def;
}
inline std::optional<int64_t> JsonInt(const Json& j, const char* key) {
  const Json* f = JsonField(j, key);
  if (!f || !f->is_number_integer()) return std::nullopt;
  if (f->is_number_unsigned() && f->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    return std::nullopt;
  return f->get<int64_t>();
}
inline int64_t JsonIntOr(const Json& j, const char* key, int64_t def) {
  auto v = JsonInt(j, key);
  return v ? *v : def;
}
inline std::optional<bool> JsonBool(const Json& j, const char* key) {
  const Json* f = JsonField(j, key);
  if (!f || !f->is_boolean()) return std::nullopt;
  return f->get<bool>();
}
inline bool JsonBoolOr(const Json& j, const char* key, bool def) {
  auto v = JsonBool(j, key);
  return v ? *v : def;
}

}  // namespace space
