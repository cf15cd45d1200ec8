// api/relay: one HTTP/1.1 exchange relayed to an upstream connection, shared by sandbox
// ports (routes_ports.cc) and the cluster gateway (src/gateway/).
//
// The request goes on header first, then its body piece by piece as it arrives; the
// answer comes back the same way (streams stay streams), and a 101 answer turns both
// connections into a byte tunnel (WebSockets). One request per upstream connection.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "api/http.h"

namespace space::api {

struct RelayPolicy {
  // Names the upstream in errors: "the sandbox's service", "node n1".
  std::string upstream = "the upstream";
  // Answers a failure (502 the upstream closed, 504 it timed out, ...) in the caller's form.
  std::function<Awaitable<void>(int status, std::string message)> fail;
  // Edits the request before it goes on (credentials out, headers in). Forwarding
  // headers (X-Forwarded-*), Connection and Expect are handled by the relay.
  std::function<void(http::request<http::buffer_body>&)> rewrite;
  // Added to the upstream's answer.
  std::vector<std::pair<std::string, std::string>> extra_headers;
  // Edits the answer's header before it goes back (e.g. a Content-Security-Policy).
  std::function<void(http::response<http::buffer_body>&)> rewrite_response;
  // Idle limit of each read and write once the exchange has started.
  std::chrono::seconds idle_timeout = std::chrono::minutes(10);
};

// Relays the request of `ctx` (its header already read) to `up` with `target`, and the
// answer back. Returns once the exchange is over; ctx.keep_alive says whether the client
// connection may carry another request.
Awaitable<void> Relay(Ctx& ctx, beast::tcp_stream& up, const std::string& target,
                      const RelayPolicy& policy);

}  // namespace space::api
