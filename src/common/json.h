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

// Deepest array/object nesting ParseJson accepts. nlohmann parses any depth, but copying
// or dumping a value recurses once per level: 400,000 levels overflow the stack.
inline constexpr int kMaxJsonDepth = 64;

// True if no array/object in `text` nests deeper than `max_depth` (strings are skipped).
inline bool JsonDepthWithin(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

// Parses text into a JSON value; nullopt on malformed input or nesting deeper than
// kMaxJsonDepth (never throws).
inline std::optional<Json> ParseJson(std::string_view text) {
  if (!JsonDepthWithin(text, kMaxJsonDepth)) return std::nullopt;
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
