// net: the data dir's tag and the named egress presets (built in, from the host's own
// package tool configuration, and from the operator).
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include <sodium.h>
#include <spdlog/spdlog.h>

#include "net/internal.h"
#include "sys/sys.h"

namespace space::net {

std::string TagForDataDir(const std::string& data_dir) {
  unsigned char h[16];
  crypto_generichash(h, sizeof h, reinterpret_cast<const unsigned char*>(data_dir.data()),
                     data_dir.size(), nullptr, 0);
  return HexEncode(std::string_view(reinterpret_cast<char*>(h), 3));
}

namespace {

std::string HostOfUrl(std::string_view url) {
  size_t s = url.find("://");
  if (s == std::string_view::npos) return "";
  std::string_view rest = url.substr(s + 3);
  rest = rest.substr(0, rest.find_first_of("/?#"));
  if (size_t at = rest.rfind('@'); at != std::string_view::npos) rest = rest.substr(at + 1);
  if (size_t colon = rest.rfind(':'); colon != std::string_view::npos) rest = rest.substr(0, colon);
  return NormaliseHostName(rest);
}

void AddUrlsFrom(const std::string& text, const std::vector<std::string>& keys,
                 std::vector<std::string>* out) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    for (const auto& k : keys) {
      size_t at = line.find(k);
      if (at == std::string::npos) continue;
      size_t pos = at + k.size();
      while (pos < line.size()) {
        size_t u = line.find("://", pos);
        if (u == std::string::npos) break;
        size_t start = line.rfind(' ', u);
        start = start == std::string::npos ? pos : start + 1;
        if (start < pos) start = pos;
        size_t end = line.find_first_of(" \t\"'", u);
        std::string h = HostOfUrl(std::string_view(line).substr(start, end - start));
        if (!h.empty() && h.find('.') != std::string::npos &&
            std::find(out->begin(), out->end(), h) == out->end())
          out->push_back(h);
        pos = end == std::string::npos ? line.size() : end;
      }
    }
  }
}

std::vector<std::string> AptHosts() {
  std::vector<std::string> out;
  std::vector<std::string> files = {"/etc/apt/sources.list"};
  if (DIR* d = ::opendir("/etc/apt/sources.list.d")) {
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 5 && (n.ends_with(".list") || n.ends_with(".sources")))
        files.push_back("/etc/apt/sources.list.d/" + n);
    }
    ::closedir(d);
  }
  for (const auto& f : files) {
    if (auto t = sys::ReadFile(f)) AddUrlsFrom(*t, {"deb", "URIs:"}, &out);
  }
  return out;
}

std::vector<std::string> PipHosts() {
  std::vector<std::string> out;
  for (const char* var : {"PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"}) {
    if (const char* v = ::getenv(var)) AddUrlsFrom(std::string("x ") + v, {"x"}, &out);
  }
  std::vector<std::string> files = {"/etc/pip.conf", "/etc/xdg/pip/pip.conf"};
  if (const char* home = ::getenv("HOME")) {
    files.push_back(std::string(home) + "/.config/pip/pip.conf");
    files.push_back(std::string(home) + "/.pip/pip.conf");
  }
  for (const auto& f : files) {
    if (auto t = sys::ReadFile(f)) AddUrlsFrom(*t, {"index-url", "index_url", "find-links"}, &out);
  }
  return out;
}

std::vector<std::string> NpmHosts() {
  std::vector<std::string> out;
  if (const char* v = ::getenv("NPM_CONFIG_REGISTRY")) AddUrlsFrom(std::string("x ") + v, {"x"}, &out);
  if (const char* v = ::getenv("npm_config_registry")) AddUrlsFrom(std::string("x ") + v, {"x"}, &out);
  std::vector<std::string> files = {"/etc/npmrc", "/usr/etc/npmrc"};
  if (const char* home = ::getenv("HOME")) files.push_back(std::string(home) + "/.npmrc");
  for (const auto& f : files) {
    if (auto t = sys::ReadFile(f)) AddUrlsFrom(*t, {"registry"}, &out);
  }
  return out;
}

}  // namespace

Presets ResolvePresets(const std::vector<std::string>& operator_presets) {
  Presets p;
  // github is a code host, not a package registry: its names are stable and public.
  p["github"] = {"github.com", "*.github.com", "*.githubusercontent.com", "*.githubassets.com"};
  p["debian"] = AptHosts();
  p["pypi"] = PipHosts();
  p["npm"] = NpmHosts();
  for (const auto& e : operator_presets) {
    size_t eq = e.find('=');
    if (eq == std::string::npos || eq == 0) {
      spdlog::warn("--egress-preset {}: expected NAME=DOMAIN[,DOMAIN...]; ignored", e);
      continue;
    }
    std::string name = e.substr(0, eq);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::istringstream in(e.substr(eq + 1));
    std::string d;
    while (std::getline(in, d, ',')) {
      auto n = NormaliseDomainPattern(d);
      if (!n) {
        spdlog::warn("--egress-preset {}: {}; entry ignored", name, n.error().message);
        continue;
      }
      auto& v = p[name];
      if (std::find(v.begin(), v.end(), *n) == v.end()) v.push_back(*n);
    }
  }
  return p;
}

}  // namespace space::net
