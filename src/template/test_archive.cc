#include "template/test_archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/common.h"

namespace space::tmpl::testing {

namespace {

[[noreturn]] void Die(const char* what, archive* a) {
  std::fprintf(stderr, "test archive: %s: %s\n", what, a ? archive_error_string(a) : "");
  std::abort();
}

la_ssize_t Append(archive*, void* client, const void* buf, size_t len) {
  static_cast<std::string*>(client)->append(static_cast<const char*>(buf), len);
  return static_cast<la_ssize_t>(len);
}

}  // namespace

TarEntry File(std::string path, std::string data, mode_t mode) {
  TarEntry e;
  e.path = std::move(path);
  e.data = std::move(data);
  e.mode = mode;
  return e;
}
TarEntry Dir(std::string path, mode_t mode) {
  TarEntry e;
  e.type = TarEntry::Type::kDir;
  e.path = std::move(path);
  e.mode = mode;
  return e;
}
TarEntry Symlink(std::string path, std::string target) {
  TarEntry e;
  e.type = TarEntry::Type::kSymlink;
  e.path = std::move(path);
  e.target = std::move(target);
  e.mode = 0777;
  return e;
}
TarEntry Hardlink(std::string path, std::string target) {
  TarEntry e;
  e.type = TarEntry::Type::kHardlink;
  e.path = std::move(path);
  e.target = std::move(target);
  return e;
}

std::string TarBytes(const std::vector<TarEntry>& entries, Compression c) {
  std::string out;
  archive* a = archive_write_new();
  if (archive_write_set_format_pax_restricted(a) != ARCHIVE_OK) Die("format", a);
  int r = ARCHIVE_OK;
  switch (c) {
    case Compression::kNone:
      break;
    case Compression::kGzip:
      r = archive_write_add_filter_gzip(a);
      break;
    case Compression::kZstd:
      r = archive_write_add_filter_zstd(a);
      break;
    case Compression::kXz:
      r = archive_write_add_filter_xz(a);
      break;
  }
  if (r != ARCHIVE_OK) Die("filter", a);
  // Without this libarchive pads the last block of an uncompressed stream to 10 KiB.
  archive_write_set_bytes_in_last_block(a, 1);
  if (archive_write_open(a, &out, nullptr, Append, nullptr) != ARCHIVE_OK) Die("open", a);
  for (const auto& t : entries) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, t.path.c_str());
    archive_entry_set_uid(e, t.uid);
    archive_entry_set_gid(e, t.gid);
    archive_entry_set_mtime(e, t.mtime, 0);
    archive_entry_set_perm(e, t.mode);
    switch (t.type) {
      case TarEntry::Type::kFile:
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_size(e, static_cast<la_int64_t>(t.data.size()));
        break;
      case TarEntry::Type::kDir:
        archive_entry_set_filetype(e, AE_IFDIR);
        break;
      case TarEntry::Type::kSymlink:
        archive_entry_set_filetype(e, AE_IFLNK);
        archive_entry_set_symlink(e, t.target.c_str());
        break;
      case TarEntry::Type::kHardlink:
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_hardlink(e, t.target.c_str());
        archive_entry_set_size(e, 0);
        break;
      case TarEntry::Type::kFifo:
        archive_entry_set_filetype(e, AE_IFIFO);
        break;
      case TarEntry::Type::kCharDev:
        archive_entry_set_filetype(e, AE_IFCHR);
        archive_entry_set_rdev(e, makedev(1, 3));
        break;
      case TarEntry::Type::kBlockDev:
        archive_entry_set_filetype(e, AE_IFBLK);
        archive_entry_set_rdev(e, makedev(7, 0));
        break;
    }
    if (archive_write_header(a, e) != ARCHIVE_OK) Die("header", a);
    if (t.type == TarEntry::Type::kFile && !t.data.empty() &&
        archive_write_data(a, t.data.data(), t.data.size()) !=
            static_cast<la_ssize_t>(t.data.size()))
      Die("data", a);
    archive_entry_free(e);
  }
  if (archive_write_close(a) != ARCHIVE_OK) Die("close", a);
  archive_write_free(a);
  return out;
}

std::string HugeDeclaredSizeTar(const std::string& name, uint64_t size) {
  char h[512];
  std::memset(h, 0, sizeof h);
  std::snprintf(h, 100, "%s", name.c_str());
  std::snprintf(h + 100, 8, "%07o", 0644);
  std::snprintf(h + 108, 8, "%07o", 0);
  std::snprintf(h + 116, 8, "%07o", 0);
  // Sizes over 8 GiB do not fit 11 octal digits: GNU base-256 (high bit set) encoding.
  h[124] = static_cast<char>(0x80);
  for (int i = 0; i < 8; ++i) h[124 + 11 - i] = static_cast<char>((size >> (8 * i)) & 0xff);
  std::snprintf(h + 136, 12, "%011o", 0);
  h[156] = '0';
  std::memcpy(h + 257, "ustar", 6);
  std::memcpy(h + 263, "00", 2);
  std::memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : std::string(h, 512)) sum += c;
  std::snprintf(h + 148, 8, "%06o", sum);
  h[155] = ' ';
  return std::string(h, 512) + std::string(1024, '\0');
}

void WriteFileOrDie(const std::string& path, const std::string& data) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(data.data(), 1, data.size(), f) != data.size() || std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
}

std::string Sha256Hex(const std::string& data) {
  unsigned char out[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(out, reinterpret_cast<const unsigned char*>(data.data()), data.size());
  return HexEncode(std::string_view(reinterpret_cast<char*>(out), sizeof out));
}

}  // namespace space::tmpl::testing
