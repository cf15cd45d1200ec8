#include "agent/xattrs.h"

#include <fcntl.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>

#include "sys/sys.h"

namespace space::agent {
namespace {

constexpr std::string_view kUser = "user.";

bool Printable(std::string_view v) {
  return std::all_of(v.begin(), v.end(), [](char c) { return c >= 0x20 && c <= 0x7e; });
}

// The names of a file's attributes, NUL-separated ("" when it has none or its filesystem
// keeps none). `path` names it, or is empty for the open file `fd`.
std::string NamesOf(int fd, const std::string& path = "") {
  auto list = [&](char* buf, size_t size) {
    return path.empty() ? ::flistxattr(fd, buf, size) : ::listxattr(path.c_str(), buf, size);
  };
  for (int tries = 0; tries < 4; ++tries) {
    ssize_t want = list(nullptr, 0);
    if (want <= 0) return "";
    std::string names(static_cast<size_t>(want), '\0');
    ssize_t n = list(names.data(), names.size());
    if (n >= 0) {
      names.resize(static_cast<size_t>(n));
      return names;
    }
    if (errno != ERANGE) return "";  // grew in between: ask again
  }
  return "";
}

template <typename F>
void ForEachName(const std::string& names, F&& f) {
  for (size_t i = 0; i < names.size();) {
    std::string name(names.c_str() + i);
    i += name.size() + 1;
    if (!name.empty()) f(name);
  }
}

}  // namespace

Result<std::string> XattrPrefixOf(const Json& req) {
  const Json* p = JsonField(req, "xattr_prefix");
  if (!p || p->is_null()) return std::string();
  if (!p->is_string()) return Fail(Errc::kInvalidArgument, "xattr_prefix must be a string");
  std::string prefix = p->get<std::string>();
  if (!StartsWith(prefix, kUser) || prefix.size() > kMaxXattrName ||
      prefix.find('\0') != std::string::npos)
    return Fail(Errc::kInvalidArgument, "xattr_prefix must start with \"user.\"");
  return prefix;
}

Result<std::optional<XattrWrite>> XattrWriteOf(const Json& req) {
  auto prefix = XattrPrefixOf(req);
  if (!prefix) return tl::unexpected(prefix.error());
  const Json* set = JsonField(req, "xattrs");
  if ((!set || set->is_null()) && prefix->empty()) return std::optional<XattrWrite>();
  XattrWrite w;
  w.prefix = *prefix;
  if (set && !set->is_null()) {
    if (!set->is_object()) return Fail(Errc::kInvalidArgument, "xattrs must be an object of strings");
    if (set->size() > kMaxXattrs)
      return Fail(Errc::kInvalidArgument, "xattrs: at most " + std::to_string(kMaxXattrs) + " attributes");
    for (const auto& [name, value] : set->items()) {
      if (!StartsWith(name, kUser) || name.size() == kUser.size() || name.size() > kMaxXattrName ||
          name.find('\0') != std::string::npos)
        return Fail(Errc::kInvalidArgument,
                    "xattrs: name '" + name + "' must start with \"user.\" and be at most 255 bytes");
      if (!StartsWith(name, w.prefix))
        return Fail(Errc::kInvalidArgument, "xattrs: name '" + name + "' is outside xattr_prefix");
      if (!value.is_string() || value.get_ref<const std::string&>().size() > kMaxXattrValue)
        return Fail(Errc::kInvalidArgument,
                    "xattrs: the value of '" + name + "' must be a string of at most 4096 bytes");
      w.set.emplace_back(name, value.get<std::string>());
    }
  }
  return std::optional<XattrWrite>(std::move(w));
}

Status ApplyXattrs(int fd, const XattrWrite& w, const std::string& path) {
  if (!w.prefix.empty()) {
    std::vector<std::string> stale;
    ForEachName(NamesOf(fd), [&](const std::string& name) {
      if (!StartsWith(name, w.prefix)) return;
      for (const auto& [k, v] : w.set)
        if (k == name) return;
      stale.push_back(name);
    });
    for (const auto& name : stale) {
      if (::fremovexattr(fd, name.c_str()) < 0 && errno != ENODATA)
        return ErrnoFail("remove attribute " + name + " of " + path);
    }
  }
  for (const auto& [name, value] : w.set) {
    if (::fsetxattr(fd, name.c_str(), value.data(), value.size(), 0) < 0) {
      if (errno == ENOTSUP)  // gVisor's root filesystem, tmpfs before Linux 6.6
        return Fail(Errc::kInvalidArgument, "the filesystem of " + path +
                                                " keeps no extended attributes (file metadata)");
      return ErrnoFail("set attribute " + name + " of " + path);
    }
  }
  return Ok();
}

Json XattrsAt(int dirfd, const char* name, const struct stat& st, const std::string& prefix) {
  Json out = Json::object();
  if (prefix.empty() || !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode))) return out;
  // An O_PATH descriptor, read through its /proc/self/fd link: nothing is opened for
  // reading (no FIFO waited on, no /proc or /sys file's open run), and O_NOFOLLOW keeps a
  // file swapped for a symlink since the stat from being followed.
  sys::UniqueFd fd(::openat(dirfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) return out;
  struct stat now;
  if (::fstat(fd.get(), &now) != 0 || !(S_ISREG(now.st_mode) || S_ISDIR(now.st_mode))) return out;
  const std::string link = "/proc/self/fd/" + std::to_string(fd.get());
  ForEachName(NamesOf(-1, link), [&](const std::string& n) {
    if (!StartsWith(n, prefix)) return;
    std::string value(kMaxXattrValue, '\0');
    ssize_t v = ::getxattr(link.c_str(), n.c_str(), value.data(), value.size());
    if (v < 0) return;  // gone, or larger than any we set
    value.resize(static_cast<size_t>(v));
    if (Printable(value)) out[n] = std::move(value);
  });
  return out;
}

}  // namespace space::agent
