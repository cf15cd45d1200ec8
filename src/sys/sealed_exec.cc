// SealedExecutable (sys.h): an executable copied into a sealed memfd.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sys/sys.h"

#ifndef MFD_EXEC
#define MFD_EXEC 0x0010U  // linux 6.3: say the copy is meant to be executed
#endif

namespace space::sys {

namespace {

// The seals runc and crun look for ("a fully-sealed memfd"): exactly these, no more.
constexpr int kSeals = F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE;

Result<UniqueFd> SealedCopy(int src, off_t size, const std::string& name) {
  int fd = ::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_EXEC);
  if (fd < 0 && errno == EINVAL) fd = ::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return ErrnoFail("memfd_create " + name);
  UniqueFd out(fd);
  off_t at = 0;
  while (at < size) {
    ssize_t n = ::sendfile(out.get(), src, &at, static_cast<size_t>(size - at));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoFail("copy " + name + " into a memfd");
    if (n == 0) return Fail(Errc::kInternal, name + " shrank while it was copied");
  }
  if (::fchmod(out.get(), 0555) != 0) return ErrnoFail("fchmod memfd " + name);
  if (::fcntl(out.get(), F_ADD_SEALS, kSeals) != 0) return ErrnoFail("seal memfd " + name);
  return out;
}

}  // namespace

SealedExecutable::Key SealedExecutable::KeyOf(const struct stat& st) {
  return Key{st.st_dev, st.st_ino, st.st_size, st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec,
             st.st_ctim.tv_sec * 1000000000ll + st.st_ctim.tv_nsec};
}

Result<std::unique_ptr<SealedExecutable>> SealedExecutable::Create(const std::string& path) {
  std::unique_ptr<SealedExecutable> se(new SealedExecutable(path));
  std::lock_guard l(se->mu_);
  SPACE_TRY(se->Refresh());
  return se;
}

Result<std::shared_ptr<const UniqueFd>> SealedExecutable::Current() {
  std::lock_guard l(mu_);
  SPACE_TRY(Refresh());
  return fd_;
}

Status SealedExecutable::Refresh() {
  struct stat st;
  if (::stat(path_.c_str(), &st) != 0) return ErrnoFail("stat " + path_);
  if (fd_ && KeyOf(st) == key_) return Ok();
  if (!S_ISREG(st.st_mode)) return Fail(Errc::kInvalidArgument, path_ + " is not a file");
  auto src = Open(path_, O_RDONLY);
  if (!src) return tl::unexpected(src.error());
  struct stat now;
  if (::fstat(src->get(), &now) != 0) return ErrnoFail("fstat " + path_);
  std::string name = path_.substr(path_.rfind('/') + 1);
  auto copy = SealedCopy(src->get(), now.st_size, name);
  if (!copy) return tl::unexpected(copy.error());
  // Keyed by what was opened: a file replaced between stat and open is copied again next time.
  key_ = KeyOf(now);
  fd_ = std::make_shared<const UniqueFd>(std::move(*copy));
  return Ok();
}

}  // namespace space::sys
