// Private helpers shared by the storage drivers: tree copy with ownership shifting,
// disk usage, /proc/self/mountinfo parsing, name validation and directory listing.
// Not part of the storage front door; include only from src/storage/.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/common.h"

namespace space::storage::internal {

// Copies the contents of directory `src` into the existing, empty directory `dst`, and
// gives `dst` the mode, owner and times of `src`. Keeps regular files (reflinked when
// both are on one btrfs), directories, symlinks, hard links, device nodes, fifos and
// sockets, modes (setuid/setgid/sticky included), timestamps, and ownership with
// `uid_shift` added to every uid and gid. Does not copy xattrs. Does not follow symlinks.
[[nodiscard]] Status CopyTree(const std::string& src, const std::string& dst, uint32_t uid_shift);

// Bytes allocated to the tree at `dir`, as `du -sx --block-size=1` counts them: st_blocks
// of every inode, hard links once, not descending into other filesystems (on btrfs, other
// subvolumes). Does not follow symlinks. Blocks for the walk (O(inodes)).
[[nodiscard]] Result<int64_t> DiskUsage(const std::string& dir);

struct MountEntry {
  int id = 0;
  int parent = 0;
  std::string devno;         // "major:minor"
  std::string root;          // path inside the filesystem that is mounted here
  std::string mount_point;
  std::string fstype;
  std::string source;
  bool shared = false;       // has a "shared:N" optional field
};
// Every mount of this process's namespace, in mountinfo order (parents before children).
std::vector<MountEntry> ReadMountInfo();
// The topmost mount exactly at `path` (canonical), or nullptr.
const MountEntry* FindMount(const std::vector<MountEntry>& mounts, const std::string& path);

// Layer digests and root ids: [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}. They become file names
// and parts of overlay mount options, so '/', ':' and ',' are out.
bool IsValidName(std::string_view name);
[[nodiscard]] Status CheckName(std::string_view what, std::string_view name);

// Names in `dir` not starting with '.' (sorted). Empty if `dir` is missing.
std::vector<std::string> ListNames(const std::string& dir);
// Every name in `dir` (hidden ones included, "." and ".." excluded).
std::vector<std::string> ListAllNames(const std::string& dir);

// A random suffix for temporary names ("k3j5...").
std::string RandomSuffix();

// statfs(2) f_type of `path`, or 0 on error.
int64_t FsType(const std::string& path);

// Parses "1073741824", "512M", "64G", "1T" (binary units) into bytes; 0 on error.
uint64_t ParseSize(std::string_view s);

}  // namespace space::storage::internal
