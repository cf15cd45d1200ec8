#include "cli/args.h"

#include <time.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>

namespace space::cli {

Result<int64_t> ParseByteSize(std::string_view s) {
  std::string_view in = s;
  if (s.empty()) return Fail(Errc::kInvalidArgument, "empty size");
  int64_t v = 0;
  size_t i = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
    int d = s[i] - '0';
    if (v > (INT64_MAX - d) / 10) {
      return Fail(Errc::kInvalidArgument, "size too large: " + std::string(in));
    }
    v = v * 10 + d;
    ++i;
  }
  if (i == 0) return Fail(Errc::kInvalidArgument, "bad size: " + std::string(in));
  std::string unit;
  for (char c : s.substr(i)) unit += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  // Accept "", "b", "k", "kb", "kib", "m", ...
  if (unit == "b") unit.clear();
  if (unit.size() == 3 && unit.substr(1) == "ib") unit.resize(1);
  if (unit.size() == 2 && unit[1] == 'b') unit.resize(1);
  int shift = 0;
  if (unit.empty()) {
    shift = 0;
  } else if (unit == "k") {
    shift = 10;
  } else if (unit == "m") {
    shift = 20;
  } else if (unit == "g") {
    shift = 30;
  } else if (unit == "t") {
    shift = 40;
  } else {
    return Fail(Errc::kInvalidArgument,
                "bad size: " + std::string(in) + " (use bytes or a K, M, G, T suffix)");
  }
  if (shift > 0 && v > (INT64_MAX >> shift)) {
    return Fail(Errc::kInvalidArgument, "size too large: " + std::string(in));
  }
  return v << shift;
}

Result<int64_t> ParseSeconds(std::string_view s) {
  if (s.empty()) return Fail(Errc::kInvalidArgument, "empty duration");
  int64_t v = 0;
  size_t i = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
    int d = s[i] - '0';
    if (v > (INT64_MAX - d) / 10) {
      return Fail(Errc::kInvalidArgument, "duration too large: " + std::string(s));
    }
    v = v * 10 + d;
    ++i;
  }
  std::string_view unit = s.substr(i);
  int64_t scale = 0;
  if (unit.empty() || unit == "s") {
    scale = 1;
  } else if (unit == "m") {
    scale = 60;
  } else if (unit == "h") {
    scale = 3600;
  } else if (unit == "d") {
    scale = 86400;
  }
  if (i == 0 || scale == 0) {
    return Fail(Errc::kInvalidArgument,
                "bad duration: " + std::string(s) + " (use seconds, or 30s, 5m, 2h, 1d)");
  }
  if (v > INT64_MAX / scale) {
    return Fail(Errc::kInvalidArgument, "duration too large: " + std::string(s));
  }
  return v * scale;
}

Status CheckOnTimeout(std::string_view s) {
  if (s == "delete" || s == "pause" || s == "suspend") return Ok();
  return Fail(Errc::kInvalidArgument,
              "bad on-timeout action \"" + std::string(s) + "\" (use delete, pause or suspend)");
}

Result<std::pair<std::string, std::string>> ParseKeyValue(std::string_view s) {
  size_t eq = s.find('=');
  if (eq == std::string_view::npos) {
    return Fail(Errc::kInvalidArgument, "expected KEY=VALUE, got \"" + std::string(s) + "\"");
  }
  if (eq == 0) {
    return Fail(Errc::kInvalidArgument, "empty key in \"" + std::string(s) + "\"");
  }
  return std::make_pair(std::string(s.substr(0, eq)), std::string(s.substr(eq + 1)));
}

Result<std::vector<std::pair<std::string, std::string>>> KeyValuesToPairs(
    const std::vector<std::string>& pairs) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const std::string& p : pairs) {
    auto kv = ParseKeyValue(p);
    if (!kv) return tl::unexpected(kv.error());
    out.push_back(std::move(*kv));
  }
  return out;
}

Result<Json> KeyValuesToObject(const std::vector<std::string>& pairs) {
  Json obj = Json::object();
  auto kvs = KeyValuesToPairs(pairs);
  if (!kvs) return tl::unexpected(kvs.error());
  for (auto& [k, v] : *kvs) obj[k] = v;
  return obj;
}

std::optional<RemotePath> ParseRemotePath(std::string_view s) {
  size_t colon = s.find(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  std::string_view id = s.substr(0, colon);
  std::string_view path = s.substr(colon + 1);
  if (id.find('/') != std::string_view::npos) return std::nullopt;
  if (path.empty() || path[0] != '/') return std::nullopt;
  return RemotePath{std::string(id), std::string(path)};
}

std::optional<int64_t> ParseRfc3339Millis(std::string_view s) {
  // YYYY-MM-DDTHH:MM:SS[.fff][Z|+hh:mm|-hh:mm]
  if (s.size() < 19) return std::nullopt;
  auto num = [&](size_t pos, size_t len) -> std::optional<int> {
    int v = 0;
    for (size_t i = pos; i < pos + len; ++i) {
      if (!std::isdigit(static_cast<unsigned char>(s[i]))) return std::nullopt;
      v = v * 10 + (s[i] - '0');
    }
    return v;
  };
  if (s[4] != '-' || s[7] != '-' || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') ||
      s[13] != ':' || s[16] != ':') {
    return std::nullopt;
  }
  auto year = num(0, 4), mon = num(5, 2), day = num(8, 2), hour = num(11, 2), min = num(14, 2),
       sec = num(17, 2);
  if (!year || !mon || !day || !hour || !min || !sec) return std::nullopt;
  if (*mon < 1 || *mon > 12 || *day < 1 || *day > 31 || *hour > 23 || *min > 59 || *sec > 60) {
    return std::nullopt;
  }
  size_t i = 19;
  int64_t millis = 0;
  if (i < s.size() && s[i] == '.') {
    ++i;
    int digits = 0;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
      if (digits < 3) millis = millis * 10 + (s[i] - '0');
      ++digits;
      ++i;
    }
    if (digits == 0) return std::nullopt;
    for (int d = digits; d < 3; ++d) millis *= 10;
  }
  int64_t offset_s = 0;
  if (i < s.size() && (s[i] == 'Z' || s[i] == 'z')) {
    ++i;
  } else if (i + 6 == s.size() && (s[i] == '+' || s[i] == '-') && s[i + 3] == ':') {
    auto oh = num(i + 1, 2), om = num(i + 4, 2);
    if (!oh || !om) return std::nullopt;
    offset_s = (*oh * 3600 + *om * 60) * (s[i] == '+' ? 1 : -1);
    i += 6;
  }
  if (i != s.size()) return std::nullopt;
  struct tm tm = {};
  tm.tm_year = *year - 1900;
  tm.tm_mon = *mon - 1;
  tm.tm_mday = *day;
  tm.tm_hour = *hour;
  tm.tm_min = *min;
  tm.tm_sec = *sec;
  int64_t secs = static_cast<int64_t>(timegm(&tm)) - offset_s;
  return secs * 1000 + millis;
}

std::string FormatAge(std::optional<int64_t> created_unix_ms, int64_t now_unix_ms) {
  if (!created_unix_ms) return "-";
  int64_t s = std::max<int64_t>(0, (now_unix_ms - *created_unix_ms) / 1000);
  if (s < 60) return std::to_string(s) + "s";
  if (s < 3600) return std::to_string(s / 60) + "m";
  if (s < 86400) return std::to_string(s / 3600) + "h";
  return std::to_string(s / 86400) + "d";
}

std::string FormatSize(int64_t bytes) {
  if (bytes < 0) return "-";
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + "B";
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 6) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  // One decimal while it carries information ("1.5KiB"), none once the number is large
  // enough that it does not ("123MiB"); "2.0GiB" reads as "2GiB".
  if (v < 10 && static_cast<int64_t>(v * 10 + 0.5) % 10 != 0) {
    std::snprintf(buf, sizeof buf, "%.1f%s", v, kUnits[u]);
  } else {
    std::snprintf(buf, sizeof buf, "%.0f%s", v, kUnits[u]);
  }
  return buf;
}

std::string FormatTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line.append(width[c] - row[c].size() + 3, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line;
    out += '\n';
  }
  return out;
}

std::string FormatLabels(const Json& metadata) {
  if (!metadata.is_object()) return "";
  std::map<std::string, std::string> sorted;
  for (auto it = metadata.begin(); it != metadata.end(); ++it) {
    sorted[it.key()] = it->is_string() ? it->get<std::string>()
                                       : it->dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  std::string out;
  for (const auto& [k, v] : sorted) {
    if (!out.empty()) out += ',';
    out += k + "=" + v;
  }
  return out;
}

std::string Cell(const Json& object, const char* key) {
  if (!object.is_object()) return "-";
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return "-";
  if (it->is_string()) return it->get<std::string>();
  return it->dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string CommandLine(const Json& command) {
  if (const Json* argv = JsonField(command, "argv"); argv && argv->is_array()) {
    std::string out;
    for (const Json& a : *argv) {
      if (!out.empty()) out += ' ';
      out += a.is_string() ? a.get<std::string>() : a.dump();
    }
    return out;
  }
  return JsonStringOr(command, "cmd", "");
}

std::string DumpJson(const Json& j) {
  return j.dump(2, ' ', false, Json::error_handler_t::replace);
}

}  // namespace space::cli
