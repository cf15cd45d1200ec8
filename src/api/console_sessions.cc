#include "api/console_sessions.h"

#include <algorithm>
#include <cctype>

#include "auth/auth.h"

namespace space::api {

ConsoleSessions::ConsoleSessions(int64_t idle_s, int64_t max_age_s, size_t max_sessions,
                                 std::shared_ptr<SessionBacking> backing)
    : idle_s_(idle_s), max_age_s_(max_age_s), max_(std::max<size_t>(1, max_sessions)),
      backing_(std::move(backing)) {}

bool ConsoleSessions::Expired(const ConsoleSession& s, int64_t now_s) const {
  return now_s - s.last_used_s >= idle_s_ || now_s - s.created_s >= max_age_s_;
}

Result<ConsoleSession> ConsoleSessions::Create(std::string key_hash, std::string key_name, int64_t now_s) {
  ConsoleSession s;
  s.id = auth::NewSecret(32);
  s.csrf = auth::NewSecret(32);
  s.key_hash = std::move(key_hash);
  s.key_name = std::move(key_name);
  s.created_s = s.last_used_s = now_s;
  if (backing_) {
    SPACE_TRY_WRAP(backing_->Put(s, idle_s_), "console session");
    return s;
  }
  std::lock_guard lock(mu_);
  for (auto it = by_id_.begin(); it != by_id_.end();) {
    it = Expired(it->second, now_s) ? by_id_.erase(it) : std::next(it);
  }
  while (by_id_.size() >= max_) {
    auto oldest = std::min_element(by_id_.begin(), by_id_.end(), [](const auto& a, const auto& b) {
      return a.second.last_used_s < b.second.last_used_s;
    });
    by_id_.erase(oldest);
  }
  by_id_.emplace(s.id, s);
  return s;
}

std::optional<ConsoleSession> ConsoleSessions::Find(std::string_view id, int64_t now_s) {
  if (backing_) {
    auto got = backing_->Get(id);
    if (!got || !*got) return std::nullopt;
    if (now_s - (*got)->created_s >= max_age_s_) {
      backing_->Remove(id);
      return std::nullopt;
    }
    backing_->Touch(**got, now_s);
    return std::move(*got);
  }
  std::lock_guard lock(mu_);
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return std::nullopt;
  if (Expired(it->second, now_s)) {
    by_id_.erase(it);
    return std::nullopt;
  }
  it->second.last_used_s = now_s;
  return it->second;
}

void ConsoleSessions::Remove(std::string_view id) {
  if (backing_) {
    backing_->Remove(id);
    return;
  }
  std::lock_guard lock(mu_);
  auto it = by_id_.find(id);
  if (it != by_id_.end()) by_id_.erase(it);
}

size_t ConsoleSessions::size() {
  std::lock_guard lock(mu_);
  return by_id_.size();
}

namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

int Hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string FormDecode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && Hex(s[i + 1]) >= 0 && Hex(s[i + 2]) >= 0) {
      out += static_cast<char>(Hex(s[i + 1]) * 16 + Hex(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::optional<std::string> CookieValue(std::string_view header, std::string_view name) {
  size_t pos = 0;
  while (pos <= header.size()) {
    size_t end = header.find(';', pos);
    if (end == std::string_view::npos) end = header.size();
    std::string_view pair = Trim(header.substr(pos, end - pos));
    size_t eq = pair.find('=');
    if (eq != std::string_view::npos && Trim(pair.substr(0, eq)) == name) {
      std::string_view v = Trim(pair.substr(eq + 1));
      if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
      return std::string(v);
    }
    pos = end + 1;
  }
  return std::nullopt;
}

std::optional<std::string> FormValue(std::string_view body, std::string_view field) {
  size_t pos = 0;
  while (pos <= body.size()) {
    size_t end = body.find('&', pos);
    if (end == std::string_view::npos) end = body.size();
    std::string_view pair = body.substr(pos, end - pos);
    size_t eq = pair.find('=');
    std::string k = FormDecode(pair.substr(0, eq));
    if (k == field) return eq == std::string_view::npos ? "" : FormDecode(pair.substr(eq + 1));
    pos = end + 1;
  }
  return std::nullopt;
}

bool SameOrigin(std::string_view origin, std::string_view host) {
  std::string o = Lower(origin), h = Lower(host);
  if (h.empty()) return false;
  for (std::string_view scheme : {"http://", "https://"}) {
    if (o.rfind(scheme, 0) == 0 && o.substr(scheme.size()) == h) return true;
  }
  return false;
}

}  // namespace space::api
