// OutputBytes: output on its way into a log, in memory or still queued on the agent's
// socket. See store.h for the contract.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "store/store.h"

namespace space::store {
namespace {

// A socket's bytes reach a file through a pipe: splice(2) moves the socket buffer's pages
// into the pipe and copies them from there into the page cache, the one copy an output
// byte costs on this side. One pipe per thread (the agent hub's few threads); it is empty
// between calls. 1 MiB: an agent's frame in one go.
struct SplicePipe {
  sys::UniqueFd r, w;
  SplicePipe() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return;  // then through memory
    r.Reset(fds[0]);
    w.Reset(fds[1]);
    (void)::fcntl(fds[1], F_SETPIPE_SZ, 1 << 20);  // a smaller pipe just takes more rounds
  }
};

SplicePipe& ThreadPipe() {
  thread_local SplicePipe pipe;
  return pipe;
}

// Reads exactly n bytes that are already queued on `fd`.
Status RecvQueued(int fd, char* buf, size_t n) {
  while (n > 0) {
    ssize_t r = ::recv(fd, buf, n, MSG_DONTWAIT);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return Fail(Errc::kUnavailable, "agent connection closed");
    if (r < 0) return ErrnoFail("read agent output");
    buf += r;
    n -= static_cast<size_t>(r);
  }
  return Ok();
}

Status PwriteAll(int fd, const char* p, size_t n, uint64_t at) {
  while (n > 0) {
    ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(at));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return ErrnoFail("write");
    if (w == 0) return ErrnoFail("write", ENOSPC);
    p += w;
    at += static_cast<uint64_t>(w);
    n -= static_cast<size_t>(w);
  }
  return Ok();
}

// Empties the thread's pipe after a failed write into a file (its bytes are given up).
void DrainPipe(SplicePipe& p) {
  char buf[4096];
  while (::read(p.r.get(), buf, sizeof buf) > 0) {
  }
}

}  // namespace

Result<std::string_view> OutputBytes::View() {
  if (socket_ >= 0) {
    read_.resize(left());
    SPACE_TRY(RecvQueued(socket_, read_.data(), read_.size()));
    memory_ = read_;
    mem_base_ = pos_;
    socket_ = -1;
  }
  return memory_.substr(pos_ - mem_base_);
}

Status OutputBytes::Skip(size_t n) {
  n = std::min(n, left());
  if (socket_ < 0) {
    pos_ += n;
    return Ok();
  }
  char buf[16 << 10];
  while (n > 0) {
    size_t k = std::min(n, sizeof buf);
    SPACE_TRY(RecvQueued(socket_, buf, k));
    pos_ += k;
    n -= k;
  }
  return Ok();
}

Status OutputBytes::WriteTo(int fd, uint64_t at, size_t n) {
  n = std::min(n, left());
  if (socket_ < 0) {
    auto st = PwriteAll(fd, memory_.data() + (pos_ - mem_base_), n, at);
    pos_ += n;
    return st;
  }
  SplicePipe& p = ThreadPipe();
  if (!p.r) {
    // No pipe (fd limit): through memory, as a read and a write.
    auto v = View();
    if (!v) return tl::unexpected(v.error());
    return WriteTo(fd, at, n);
  }
  loff_t out = static_cast<loff_t>(at);
  while (n > 0) {
    ssize_t in = ::splice(socket_, nullptr, p.w.get(), nullptr, n, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (in < 0 && errno == EINTR) continue;
    if (in == 0) return Fail(Errc::kUnavailable, "agent connection closed");
    if (in < 0) return ErrnoFail("splice agent output");
    pos_ += static_cast<size_t>(in);
    n -= static_cast<size_t>(in);
    for (size_t queued = static_cast<size_t>(in); queued > 0;) {
      ssize_t w = ::splice(p.r.get(), nullptr, fd, &out, queued, SPLICE_F_MOVE);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        int err = w == 0 ? ENOSPC : errno;
        DrainPipe(p);
        return ErrnoFail("write", err);
      }
      queued -= static_cast<size_t>(w);
    }
  }
  return Ok();
}

}  // namespace space::store
