// The `oci` Runtime's resource figures: OOM kills and usage read from the sandbox's
// cgroups. See oci_internal.h.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <set>
#include <sstream>

#include <sodium.h>
#include <spdlog/spdlog.h>

#include "runtime/oci/bundle.h"
#include "runtime/oci/oci_internal.h"
#include "runtime/oci/seccomp_bpf.h"

namespace space::runtime::oci_impl {

Result<int64_t> OciRuntime::OomKills(const std::string& id) {
  if (!ValidName(id)) return Fail(Errc::kInvalidArgument, "oci: bad id " + id);
  const sys::Hierarchy* h = sys::FindHierarchy(hierarchies_, "memory");
  if (!h) return Fail(Errc::kUnavailable, "no memory cgroup hierarchy");
  // v1: memory.oom_control has "oom_kill N" (Linux 4.13+); v2: memory.events.
  const std::string file =
      h->mount_point + CgroupRel(id) + (h->v2 ? "/memory.events" : "/memory.oom_control");
  auto text = sys::ReadFile(file);
  if (!text) return tl::unexpected(text.error());
  size_t pos = text->find("oom_kill ");
  if (pos == std::string::npos) return Fail(Errc::kUnavailable, file + " has no oom_kill count");
  return static_cast<int64_t>(std::strtoll(text->c_str() + pos + 9, nullptr, 10));
}

namespace {

// "key value" lines (cpu.stat, memory.stat): the value of `key`, or -1.
int64_t StatValue(const std::string& text, std::string_view key) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string_view line(text.data() + pos, eol - pos);
    if (line.size() > key.size() && line.substr(0, key.size()) == key && line[key.size()] == ' ')
      return std::strtoll(std::string(line.substr(key.size() + 1)).c_str(), nullptr, 10);
    pos = eol + 1;
  }
  return -1;
}

int64_t FileValue(const std::string& path) {
  auto text = sys::ReadFile(path);
  if (!text || text->empty() || !std::isdigit(static_cast<unsigned char>((*text)[0]))) return -1;
  return std::strtoll(text->c_str(), nullptr, 10);
}

}  // namespace

Result<Runtime::Usage> OciRuntime::ResourceUsage(const std::string& id) {
  if (!ValidName(id)) return Fail(Errc::kInvalidArgument, "oci: bad id " + id);
  Usage u;
  // CPU: v1 cpuacct.usage (ns); v2 cpu.stat usage_usec.
  if (const sys::Hierarchy* h = sys::FindHierarchy(hierarchies_, "cpuacct")) {
    const std::string dir = h->mount_point + CgroupRel(id);
    if (!sys::Exists(dir)) return Fail(Errc::kNotFound, "no cgroup " + dir);
    if (h->v2) {
      if (auto t = sys::ReadFile(dir + "/cpu.stat")) {
        int64_t us = StatValue(*t, "usage_usec");
        if (us >= 0) u.cpu_ns = us * 1000;
      }
    } else {
      u.cpu_ns = FileValue(dir + "/cpuacct.usage");
    }
  }
  // Memory, as `docker stats` counts it: usage minus the inactive page cache.
  if (const sys::Hierarchy* h = sys::FindHierarchy(hierarchies_, "memory")) {
    const std::string dir = h->mount_point + CgroupRel(id);
    if (!sys::Exists(dir)) return Fail(Errc::kNotFound, "no cgroup " + dir);
    int64_t usage = FileValue(dir + (h->v2 ? "/memory.current" : "/memory.usage_in_bytes"));
    auto stat = sys::ReadFile(dir + "/memory.stat");
    int64_t inactive = -1, cache = -1;
    if (stat) {
      inactive = StatValue(*stat, h->v2 ? "inactive_file" : "total_inactive_file");
      cache = StatValue(*stat, h->v2 ? "file" : "total_cache");
    }
    if (usage >= 0) u.memory_bytes = std::max<int64_t>(0, usage - std::max<int64_t>(0, inactive));
    u.memory_cache_bytes = cache;
  }
  return u;
}

}  // namespace space::runtime::oci_impl
