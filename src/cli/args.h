// args: pure helpers of the `space` CLI — parsing its argument forms (sizes, K=V pairs,
// ID:/path) and formatting its tables. No I/O, no state; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/common.h"
#include "common/json.h"

namespace space::cli {

// "536870912", "512M", "512MiB", "512MB", "1g", "64k" -> bytes. Suffixes are binary (K = 1024);
// a trailing "B"/"iB" is accepted. Errors: empty, negative, fractional, unknown suffix, overflow.
Result<int64_t> ParseByteSize(std::string_view s);

// A number of seconds: "300", "300s", "5m", "2h", "1d" -> 300, 300, 300, 7200, 86400.
// Errors: empty, negative, fractional, unknown unit, overflow.
Result<int64_t> ParseSeconds(std::string_view s);

// What happens to a sandbox when its timeout passes: "delete", "pause" or "suspend";
// kInvalidArgument naming the choices otherwise.
Status CheckOnTimeout(std::string_view s);

// "K=V" -> {K, V}. The value may be empty or contain '='; the key may not be empty.
Result<std::pair<std::string, std::string>> ParseKeyValue(std::string_view s);
// A list of "K=V" into a JSON object of strings (a repeated key: the last one wins).
Result<Json> KeyValuesToObject(const std::vector<std::string>& pairs);
Result<std::vector<std::pair<std::string, std::string>>> KeyValuesToPairs(
    const std::vector<std::string>& pairs);

// "sb-x:/path" names a path inside a sandbox: the part before the first ':' is non-empty and
// has no '/', and the rest is an absolute path. Anything else is a host path (nullopt).
struct RemotePath {
  std::string sandbox;
  std::string path;
};
std::optional<RemotePath> ParseRemotePath(std::string_view s);

// "2026-11-30T10:00:00.000Z" (and without fraction, or with a +hh:mm offset) -> Unix ms.
std::optional<int64_t> ParseRfc3339Millis(std::string_view s);
// A compact age like "12s", "5m", "3h", "2d"; "-" when unknown.
std::string FormatAge(std::optional<int64_t> created_unix_ms, int64_t now_unix_ms);

// A byte count for humans: "0B", "512B", "1.5KiB", "12.3MiB", "2GiB" (one decimal below 10,
// none above); "-" when negative (unknown).
std::string FormatSize(int64_t bytes);

// Rows (the first being the header) as left-aligned columns separated by three spaces.
std::string FormatTable(const std::vector<std::vector<std::string>>& rows);

// {"k":"v","a":"b"} -> "a=b,k=v" (sorted by key, non-string values as JSON).
std::string FormatLabels(const Json& metadata);

// A JSON value as a string for a table cell: strings bare, null as "-", others as JSON.
std::string Cell(const Json& object, const char* key);

// The command line a COMMAND ran: its argv joined with spaces, or its "cmd".
std::string CommandLine(const Json& command);

// Pretty JSON for stdout; invalid UTF-8 is replaced rather than thrown about.
std::string DumpJson(const Json& j);

}  // namespace space::cli
