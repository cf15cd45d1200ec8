// AgentCopies: which file of the agent binary each new sandbox runs as its PID 1.
//
// Every sandbox maps the agent's executable. With one file for all of them the kernel's
// reverse map of each of its pages holds one mapping per sandbox, and whatever walks that
// map — page aging (DAMON's monitor, reclaim), and every exec and exit of an agent, which
// take its lock to add or remove their mappings — costs O(sandboxes) per page: beside
// 5,000 sandboxes a new agent's exec waited ~140 ms for the lock while a monitor walked
// 5,000 mappings. So each file serves at most `per_copy` running sandboxes: the first
// `per_copy` run the original, later ones identical copies made on first need (a fresh
// inode, so its own page cache: ~1.4 MB of it resident per copy, ~22 KiB per sandbox at
// 64 each). Copies live in `dir` and are made anew by each process (never handed a file
// an older spaced wrote); sandboxes of an older process keep the inodes they run.
//
// Thread-safe.
#pragma once

#include <cstddef>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/common.h"

namespace space::runtime::oci_impl {

class AgentCopies {
 public:
  static constexpr size_t kPerCopy = 64;
  static constexpr size_t kMaxCopies = 1024;

  AgentCopies(std::string original, std::string dir, size_t per_copy = kPerCopy)
      : original_(std::move(original)), dir_(std::move(dir)), per_copy_(per_copy) {}

  // The binary instance `id` is to run; counted against its file until Release(id).
  // A failed copy falls back to the original (logged): a start never fails for this.
  std::string Acquire(const std::string& id);
  void Release(const std::string& id);

  // For tests: how many instances each file serves now (index 0: the original).
  std::vector<size_t> Users() const;

 private:
  Result<std::string> MakeCopy(size_t index);

  const std::string original_, dir_;
  const size_t per_copy_;
  mutable std::mutex mu_;
  std::vector<std::string> paths_;  // [0] = original_, [i] = space-agent.i in dir_
  std::vector<size_t> users_;
  bool copy_failed_ = false;  // a copy could not be made: stop trying
  std::unordered_map<std::string, size_t> of_;
};

}  // namespace space::runtime::oci_impl
