// api/console_sessions: the web console's login sessions (docs/console.md). Pure: no Beast.
//
// POST /ui/login exchanges an operator API key for a session: a random id (the HttpOnly
// cookie) and a CSRF token (given to the page, sent back in X-CSRF-Token on every request
// that changes something). Sessions live in spaced's memory only: a restart logs everyone
// out. A session remembers its key's hash (never the key, and nothing of it in the page),
// so each request re-checks the key (a revoked key ends its sessions at once).
// On a cluster's node a SessionBacking keeps them instead, shared by every node.
// Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "common/common.h"

namespace space::api {

inline constexpr std::string_view kSessionCookie = "space_session";
inline constexpr std::string_view kCsrfCookie = "space_csrf";
inline constexpr std::string_view kCsrfHeader = "X-CSRF-Token";

struct ConsoleSession {
  std::string id;        // the cookie's value
  std::string csrf;      // what X-CSRF-Token must carry
  std::string key_hash;  // auth::HashApiKey of the operator key it was made from
  std::string key_name;
  int64_t created_s = 0;
  int64_t last_used_s = 0;
};

// Where a cluster's nodes keep their console sessions (docs/cluster.md), so a console
// behind a gateway stays logged in whichever node answers. An entry lives `idle_s` after
// its last Touch; Remove ends it on every node. Thread-safe.
class SessionBacking {
 public:
  virtual ~SessionBacking() = default;
  [[nodiscard]] virtual Status Put(const ConsoleSession& s, int64_t idle_s) = 0;
  // nullopt: unknown, ended, or idle too long (an error: out of reach, and not seen before).
  [[nodiscard]] virtual Result<std::optional<ConsoleSession>> Get(std::string_view id) = 0;
  virtual void Touch(const ConsoleSession& s, int64_t now_s) = 0;
  virtual void Remove(std::string_view id) = 0;
};

class ConsoleSessions {
 public:
  // A session ends `idle_s` after its last use, and `max_age_s` after login at the latest.
  // Beyond `max_sessions`, the least recently used one is dropped (kept in memory only).
  explicit ConsoleSessions(int64_t idle_s = 8 * 3600, int64_t max_age_s = 7 * 24 * 3600,
                           size_t max_sessions = 4096,
                           std::shared_ptr<SessionBacking> backing = nullptr);
  // kUnavailable when the backing cannot take it.
  [[nodiscard]] Result<ConsoleSession> Create(std::string key_hash, std::string key_name, int64_t now_s);
  // The live session with this id (and marks it used), or nullopt.
  std::optional<ConsoleSession> Find(std::string_view id, int64_t now_s);
  void Remove(std::string_view id);
  size_t size();
  int64_t max_age_s() const { return max_age_s_; }

 private:
  bool Expired(const ConsoleSession& s, int64_t now_s) const;
  int64_t idle_s_, max_age_s_;
  size_t max_;
  std::shared_ptr<SessionBacking> backing_;
  std::mutex mu_;
  std::map<std::string, ConsoleSession, std::less<>> by_id_;
};

// The value of cookie `name` in a Cookie header ("a=1; b=2"), or nullopt.
std::optional<std::string> CookieValue(std::string_view header, std::string_view name);
// application/x-www-form-urlencoded: the value of `field` (decoded), or nullopt.
std::optional<std::string> FormValue(std::string_view body, std::string_view field);
// Whether an Origin header names the same host as the request's Host header (scheme
// http or https). An empty Origin is not the same origin.
bool SameOrigin(std::string_view origin, std::string_view host);

}  // namespace space::api
