#include "runtime/oci/agent_copies.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "sys/sys.h"

namespace space::runtime::oci_impl {

std::string AgentCopies::Acquire(const std::string& id) {
  std::lock_guard l(mu_);
  if (auto it = of_.find(id); it != of_.end()) return paths_[it->second];
  if (paths_.empty()) {
    paths_.push_back(original_);
    users_.push_back(0);
  }
  size_t pick = paths_.size();
  for (size_t i = 0; i < paths_.size(); ++i) {
    if (users_[i] < per_copy_) {
      pick = i;
      break;
    }
  }
  if (pick == paths_.size() && !copy_failed_ && paths_.size() < kMaxCopies) {
    auto c = MakeCopy(paths_.size());
    if (c) {
      paths_.push_back(std::move(*c));
      users_.push_back(0);
    } else {
      // Every sandbox beyond this runs a file shared by more than per_copy_: slower
      // execs beside thousands of sandboxes, nothing worse.
      spdlog::warn("oci: copy of the agent binary for more sandboxes: {}; further sandboxes "
                   "share the existing files", c.error().message);
      copy_failed_ = true;
    }
  }
  if (pick == paths_.size()) {  // all full: the least used file
    pick = 0;
    for (size_t i = 1; i < users_.size(); ++i)
      if (users_[i] < users_[pick]) pick = i;
  }
  ++users_[pick];
  of_.emplace(id, pick);
  return paths_[pick];
}

void AgentCopies::Release(const std::string& id) {
  std::lock_guard l(mu_);
  auto it = of_.find(id);
  if (it == of_.end()) return;
  --users_[it->second];
  of_.erase(it);
}

std::vector<size_t> AgentCopies::Users() const {
  std::lock_guard l(mu_);
  return users_;
}

Result<std::string> AgentCopies::MakeCopy(size_t index) {
  if (index == 1) {
    // The first copy of this process: copies an older spaced made go (sandboxes running
    // them keep their inodes).
    (void)sys::RemoveAll(dir_);
  }
  SPACE_TRY(sys::MkdirAll(dir_, 0755));
  if (::chmod(dir_.c_str(), 0755) != 0) return ErrnoFail("chmod " + dir_);
  // Read and written whole: 2.9 MB once per 64 sandboxes. A new inode, so a page cache of
  // its own. No fsync: the copy only has to outlast this process's starts, and each
  // process makes its own.
  auto bytes = sys::ReadFile(original_);
  if (!bytes) return tl::unexpected(bytes.error());
  const std::string path = dir_ + "/space-agent." + std::to_string(index);
  const std::string tmp = path + ".tmp";
  auto out = sys::Open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0755);
  if (!out) return tl::unexpected(out.error());
  SPACE_TRY_WRAP(sys::WriteAll(out->get(), *bytes), "write " + tmp);
  if (::fchmod(out->get(), 0755) != 0) return ErrnoFail("chmod " + tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return ErrnoFail("rename " + tmp);
  return path;
}

}  // namespace space::runtime::oci_impl
