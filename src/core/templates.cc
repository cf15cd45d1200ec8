#include "core/templates.h"

#include <dirent.h>
#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "sys/sys.h"

namespace space::core {

namespace {

Status WriteText(const std::string& path, std::string_view text, mode_t mode) {
  auto fd = sys::Open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
  if (!fd) return tl::unexpected(fd.error());
  SPACE_TRY_WRAP(sys::WriteAll(fd->get(), text), path);
  if (::fchmod(fd->get(), mode) != 0) return ErrnoFail("chmod " + path);
  return Ok();
}

Status HashTree(crypto_hash_sha256_state* st, const std::string& root, const std::string& rel) {
  std::string dir = root + rel;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return ErrnoFail("opendir " + dir);
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    if (!std::strcmp(e->d_name, ".") || !std::strcmp(e->d_name, "..")) continue;
    names.emplace_back(e->d_name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  for (const auto& name : names) {
    std::string r = rel + "/" + name;
    std::string p = root + r;
    struct stat sb;
    if (::lstat(p.c_str(), &sb) != 0) return ErrnoFail("stat " + p);
    std::string line = r + '\0' + std::to_string(sb.st_mode) + '\0' + std::to_string(sb.st_uid) +
                       '\0' + std::to_string(sb.st_gid) + '\0';
    if (S_ISLNK(sb.st_mode)) {
      char target[4096];
      ssize_t n = ::readlink(p.c_str(), target, sizeof target);
      if (n < 0) return ErrnoFail("readlink " + p);
      line.append(target, static_cast<size_t>(n));
    } else if (S_ISREG(sb.st_mode)) {
      line += std::to_string(sb.st_size) + '\0';
    }
    crypto_hash_sha256_update(st, reinterpret_cast<const unsigned char*>(line.data()), line.size());
    if (S_ISREG(sb.st_mode)) {
      auto fd = sys::Open(p, O_RDONLY);
      if (!fd) return tl::unexpected(fd.error());
      std::vector<unsigned char> buf(1 << 16);
      for (;;) {
        ssize_t n = ::read(fd->get(), buf.data(), buf.size());
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return ErrnoFail("read " + p);
        if (n == 0) break;
        crypto_hash_sha256_update(st, buf.data(), static_cast<size_t>(n));
      }
    } else if (S_ISDIR(sb.st_mode)) {
      SPACE_TRY(HashTree(st, root, r));
    }
    crypto_hash_sha256_update(st, reinterpret_cast<const unsigned char*>("\n"), 1);
  }
  return Ok();
}

bool ValidRefPart(std::string_view s) {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'))
      return false;
  }
  return s[0] != '.';
}

}  // namespace

Status BuildBaseTree(const std::string& dir, const std::string& busybox_path) {
  for (const char* d : {"/bin", "/sbin", "/usr", "/usr/bin", "/usr/sbin", "/etc", "/root",
                        "/home", "/home/user", "/tmp", "/proc", "/sys", "/dev", "/var",
                        "/var/tmp", "/run"}) {
    SPACE_TRY(sys::MkdirAll(dir + d, 0755));
  }
  // The tree's root becomes the sandbox's "/": it must be traversable by every user.
  if (::chmod(dir.c_str(), 0755) != 0) return ErrnoFail("chmod " + dir);
  ::chmod((dir + "/tmp").c_str(), 01777);
  ::chmod((dir + "/var/tmp").c_str(), 01777);
  ::chmod((dir + "/root").c_str(), 0700);
  if (::chown((dir + "/home/user").c_str(), 1000, 1000) != 0)
    return ErrnoFail("chown " + dir + "/home/user");

  // Copy busybox (static: the template has no libc).
  auto src = sys::ReadFile(busybox_path);
  if (!src) return tl::unexpected(std::move(src.error()).Wrap("read busybox"));
  SPACE_TRY(WriteText(dir + "/bin/busybox", *src, 0755));
  auto list = sys::RunChecked({.argv = {busybox_path, "--list-full"}});
  if (!list) return tl::unexpected(std::move(list.error()).Wrap("list busybox applets"));
  size_t pos = 0;
  while (pos < list->out.size()) {
    size_t nl = list->out.find('\n', pos);
    if (nl == std::string::npos) nl = list->out.size();
    std::string applet = list->out.substr(pos, nl - pos);  // e.g. "usr/bin/wc"
    pos = nl + 1;
    if (applet.empty() || applet == "bin/busybox" || applet.find("..") != std::string::npos)
      continue;
    std::string link = dir + "/" + applet;
    if (::symlink("/bin/busybox", link.c_str()) != 0 && errno != EEXIST)
      return ErrnoFail("symlink " + link);
  }
  SPACE_TRY(WriteText(dir + "/etc/passwd",
                      "root:x:0:0:root:/root:/bin/sh\n"
                      "user:x:1000:1000:user:/home/user:/bin/sh\n"
                      "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
                      0644));
  SPACE_TRY(WriteText(dir + "/etc/group", "root:x:0:\nuser:x:1000:\nnogroup:x:65534:\n", 0644));
  SPACE_TRY(WriteText(dir + "/etc/hostname", "sandbox\n", 0644));
  SPACE_TRY(WriteText(dir + "/etc/hosts", "127.0.0.1 localhost sandbox\n::1 localhost\n", 0644));
  SPACE_TRY(WriteText(dir + "/etc/resolv.conf", "", 0644));
  SPACE_TRY(WriteText(dir + "/etc/os-release", "NAME=\"SPACE base\"\nID=space-base\n", 0644));
  return Ok();
}

Result<std::string> TreeDigest(const std::string& dir) {
  crypto_hash_sha256_state st;
  crypto_hash_sha256_init(&st);
  SPACE_TRY(HashTree(&st, dir, ""));
  unsigned char out[crypto_hash_sha256_BYTES];
  crypto_hash_sha256_final(&st, out);
  return "sha256:" + HexEncode(std::string_view(reinterpret_cast<char*>(out), sizeof out));
}

Result<std::pair<std::string, std::string>> ParseTemplateRef(const std::string& ref) {
  std::string name = ref, tag = "latest";
  if (auto colon = ref.find(':'); colon != std::string::npos) {
    name = ref.substr(0, colon);
    tag = ref.substr(colon + 1);
  }
  if (!ValidRefPart(name) || !ValidRefPart(tag))
    return Fail(Errc::kInvalidArgument, "invalid template reference \"" + ref +
                                            "\": want name[:tag] of letters, digits, . - _");
  return std::make_pair(name, tag);
}

}  // namespace space::core
