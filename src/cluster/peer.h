// cluster/peer: requests from one node to another (docs/cluster.md), with libcurl — what a
// node pulls a template it lacks by. Blocking; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "common/common.h"

namespace space::cluster {

struct PeerFile {
  int status = 0;
  std::map<std::string, std::string> headers;  // names in lower case
  int64_t size = 0;                            // bytes written to the file
  std::string error_body;                      // the body of a non-200 answer (bounded)
};

// GETs `url` (a peer's "http://host:port/path") with `bearer`, writing a 200 answer's body
// to `path` (created, mode 0600). At most `max_bytes`; the whole transfer within
// `timeout_ms`, and never more than 10 s without a byte. kUnavailable when the peer does not
// answer; any HTTP answer is returned (the caller judges its status).
[[nodiscard]] Result<PeerFile> FetchToFile(const std::string& url, const std::string& bearer,
                                           const std::string& path, int64_t max_bytes,
                                           int64_t timeout_ms);

}  // namespace space::cluster
