// The sandbox's accounts: users and groups looked up in passwd/group files, as exec and
// the file service need them (users.h).
#include "agent/users.h"

#include <cerrno>

#include "sys/sys.h"

namespace space::agent {

namespace {

Result<std::optional<uint32_t>> ParseUid(std::string_view s) {
  if (s.empty() || s.size() > 10) return std::optional<uint32_t>();
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::optional<uint32_t>();
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  // (uid_t)-1 means "no change" to setuid(2); refuse it and anything wider.
  if (v >= 0xffffffffull)
    return Fail(Errc::kInvalidArgument, "uid out of range: " + std::string(s));
  return std::optional<uint32_t>(static_cast<uint32_t>(v));
}

std::vector<std::string_view> SplitFields(std::string_view line, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    size_t p = line.find(sep, start);
    if (p == std::string_view::npos) {
      out.push_back(line.substr(start));
      return out;
    }
    out.push_back(line.substr(start, p - start));
    start = p + 1;
  }
}

// Reads a whole file; a missing file reads as empty (a minimal rootfs may have no
// /etc/group).
Result<std::string> ReadOptionalFile(const std::string& path) {
  auto r = sys::ReadFile(path);
  if (!r && r.error().sys_errno == ENOENT) return std::string();
  if (!r && r.error().code == Errc::kNotFound) return std::string();
  return r;
}

template <class Fn>
void ForEachLine(std::string_view text, Fn fn) {
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    if (!line.empty() && line[0] != '#') fn(line);
    start = end + 1;
  }
}

}  // namespace

Result<UserInfo> LookupUser(const std::string& user, const std::string& passwd_path,
                            const std::string& group_path) {
  auto passwd = ReadOptionalFile(passwd_path);
  if (!passwd) return tl::unexpected(std::move(passwd.error()).Wrap("read " + passwd_path));
  auto group = ReadOptionalFile(group_path);
  if (!group) return tl::unexpected(std::move(group.error()).Wrap("read " + group_path));
  return LookupUserIn(user, *passwd, *group, passwd_path);
}

std::string NameOfId(std::string_view text, uint32_t id) {
  std::string name;
  ForEachLine(text, [&](std::string_view line) {
    if (!name.empty()) return;
    auto f = SplitFields(line, ':');
    if (f.size() < 3) return;
    auto line_id = ParseUid(f[2]);
    if (line_id && *line_id && **line_id == id) name = std::string(f[0]);
  });
  return name;
}

Result<UserInfo> LookupUserIn(const std::string& user, std::string_view passwd,
                              std::string_view group, const std::string& passwd_path) {
  auto uid = ParseUid(user);
  if (!uid) return tl::unexpected(uid.error());
  UserInfo info;
  bool found = false;
  ForEachLine(passwd, [&](std::string_view line) {
    if (found) return;
    auto f = SplitFields(line, ':');
    if (f.size() < 7) return;
    auto line_uid = ParseUid(f[2]);
    auto line_gid = ParseUid(f[3]);
    if (!line_uid || !*line_uid || !line_gid || !*line_gid) return;
    bool match = *uid ? **line_uid == **uid : f[0] == user;
    if (!match) return;
    found = true;
    info.name = std::string(f[0]);
    info.uid = **line_uid;
    info.gid = **line_gid;
    info.home = f[5].empty() ? "/" : std::string(f[5]);
  });
  if (!found) {
    if (!*uid) return Fail(Errc::kNotFound, "user " + user + " not found in " + passwd_path);
    info.uid = **uid;
    info.gid = 0;
    info.home = "/";
  }
  info.groups.push_back(info.gid);
  if (!info.name.empty()) {
    ForEachLine(group, [&](std::string_view line) {
      auto f = SplitFields(line, ':');
      if (f.size() < 4) return;
      auto gid = ParseUid(f[2]);
      if (!gid || !*gid) return;
      for (std::string_view member : SplitFields(f[3], ',')) {
        if (member == info.name) {
          bool dup = false;
          for (gid_t g : info.groups) dup |= g == **gid;
          if (!dup) info.groups.push_back(**gid);
          break;
        }
      }
    });
  }
  return info;
}

}  // namespace space::agent
