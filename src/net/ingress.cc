// net/ingress: host parsing and sockets inside a sandbox's network namespace.
#include "net/ingress.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <thread>

namespace space::net {

Result<int> ParsePort(std::string_view text) {
  int port = 0;
  bool ok = !text.empty() && text.size() <= 5;
  for (char c : text) {
    if (c < '0' || c > '9') {
      ok = false;
      break;
    }
    port = port * 10 + (c - '0');
  }
  if (!ok || port < 1 || port > 65535)
    return Fail(Errc::kInvalidArgument,
                "bad port \"" + std::string(text.substr(0, 32)) + "\": want a number 1..65535");
  return port;
}

Result<std::optional<PortHost>> ParsePortHost(std::string_view host, std::string_view domain) {
  // Drop ":port" (the name is not bracketed IPv6: those never end with our domain).
  std::string_view name = host;
  if (!name.empty() && name.front() != '[') {
    if (size_t colon = name.rfind(':'); colon != std::string_view::npos) name = name.substr(0, colon);
  }
  while (!name.empty() && name.back() == '.') name.remove_suffix(1);  // "x.localhost."
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string dom(domain);
  for (char& c : dom) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (dom.empty() || lower.size() <= dom.size() + 1 ||
      lower.compare(lower.size() - dom.size(), dom.size(), dom) != 0 ||
      lower[lower.size() - dom.size() - 1] != '.')
    return std::optional<PortHost>{};
  std::string label = lower.substr(0, lower.size() - dom.size() - 1);
  const std::string want = "want {port}-{sandbox_id}." + dom;
  if (label.find('.') != std::string::npos)
    return Fail(Errc::kInvalidArgument, "host " + lower.substr(0, 255) + " has too many labels: " + want);
  size_t dash = label.find('-');
  if (dash == std::string::npos || dash + 1 >= label.size())
    return Fail(Errc::kInvalidArgument, "host " + lower.substr(0, 255) + " names no sandbox port: " + want);
  auto port = ParsePort(std::string_view(label).substr(0, dash));
  if (!port) return tl::unexpected(port.error());
  return std::optional<PortHost>(PortHost{*port, label.substr(dash + 1)});
}

std::string PortHostName(int port, const std::string& sandbox_id, const std::string& domain,
                         int listen_port, int default_port) {
  std::string h = std::to_string(port) + "-" + sandbox_id + "." + domain;
  if (listen_port != default_port) h += ":" + std::to_string(listen_port);
  return h;
}

namespace {

std::string Decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    auto hex = [](char c) {
      return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                          : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    };
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else {
      out += s[i] == '+' ? ' ' : s[i];
    }
  }
  return out;
}

std::string_view TrimSpaces(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

std::string StripQueryParam(std::string_view target, std::string_view key, std::string* value) {
  for (std::string_view scheme : {"http://", "https://"}) {
    if (target.size() >= scheme.size() && target.substr(0, scheme.size()) == scheme) {
      target.remove_prefix(scheme.size());
      size_t slash = target.find_first_of("/?");
      target = slash == std::string_view::npos ? std::string_view() : target.substr(slash);
      break;
    }
  }
  size_t q = target.find('?');
  std::string_view path = target.substr(0, q);
  while (path.size() >= 2 && path[0] == '/' && path[1] == '/') path.remove_prefix(1);
  std::string out = path.empty() || path[0] != '/' ? "/" + std::string(path) : std::string(path);
  if (q == std::string_view::npos) return out;
  std::string_view query = target.substr(q + 1);
  std::string kept;
  size_t pos = 0;
  while (pos <= query.size()) {
    size_t amp = query.find('&', pos);
    if (amp == std::string_view::npos) amp = query.size();
    std::string_view part = query.substr(pos, amp - pos);
    size_t eq = part.find('=');
    if (Decode(part.substr(0, eq)) == key) {
      if (value) *value = eq == std::string_view::npos ? "" : Decode(part.substr(eq + 1));
    } else if (!part.empty()) {
      kept += (kept.empty() ? "" : "&") + std::string(part);
    }
    pos = amp + 1;
  }
  if (!kept.empty()) out += "?" + kept;
  return out;
}

std::string StripCookie(std::string_view header, std::string_view name, std::string* value) {
  std::string kept;
  size_t pos = 0;
  while (pos <= header.size()) {
    size_t semi = header.find(';', pos);
    if (semi == std::string_view::npos) semi = header.size();
    std::string_view part = TrimSpaces(header.substr(pos, semi - pos));
    size_t eq = part.find('=');
    if (eq != std::string_view::npos && TrimSpaces(part.substr(0, eq)) == name) {
      if (value) {
        std::string_view v = TrimSpaces(part.substr(eq + 1));
        if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
        *value = std::string(v);
      }
    } else if (!part.empty()) {
      kept += (kept.empty() ? "" : "; ") + std::string(part);
    }
    pos = semi + 1;
  }
  return kept;
}

bool SameNamespace(int fd, const std::string& path) {
  struct stat a {}, b {};
  return ::fstat(fd, &a) == 0 && ::stat(path.c_str(), &b) == 0 && a.st_dev == b.st_dev &&
         a.st_ino == b.st_ino;
}

Result<sys::UniqueFd> OpenNetNamespace(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoFail("open network namespace " + path);
  sys::UniqueFd ns(fd);
  if (SameNamespace(ns.get(), "/proc/self/ns/net"))
    return Fail(Errc::kPermissionDenied,
                "the sandbox shares spaced's own network namespace; its ports are not served");
  return ns;
}

Result<sys::UniqueFd> SocketInNamespace(int ns_fd, int family) {
  int fd = -1, err = 0;
  const char* step = "";
  std::thread t([&] {
    if (::setns(ns_fd, CLONE_NEWNET) != 0) {
      err = errno;
      step = "setns";
      return;
    }
    fd = ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      err = errno;
      step = "socket";
    }
    // The thread ends here, in the sandbox's namespace: nothing else ever runs on it.
  });
  t.join();
  if (fd < 0) return ErrnoFail(std::string(step) + " in the sandbox's network namespace", err);
  return sys::UniqueFd(fd);
}

}  // namespace space::net
