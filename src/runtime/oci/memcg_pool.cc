// MemcgPool: see memcg_pool.h.
#include "runtime/oci/memcg_pool.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <spdlog/spdlog.h>

#include "common/common.h"
#include "sys/sys.h"

namespace space::runtime::oci_impl {

namespace {

constexpr const char* kPrefix = ".park-";

bool Write(const std::string& path, std::string_view value) {
  auto fd = sys::Open(path, O_WRONLY | O_CLOEXEC);
  return fd && sys::WriteAll(fd->get(), value);
}

// Whether `dir` has a cgroup below it (a directory entry other than . and ..).
bool HasChildren(const std::string& dir) {
  bool any = false;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_type == DT_DIR && std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) {
        any = true;
        break;
      }
    }
    ::closedir(d);
  }
  return any;
}

// Kernel memory still charged to a parked cgroup is the next sandbox's from the start,
// and cannot be reclaimed to fit a limit: more than this (half the smallest memory limit
// spaced accepts) and the cgroup is removed instead.
constexpr int64_t kMaxKernelBytes = 8ll << 20;

int64_t ReadNumber(const std::string& path) {
  auto text = sys::ReadFile(path);
  if (!text || text->empty()) return -1;
  return std::strtoll(text->c_str(), nullptr, 10);
}

bool NoProcesses(const std::string& dir) {
  auto procs = sys::ReadFile(dir + "/cgroup.procs");
  return procs && procs->find_first_not_of(" \n") == std::string::npos;
}

}  // namespace

// What crun may set from a sandbox's spec, and the counters a later sandbox would read,
// back to what a new cgroup has. memsw before the limit: the kernel keeps limit ≤ memsw.
bool MemcgPool::Reset(const std::string& dir) const {
  const bool swap = sys::Exists(dir + "/memory.memsw.limit_in_bytes");
  if (swap && !Write(dir + "/memory.memsw.limit_in_bytes", "-1")) return false;
  if (!Write(dir + "/memory.limit_in_bytes", "-1")) return false;
  if (!Write(dir + "/memory.soft_limit_in_bytes", "-1")) return false;
  if (!Write(dir + "/memory.oom_control", "0")) return false;
  // The peaks and failure counts (where the kernel has them), so the next sandbox reads
  // its own. (Cumulative counters in memory.stat cannot be reset: they carry over.)
  for (const char* f : {"memory", "memory.memsw", "memory.kmem", "memory.kmem.tcp"}) {
    (void)Write(dir + "/" + f + ".max_usage_in_bytes", "0");
    (void)Write(dir + "/" + f + ".failcnt", "0");
  }
  return true;
}

void MemcgPool::Remove(const std::string& name) const {
  auto st = sys::KillAndRemoveCgroup(all_, parent_rel_ + "/" + name);
  if (!st) spdlog::warn("oci: remove parked memory cgroup {}: {}", name, st.error().message);
}

MemcgPool::~MemcgPool() {
  {
    std::lock_guard l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (trimmer_.joinable()) trimmer_.join();
  // A stopped daemon holds no kernel memory for sandboxes it may never make (one that
  // crashed leaves them to the next one's Adopt, or to scripts/space-down.sh).
  for (const auto& name : ready_) {
    if (::rmdir((parent_ + "/" + name).c_str()) != 0 && errno != ENOENT) Remove(name);
  }
}

void MemcgPool::StartTrimmer() {
  if (trimmer_.joinable()) return;
  last_claim_ns_ = MonotonicNanos();
  trimmer_ = std::thread([this] { TrimLoop(); });
}

void MemcgPool::TrimLoop() {
  std::unique_lock l(mu_);
  while (!stop_) {
    cv_.wait_for(l, std::chrono::nanoseconds(idle_ns_ / 6));
    if (stop_) break;
    if (ready_.empty() || MonotonicNanos() - last_claim_ns_ < idle_ns_) continue;
    const size_t n = std::min(kTrimBatch, ready_.size());
    std::vector<std::string> gone(ready_.begin(), ready_.begin() + static_cast<std::ptrdiff_t>(n));
    ready_.erase(ready_.begin(), ready_.begin() + static_cast<std::ptrdiff_t>(n));
    l.unlock();
    for (const auto& name : gone) Remove(name);
    l.lock();
  }
}

void MemcgPool::Adopt() {
  std::vector<std::string> found;
  if (DIR* d = ::opendir(parent_.c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_type == DT_DIR && std::strncmp(e->d_name, kPrefix, std::strlen(kPrefix)) == 0)
        found.emplace_back(e->d_name);
    }
    ::closedir(d);
  }
  std::vector<std::string> keep, remove;
  uint64_t next = 0;   // later names must not meet these
  for (const auto& name : found) {
    const std::string dir = parent_ + "/" + name;
    if (keep.size() < cap_ && NoProcesses(dir) && !HasChildren(dir) && Reset(dir)) {
      keep.push_back(name);
    } else {
      remove.push_back(name);
    }
    unsigned long long n = 0;
    if (std::sscanf(name.c_str() + std::strlen(kPrefix), "%llu", &n) == 1)
      next = std::max<uint64_t>(next, n + 1);
  }
  for (const auto& name : remove) Remove(name);
  std::lock_guard l(mu_);
  next_ = std::max(next_, next);
  ready_.insert(ready_.end(), keep.begin(), keep.end());
  if (!ready_.empty()) StartTrimmer();
}

std::string MemcgPool::Park(const std::string& id) {
  std::string name;
  {
    std::lock_guard l(mu_);
    if (ready_.size() + settling_ >= cap_) return "";
    name = kPrefix + std::to_string(next_++);
    ++settling_;
  }
  const std::string dir = parent_ + "/" + id;
  if (!HasChildren(dir) && ::rename(dir.c_str(), (parent_ + "/" + name).c_str()) == 0) return name;
  std::lock_guard l(mu_);
  --settling_;
  return "";
}

bool MemcgPool::Settle(const std::string& parked) {
  const std::string dir = parent_ + "/" + parked;
  // Reset only now: while the sandbox ran it kept its limits.
  int64_t kernel = ReadNumber(dir + "/memory.kmem.usage_in_bytes");
  if (kernel < 0) kernel = ReadNumber(dir + "/memory.usage_in_bytes");
  const bool keep = NoProcesses(dir) && !HasChildren(dir) && kernel >= 0 &&
                    kernel <= kMaxKernelBytes && Reset(dir);
  if (!keep) Remove(parked);
  std::lock_guard l(mu_);
  --settling_;
  if (keep) {
    ready_.push_back(parked);
    StartTrimmer();
  }
  return keep;
}

bool MemcgPool::Claim(const std::string& id) {
  for (;;) {
    std::string name;
    {
      std::lock_guard l(mu_);
      last_claim_ns_ = MonotonicNanos();
      if (ready_.empty()) return false;
      // The most recently parked: its memory is the likeliest still cached.
      name = std::move(ready_.back());
      ready_.pop_back();
    }
    if (::rename((parent_ + "/" + name).c_str(), (parent_ + "/" + id).c_str()) == 0) return true;
    const int e = errno;
    if (e == ENOENT) continue;  // removed by someone else: try the next
    spdlog::warn("oci: claim parked memory cgroup {} for {}: {}", name, id, std::strerror(e));
    std::lock_guard l(mu_);
    ready_.push_back(name);
    return false;
  }
}

}  // namespace space::runtime::oci_impl
