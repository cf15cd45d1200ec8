#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>

#include "template/internal.h"
#include "template/template.h"

namespace space::tmpl {
namespace internal {

std::string Quote(std::string_view s) {
  std::string out = "\"";
  size_t n = 0;
  for (unsigned char c : s) {
    if (++n > 120) {
      out += "...";
      break;
    }
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      static const char* kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out + "\"";
}

Result<std::vector<std::string>> SplitRelPath(std::string_view path, std::string_view what) {
  auto fail = [&](const std::string& why) {
    return Fail(Errc::kInvalidArgument, std::string(what) + ": " + why);
  };
  if (path.size() > kMaxPathBytes) return fail("path longer than 4096 bytes");
  if (!path.empty() && path[0] == '/') return fail("absolute path not allowed");
  std::vector<std::string> comps;
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    std::string_view c = path.substr(i, j - i);
    if (c == "..") return fail("\"..\" path component not allowed");
    if (c.size() > NAME_MAX) return fail("path component longer than NAME_MAX");
    if (!c.empty() && c != ".") comps.emplace_back(c);
    i = j + 1;
  }
  if (comps.size() > kMaxDepth) return fail("path nested deeper than 256 directories");
  return comps;
}

std::string JoinPath(const std::vector<std::string>& comps, size_t n) {
  std::string out;
  for (size_t i = 0; i < n && i < comps.size(); ++i) {
    if (i) out += '/';
    out += comps[i];
  }
  return out;
}

Result<sys::UniqueFd> OpenInRoot(int root_fd, const std::string& rel, int flags) {
  open_how how{};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
  for (;;) {
    long fd = ::syscall(SYS_openat2, root_fd, rel.c_str(), &how, sizeof how);
    if (fd >= 0) return sys::UniqueFd(static_cast<int>(fd));
    if (errno == EINTR || errno == EAGAIN) continue;
    if (errno == ENOSYS) return ErrnoFail("openat2 (needs Linux 5.6+) " + rel);
    return ErrnoFail("open " + rel);
  }
}

Result<std::string> FdPath(int fd) {
  char buf[PATH_MAX + 1];
  std::string link = "/proc/self/fd/" + std::to_string(fd);
  ssize_t n = ::readlink(link.c_str(), buf, PATH_MAX);
  if (n < 0) return ErrnoFail("readlink " + link);
  return std::string(buf, static_cast<size_t>(n));
}

Result<std::pair<std::string, int64_t>> Sha256Fd(int fd) {
  crypto_hash_sha256_state st;
  crypto_hash_sha256_init(&st);
  std::vector<unsigned char> buf(1 << 17);
  int64_t total = 0;
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoFail("read");
    if (n == 0) break;
    crypto_hash_sha256_update(&st, buf.data(), static_cast<size_t>(n));
    total += n;
  }
  unsigned char out[crypto_hash_sha256_BYTES];
  crypto_hash_sha256_final(&st, out);
  return std::make_pair(
      "sha256:" + HexEncode(std::string_view(reinterpret_cast<char*>(out), sizeof out)), total);
}

bool IsSha256Digest(std::string_view d) {
  if (d.size() != 71 || d.substr(0, 7) != "sha256:") return false;
  for (char c : d.substr(7)) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace internal

Result<std::string> Sha256File(const std::string& path) {
  auto fd = sys::Open(path, O_RDONLY);
  if (!fd) return tl::unexpected(fd.error());
  auto r = internal::Sha256Fd(fd->get());
  if (!r) return tl::unexpected(std::move(r.error()).Wrap(path));
  return r->first;
}

std::string Sha256Bytes(std::string_view data) {
  unsigned char out[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(out, reinterpret_cast<const unsigned char*>(data.data()), data.size());
  return "sha256:" + HexEncode(std::string_view(reinterpret_cast<char*>(out), sizeof out));
}

}  // namespace space::tmpl
