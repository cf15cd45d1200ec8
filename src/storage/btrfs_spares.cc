// Spare roots of the btrfs driver: writable snapshots of recently used layers made ahead,
// so that a create takes one by a rename instead of waiting for a snapshot's transaction
// commit (see btrfs.h).
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "storage/btrfs.h"
#include "storage/btrfs_ioctl.h"
#include "storage/fs_util.h"

namespace space::storage {

using namespace btrfs;  // NOLINT: the ioctl wrappers of btrfs_ioctl.h

BtrfsDriver::~BtrfsDriver() {
  std::vector<std::string> left;
  {
    std::lock_guard l(spare_mu_);
    stop_ = true;
  }
  spare_cv_.notify_all();
  if (spare_thread_.joinable()) spare_thread_.join();
  for (auto& [key, names] : spares_) left.insert(left.end(), names.begin(), names.end());
  left.insert(left.end(), unwanted_.begin(), unwanted_.end());
  RemoveSpares(left);
}

void BtrfsDriver::RemoveSpares(const std::vector<std::string>& names) {
  if (names.empty()) return;
  auto fd = OpenDir(spare_);
  if (!fd) return;   // the pool is unmounted already (Teardown)
  for (const auto& name : names) {
    auto r = DeleteSubvolumeAt(fd->get(), spare_, name);
    if (!r) spdlog::warn("storage: remove spare root {}: {}", name, r.error().message);
  }
}

Result<std::string> BtrfsDriver::ClaimRoot(const std::string& id, const std::string& digest,
                                           int64_t quota_bytes) {
  SPACE_TRY(internal::CheckName("root", id));
  SPACE_TRY(internal::CheckName("layer", digest));
  if (quota_bytes < 0) return Fail(Errc::kInvalidArgument, "create root " + id + ": negative quota");
  const SpareKey key{digest, quota_bytes};
  std::string spare;
  {
    std::lock_guard l(spare_mu_);
    // Most recently claimed last; the least recent beyond kSpareKeys gives up its spares.
    auto at = std::find(wanted_.begin(), wanted_.end(), key);
    if (at != wanted_.end()) wanted_.erase(at);
    wanted_.push_back(key);
    if (wanted_.size() > kSpareKeys) {
      auto it = spares_.find(wanted_.front());
      if (it != spares_.end()) {
        unwanted_.insert(unwanted_.end(), it->second.begin(), it->second.end());
        spares_.erase(it);
      }
      wanted_.erase(wanted_.begin());
    }
    if (auto it = spares_.find(key); it != spares_.end() && !it->second.empty()) {
      spare = std::move(it->second.back());
      it->second.pop_back();
    }
    if (!spare_thread_.joinable()) spare_thread_ = std::thread([this] { SpareLoop(); });
  }
  spare_cv_.notify_all();
  if (!spare.empty()) {
    // A writable subvolume can be renamed (a read-only one cannot); NOREPLACE keeps
    // CreateRoot's kConflict for a root that exists.
    const std::string from = spare_ + "/" + spare, to = roots_ + "/" + id;
    if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) {
      {
        std::lock_guard l(spare_mu_);
        unsettled_[id] = ++renamed_;
      }
      spare_cv_.notify_all();
      return to;
    }
    const int e = errno;
    {
      std::lock_guard l(spare_mu_);
      // Back to the others, unless its replacement is made already.
      auto& ready = spares_[key];
      const size_t have = ready.size() + (making_ && *making_ == key ? 1 : 0);
      (e == EEXIST && have < kSparesPerKey ? ready : unwanted_).push_back(spare);
    }
    spare_cv_.notify_all();
    if (e == EEXIST) return Fail(Errc::kConflict, "create root " + id + ": " + id + " exists");
    spdlog::warn("storage: rename spare root {} to {}: {}", from, to, std::strerror(e));
  }
  return CreateRoot(id, digest, quota_bytes);
}

Status BtrfsDriver::SettleRoot(const std::string& id) {
  std::unique_lock l(spare_mu_);
  auto it = unsettled_.find(id);
  if (it == unsettled_.end()) return Ok();
  const uint64_t mine = it->second;
  spare_cv_.wait(l, [&] { return settled_ >= mine || stop_; });
  unsettled_.erase(id);
  if (settled_ < mine || failed_ >= mine) {
    l.unlock();
    // Not committed by the spare thread: commit it here (fsync of the directory).
    auto fd = OpenDir(roots_);
    if (!fd) return tl::unexpected(std::move(fd.error()).Wrap("settle root " + id));
    if (::fsync(fd->get()) != 0) return ErrnoFail("settle root " + id + ": fsync " + roots_);
  }
  return Ok();
}

void BtrfsDriver::DropSpares(const std::string& digest) {
  std::vector<std::string> names;
  {
    std::unique_lock l(spare_mu_);
    std::erase_if(wanted_, [&](const SpareKey& k) { return k.digest == digest; });
    // A spare of the layer being made now is on disk but not yet listed, and unwanted
    // ones may be being removed: wait for both, so that none of the layer's is left once
    // the layer is gone (the one being made is unwanted by then, and removed here).
    spare_cv_.wait(l, [&] {
      return ((!making_ || making_->digest != digest) && !removing_) || stop_;
    });
    names = std::move(unwanted_);
    unwanted_.clear();
    for (auto it = spares_.begin(); it != spares_.end();) {
      if (it->first.digest != digest) {
        ++it;
        continue;
      }
      names.insert(names.end(), it->second.begin(), it->second.end());
      it = spares_.erase(it);
    }
  }
  RemoveSpares(names);
}

// One thread: makes spares for the wanted keys (each snapshot's commit also commits the
// claims' renames before it), commits renames by an fsync when no spare is due, and
// removes spares nobody wants. Works with spare_mu_ released.
void BtrfsDriver::SpareLoop() {
  std::unique_lock l(spare_mu_);
  for (;;) {
    const SpareKey* due = nullptr;
    for (auto it = wanted_.rbegin(); it != wanted_.rend() && !due; ++it) {
      auto s = spares_.find(*it);
      if (s == spares_.end() || s->second.size() < kSparesPerKey) due = &*it;
    }
    if (stop_) return;
    if (!unwanted_.empty()) {
      std::vector<std::string> names = std::move(unwanted_);
      unwanted_.clear();
      removing_ = true;
      l.unlock();
      RemoveSpares(names);
      l.lock();
      removing_ = false;
      spare_cv_.notify_all();
      continue;
    }
    const uint64_t upto = renamed_;
    if (due) {
      const SpareKey key = *due;
      const std::string name = "s-" + internal::RandomSuffix();
      making_ = key;
      l.unlock();
      Status st = [&]() -> Status {
        if (key.quota_bytes > 0) SPACE_TRY(EnsureQuota());
        auto src = OpenSource(layers_ + "/" + key.digest, "layer " + key.digest);
        if (!src) return tl::unexpected(src.error());
        return SnapshotInto(src->get(), spare_, name, /*read_only=*/false,
                            static_cast<uint64_t>(key.quota_bytes));
      }();
      if (st) {
        if (auto root = OpenDir(spare_ + "/" + name)) {
          for (const auto& dir : spare_dirs_) (void)::mkdirat(root->get(), dir.c_str(), 0755);
        }
        ReadAhead(spare_ + "/" + name, kFirstExec);
      }
      l.lock();
      making_.reset();
      if (!st) {
        // E.g. the layer went meanwhile: stop wanting it (a claim wants it again).
        spdlog::debug("storage: spare root of layer {}: {}", key.digest, st.error().message);
        std::erase(wanted_, key);
        spare_cv_.notify_all();   // DropSpares waits for making_ to clear
        continue;
      }
      settled_ = std::max(settled_, upto);
      if (failed_ <= upto) failed_ = 0;   // committed now after all
      if (std::find(wanted_.begin(), wanted_.end(), key) != wanted_.end()) {
        spares_[key].push_back(name);
      } else {
        unwanted_.push_back(name);
      }
      spare_cv_.notify_all();
      continue;
    }
    if (settled_ < renamed_) {
      l.unlock();
      bool ok = false;
      if (auto fd = OpenDir(roots_)) ok = ::fsync(fd->get()) == 0;
      l.lock();
      settled_ = std::max(settled_, upto);
      if (!ok) {
        failed_ = std::max(failed_, upto);
      } else if (failed_ <= upto) {
        failed_ = 0;
      }
      spare_cv_.notify_all();
      continue;
    }
    spare_cv_.wait(l);
  }
}

}  // namespace space::storage
