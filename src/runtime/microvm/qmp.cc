#include "runtime/microvm/qmp.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

namespace space::runtime::microvm {

Result<QmpClient> QmpClient::Connect(const std::string& socket_path, int64_t timeout_ms) {
  sockaddr_un addr{};
  if (socket_path.size() >= sizeof addr.sun_path)
    return Fail(Errc::kInvalidArgument, "QMP socket path too long: " + socket_path);
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  const int64_t deadline = MonotonicNanos() + timeout_ms * 1'000'000;
  QmpClient c;
  for (;;) {
    sys::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) return ErrnoFail("socket");
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
      c.fd_ = std::move(fd);
      break;
    }
    if (MonotonicNanos() > deadline) return ErrnoFail("connect to QMP " + socket_path);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  auto greeting = c.ReadMessage(deadline);
  if (!greeting) return tl::unexpected(greeting.error());
  if (!JsonField(*greeting, "QMP")) return Fail(Errc::kInternal, "QMP: unexpected greeting");
  SPACE_TRY(c.Execute("qmp_capabilities", Json(), timeout_ms));
  return c;
}

Status QmpClient::SendLine(const std::string& line, int fd) {
  std::string data = line + "\n";
  size_t off = 0;
  while (off < data.size()) {
    iovec iov{data.data() + off, data.size() - off};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char ctrl[CMSG_SPACE(sizeof(int))];
    if (fd >= 0 && off == 0) {
      msg.msg_control = ctrl;
      msg.msg_controllen = sizeof ctrl;
      cmsghdr* cm = CMSG_FIRSTHDR(&msg);
      cm->cmsg_level = SOL_SOCKET;
      cm->cmsg_type = SCM_RIGHTS;
      cm->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(cm), &fd, sizeof fd);
    }
    ssize_t n = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoFail("QMP write");
    off += static_cast<size_t>(n);
  }
  return Ok();
}

Result<Json> QmpClient::ReadMessage(int64_t deadline_ns) {
  for (;;) {
    size_t nl = buf_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      auto j = ParseJson(line);
      if (!j || !j->is_object()) return Fail(Errc::kInternal, "QMP: malformed message");
      return *j;
    }
    int64_t left_ms = (deadline_ns - MonotonicNanos()) / 1'000'000;
    if (left_ms <= 0) return Fail(Errc::kDeadlineExceeded, "QMP: no answer from QEMU in time");
    pollfd p{fd_.get(), POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left_ms, 60000)));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return ErrnoFail("QMP poll");
    if (r == 0) continue;
    char chunk[65536];
    ssize_t n = ::read(fd_.get(), chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Fail(Errc::kUnavailable, "QEMU closed its QMP connection (it exited)");
    buf_.append(chunk, static_cast<size_t>(n));
  }
}

Result<Json> QmpClient::AwaitReturn(const std::string& what, int64_t timeout_ms) {
  const int64_t deadline = MonotonicNanos() + timeout_ms * 1'000'000;
  for (;;) {
    auto m = ReadMessage(deadline);
    if (!m) return tl::unexpected(std::move(m.error()).Wrap(what));
    if (JsonField(*m, "event")) {
      events_.push_back(std::move(*m));
      if (events_.size() > 256) events_.pop_front();
      continue;
    }
    if (const Json* e = JsonField(*m, "error")) {
      return Fail(Errc::kInternal, what + ": " + JsonStringOr(*e, "desc", "QMP error"));
    }
    if (const Json* r = JsonField(*m, "return")) return *r;
  }
}

Result<Json> QmpClient::Execute(const std::string& command, const Json& args, int64_t timeout_ms) {
  Json msg = {{"execute", command}};
  if (!args.is_null()) msg["arguments"] = args;
  SPACE_TRY(SendLine(msg.dump()));
  return AwaitReturn(command, timeout_ms);
}

Status QmpClient::SendFd(const std::string& name, int fd, int64_t timeout_ms) {
  Json msg = {{"execute", "getfd"}, {"arguments", {{"fdname", name}}}};
  SPACE_TRY(SendLine(msg.dump(), fd));
  auto r = AwaitReturn("getfd", timeout_ms);
  if (!r) return tl::unexpected(r.error());
  return Ok();
}

Result<Json> QmpClient::WaitEvent(const std::string& name, int64_t timeout_ms) {
  const int64_t deadline = MonotonicNanos() + timeout_ms * 1'000'000;
  for (;;) {
    for (auto it = events_.begin(); it != events_.end(); ++it) {
      if (JsonStringOr(*it, "event", "") == name) {
        Json data = JsonField(*it, "data") ? (*it)["data"] : Json::object();
        events_.erase(it);
        return data;
      }
    }
    auto m = ReadMessage(deadline);
    if (!m) return tl::unexpected(std::move(m.error()).Wrap("waiting for " + name));
    if (JsonField(*m, "event")) events_.push_back(std::move(*m));
  }
}

}  // namespace space::runtime::microvm
