// Test helper: builds tar archives in memory with libarchive's writer, including hostile ones
// (absolute paths, "..", devices, links out of the tree) and hand-made headers that the
// writer would refuse to produce (a huge declared size with no data).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace space::tmpl::testing {

struct TarEntry {
  enum class Type { kFile, kDir, kSymlink, kHardlink, kFifo, kCharDev, kBlockDev };
  Type type = Type::kFile;
  std::string path;
  std::string data;    // kFile
  std::string target;  // kSymlink, kHardlink
  mode_t mode = 0644;
  int64_t uid = 0, gid = 0;
  int64_t mtime = 1700000000;
};

TarEntry File(std::string path, std::string data, mode_t mode = 0644);
TarEntry Dir(std::string path, mode_t mode = 0755);
TarEntry Symlink(std::string path, std::string target);
TarEntry Hardlink(std::string path, std::string target);

enum class Compression { kNone, kGzip, kZstd, kXz };

// The archive's bytes (pax format). Aborts the test binary on a libarchive failure.
std::string TarBytes(const std::vector<TarEntry>& entries, Compression c = Compression::kNone);
// A single ustar header declaring `size` bytes for a regular file, then the end-of-archive
// blocks and no data at all.
std::string HugeDeclaredSizeTar(const std::string& name, uint64_t size);
void WriteFileOrDie(const std::string& path, const std::string& data);
std::string Sha256Hex(const std::string& data);  // without the "sha256:" prefix

}  // namespace space::tmpl::testing
