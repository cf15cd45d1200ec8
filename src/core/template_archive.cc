#include "core/template_archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

#include "sys/sys.h"

namespace space::core {

Result<std::string> FileSha256(const std::string& path) {
  auto fd = sys::Open(path, O_RDONLY);
  if (!fd) return tl::unexpected(fd.error());
  crypto_hash_sha256_state st;
  crypto_hash_sha256_init(&st);
  std::vector<unsigned char> buf(1 << 20);
  for (;;) {
    ssize_t n = ::read(fd->get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoFail("read " + path);
    if (n == 0) break;
    crypto_hash_sha256_update(&st, buf.data(), static_cast<size_t>(n));
  }
  unsigned char h[crypto_hash_sha256_BYTES];
  crypto_hash_sha256_final(&st, h);
  return HexEncode(std::string_view(reinterpret_cast<char*>(h), sizeof h));
}

Status ExportTree(const std::string& dir, const std::string& out, uint32_t shift) {
  struct archive* disk = archive_read_disk_new();
  struct archive* a = archive_write_new();
  struct archive_entry_linkresolver* links = archive_entry_linkresolver_new();
  struct Free {
    archive* d;
    archive* a;
    archive_entry_linkresolver* l;
    ~Free() {
      archive_read_free(d);
      archive_write_free(a);
      archive_entry_linkresolver_free(l);
    }
  } free_all{disk, a, links};
  archive_write_set_format_pax_restricted(a);
  archive_entry_linkresolver_set_strategy(links, archive_format(a));
  archive_write_add_filter_zstd(a);
  // Level 1: several times faster than the default for a few percent more bytes.
  (void)archive_write_set_filter_option(a, "zstd", "compression-level", "1");
  if (archive_write_open_filename(a, out.c_str()) != ARCHIVE_OK)
    return Fail(Errc::kInternal, std::string("open ") + out + ": " + archive_error_string(a));
  archive_read_disk_set_symlink_physical(disk);
  archive_read_disk_set_behavior(disk, ARCHIVE_READDISK_NO_XATTR | ARCHIVE_READDISK_NO_ACL |
                                           ARCHIVE_READDISK_NO_FFLAGS |
                                           ARCHIVE_READDISK_NO_TRAVERSE_MOUNTS);
  if (archive_read_disk_open(disk, dir.c_str()) != ARCHIVE_OK)
    return Fail(Errc::kInternal, std::string("walk: ") + archive_error_string(disk));
  std::string buf(1 << 20, '\0');
  auto write_one = [&](archive_entry* e) -> Status {
    if (archive_write_header(a, e) < ARCHIVE_WARN)
      return Fail(Errc::kInternal, std::string("write ") + archive_entry_pathname(e) + ": " +
                                       archive_error_string(a));
    if (archive_entry_filetype(e) != AE_IFREG || archive_entry_size(e) == 0) return Ok();
    const char* src = archive_entry_sourcepath(e);
    auto fd = sys::Open(src, O_RDONLY | O_NOFOLLOW);
    if (!fd) return tl::unexpected(fd.error());
    for (;;) {
      ssize_t n = ::read(fd->get(), buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoFail(std::string("read ") + src);
      if (n == 0) break;
      if (archive_write_data(a, buf.data(), static_cast<size_t>(n)) < 0)
        return Fail(Errc::kInternal, std::string("write data: ") + archive_error_string(a));
    }
    return Ok();
  };
  for (;;) {
    archive_entry* e = archive_entry_new();
    int r = archive_read_next_header2(disk, e);
    if (r == ARCHIVE_EOF) {
      archive_entry_free(e);
      break;
    }
    if (r < ARCHIVE_WARN) {
      std::string why = archive_error_string(disk);
      archive_entry_free(e);
      return Fail(Errc::kInternal, "walk: " + why);
    }
    archive_read_disk_descend(disk);
    std::string path = archive_entry_pathname(e);
    if (path.size() <= dir.size() + 1 || !StartsWith(path, dir + "/")) {  // the layer itself
      archive_entry_free(e);
      continue;
    }
    archive_entry_copy_pathname(e, path.substr(dir.size() + 1).c_str());
    int64_t uid = archive_entry_uid(e), gid = archive_entry_gid(e);
    archive_entry_set_uid(e, uid >= shift ? uid - shift : 0);
    archive_entry_set_gid(e, gid >= shift ? gid - shift : 0);
    archive_entry_set_uname(e, nullptr);
    archive_entry_set_gname(e, nullptr);
    archive_entry* sparse = nullptr;
    archive_entry_linkify(links, &e, &sparse);
    Status st = Ok();
    if (e) st = write_one(e);
    if (sparse && st) st = write_one(sparse);
    if (e) archive_entry_free(e);
    if (!st) return st;
  }
  if (archive_write_close(a) != ARCHIVE_OK)
    return Fail(Errc::kInternal, std::string("close ") + out + ": " + archive_error_string(a));
  return Ok();
}

Status UnpackTree(const std::string& tar, const std::string& dir_in) {
  char* real = ::realpath(dir_in.c_str(), nullptr);  // SECURE_SYMLINKS checks every component
  if (!real) return ErrnoFail("realpath " + dir_in);
  const std::string dir = real;
  ::free(real);
  struct archive* a = archive_read_new();
  struct archive* disk = archive_write_disk_new();
  struct Free {
    archive* a;
    archive* d;
    ~Free() {
      archive_read_free(a);
      archive_write_free(d);
    }
  } free_all{a, disk};
  archive_read_support_format_tar(a);
  archive_read_support_filter_zstd(a);
  archive_write_disk_set_options(
      disk, ARCHIVE_EXTRACT_OWNER | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_TIME |
                ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_SECURE_SYMLINKS |
                ARCHIVE_EXTRACT_NO_OVERWRITE);
  if (archive_read_open_filename(a, tar.c_str(), 1 << 20) != ARCHIVE_OK)
    return Fail(Errc::kInternal, std::string("open: ") + archive_error_string(a));
  archive_entry* e = nullptr;
  for (;;) {
    int r = archive_read_next_header(a, &e);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN) return Fail(Errc::kInternal, std::string("read: ") + archive_error_string(a));
    mode_t type = archive_entry_filetype(e);
    if (type == AE_IFCHR || type == AE_IFBLK) continue;
    const char* name = archive_entry_pathname(e);
    if (!name || name[0] == '/' || (archive_entry_hardlink(e) && archive_entry_hardlink(e)[0] == '/'))
      return Fail(Errc::kInvalidArgument, "absolute path in the cache tarball");
    std::string path = dir + "/" + name;
    archive_entry_copy_pathname(e, path.c_str());
    if (const char* hl = archive_entry_hardlink(e)) {
      std::string target = dir + "/" + hl;
      archive_entry_copy_hardlink(e, target.c_str());
    }
    if (archive_write_header(disk, e) < ARCHIVE_WARN)
      return Fail(Errc::kInternal, std::string("write ") + path + ": " + archive_error_string(disk));
    const void* buf;
    size_t size;
    la_int64_t off;
    while ((r = archive_read_data_block(a, &buf, &size, &off)) == ARCHIVE_OK) {
      if (archive_write_data_block(disk, buf, size, off) < ARCHIVE_WARN)
        return Fail(Errc::kInternal, std::string("write ") + path + ": " + archive_error_string(disk));
    }
    if (r < ARCHIVE_WARN) return Fail(Errc::kInternal, std::string("read: ") + archive_error_string(a));
    if (archive_write_finish_entry(disk) < ARCHIVE_WARN)
      return Fail(Errc::kInternal, std::string("finish ") + path + ": " + archive_error_string(disk));
  }
  // The tarball holds what is under the root, not the root itself, and `dir` is a 0700
  // temp dir: give the root the mode every distribution's has, or a template's non-root
  // USER could not walk its own filesystem.
  if (::chmod(dir.c_str(), 0755) != 0) return ErrnoFail("chmod " + dir);
  return Ok();
}

}  // namespace space::core
