// client_internal: helpers shared by the files that implement Client (client.cc: transport
// and sandboxes; client_commands.cc; client_files.cc: files, operations and templates;
// client_lifecycle.cc; client_access.cc). Not part of the client's interface; include only
// from those files. Pure functions except FinishOperation, which makes requests through the
// given Client.
#pragma once

#include <curl/curl.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/client.h"

namespace space::client {

// Everything one exchange needs; lives on the caller's stack for the duration of Perform.
struct Client::Transfer {
  std::string method = "GET";
  std::string path;       // with query
  std::string_view body;  // used when send_body
  bool send_body = false;
  std::string content_type;
  std::vector<std::string> headers;  // extra "Name: value" lines
  // Streaming upload: fills buf, returns bytes (0 at EOF) or nullopt on error (set read_error).
  std::function<std::optional<size_t>(char* buf, size_t len)> reader;
  int64_t upload_size = -1;  // -1: chunked
  std::optional<Error> read_error;
  // Streaming download: receives the body of 2xx answers; others are collected for the error.
  DataCallback sink;
  bool sink_stopped = false;

  HttpResponse response;
  char errbuf[CURL_ERROR_SIZE] = {};
};

}  // namespace space::client

namespace space::client::internal {

using Deadline = std::optional<std::chrono::steady_clock::time_point>;

// Percent-encodes a path segment (everything but unreserved characters).
std::string PathEscape(std::string_view segment);
// The JSON of a successful answer ({} for an empty body); kInternal if it is not JSON.
Result<Json> ParseAnswer(const HttpResponse& r, std::string_view what);
// A file mode as four octal digits ("0644").
std::string FormatMode(int mode);
// The array under `key` in an answer like {"sandboxes":[...]}; kInternal if missing.
Result<Json> ArrayField(const Json& answer, const char* key);
// True when an OP's state is succeeded or failed.
bool OperationFinished(const Json& op);
// The deadline `timeout` from now; none for 0.
Deadline DeadlineFor(milliseconds timeout);
// Time left until `deadline` (0 when past), capped at the server's 5-minute wait limit.
milliseconds NextWait(Deadline deadline);
// The server-side wait of the first request of an *AndWait helper (at least 1 ms).
milliseconds FirstWait(const WaitOptions& options, Deadline deadline);
// Returns `op` if it is finished; else calls options.on_pending(op) and waits for it with
// client.WaitOperation until `deadline`. The result may be a failed OP.
Result<Json> FinishOperation(Client& client, const Json& op, const WaitOptions& options,
                             Deadline deadline);

}  // namespace space::client::internal
