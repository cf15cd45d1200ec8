// net/ingress: the host side of "ports as URLs" (docs/ports.md) — which requests are for a
// sandbox port, and sockets opened inside a sandbox's network namespace, so a service
// bound to the sandbox's own 127.0.0.1 is reachable from the host without any forwarder
// in the sandbox. No HTTP here (api/routes_ports.cc proxies); thread-safe free functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "common/common.h"
#include "sys/sys.h"

namespace space::net {

// A port of a sandbox, as named by a request's Host.
struct PortHost {
  int port = 0;
  std::string sandbox_id;
};

// "8080" -> 8080; anything but a decimal 1..65535 is kInvalidArgument saying so.
[[nodiscard]] Result<int> ParsePort(std::string_view text);

// Whether `host` (a Host header: name[:port]) names a sandbox port under `domain`:
// "{port}-{sandbox_id}.{domain}", case-insensitively. nullopt: not a sandbox host (the
// request is for spaced's own API). kInvalidArgument: a host under `domain` that is not a
// valid sandbox port host (bad port, no id, more labels).
[[nodiscard]] Result<std::optional<PortHost>> ParsePortHost(std::string_view host,
                                                            std::string_view domain);

// The Host a sandbox port answers on: "{port}-{id}.{domain}", plus ":{listen_port}" unless
// it is the scheme's default port (80 for http, 443 for https).
std::string PortHostName(int port, const std::string& sandbox_id, const std::string& domain,
                         int listen_port, int default_port = 80);

// ---- credentials in requests (pure string work on raw HTTP values)
// The query parameter and cookie that carry a traffic token (docs/ports.md).
inline constexpr char kTrafficQueryParam[] = "space_traffic_token";
inline constexpr char kTrafficCookie[] = "space_traffic";

// Removes every `key` parameter from the query of a raw request target ("/p?a=1&key=v"),
// leaving the rest byte for byte; the last removed value (percent-decoded) goes to *value.
// An absolute-form target ("http://h/p?q") becomes origin-form, and a path that starts
// with "//" is collapsed to one '/', so the result is always a same-host path (safe as a
// redirect Location).
std::string StripQueryParam(std::string_view target, std::string_view key, std::string* value);

// Removes the `name` cookie from a Cookie header value ("a=1; name=v; b=2" -> "a=1; b=2");
// its value goes to *value (the last one when repeated).
std::string StripCookie(std::string_view cookie_header, std::string_view name, std::string* value);

// Opens a network namespace file (e.g. Runtime::NetNamespacePath's answer) for
// SocketInNamespace. kPermissionDenied if it is the namespace spaced itself runs in: a
// socket "inside" it would reach spaced's own API and the host's loopback services.
[[nodiscard]] Result<sys::UniqueFd> OpenNetNamespace(const std::string& path);

// True when two namespace fds (or a fd and a path) are the same namespace (same inode).
bool SameNamespace(int fd, const std::string& path);

// A new non-blocking, close-on-exec TCP socket (AF_INET or AF_INET6) that lives in the
// network namespace `ns_fd`: created on a short-lived thread that joins the namespace
// (setns(2) changes only the calling thread, and a socket keeps the namespace it was made
// in), so no other thread of spaced ever leaves its own namespace.
[[nodiscard]] Result<sys::UniqueFd> SocketInNamespace(int ns_fd, int family);

}  // namespace space::net
