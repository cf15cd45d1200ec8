#include "daemon/datadir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <string>

namespace space::daemon {

Result<sys::UniqueFd> LockDataDir(const std::string& data_dir) {
  const std::string path = data_dir + "/spaced.lock";
  sys::UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (!fd) return ErrnoFail("open " + path);
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return ErrnoFail("flock " + path);
    // The holder writes its pid right after taking the lock; a reader racing that write
    // may see nothing yet.
    std::string holder;
    char buf[32];
    ssize_t n = ::pread(fd.get(), buf, sizeof buf - 1, 0);
    if (n > 0) {
      holder.assign(buf, static_cast<size_t>(n));
      while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    }
    return Fail(Errc::kConflict, "data dir " + data_dir + " is in use by another spaced (pid " +
                                     (holder.empty() ? std::string("unknown") : holder) +
                                     "); stop it first or use another --data-dir");
  }
  // Overwrite, then cut: on a full disk the file's existing block takes the new pid.
  std::string pid = std::to_string(::getpid()) + "\n";
  if (::pwrite(fd.get(), pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size()))
    return ErrnoFail("write " + path);
  if (::ftruncate(fd.get(), static_cast<off_t>(pid.size())) != 0) return ErrnoFail("truncate " + path);
  return fd;
}

}  // namespace space::daemon
