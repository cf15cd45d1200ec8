#include "core/agent_hub.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include <spdlog/spdlog.h>

namespace space::core {

AgentHub& AgentHub::Get() {
  // Never destroyed: its threads serve connections until the process ends.
  static AgentHub* hub = [] {
    int n = static_cast<int>(std::thread::hardware_concurrency()) * 2;
    return new AgentHub(std::clamp(n, 4, 16));
  }();
  return *hub;
}

AgentHub::AgentHub(int threads) {
  epfd_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (epfd_ < 0) {
    spdlog::critical("agent hub: epoll_create1: {}", std::strerror(errno));
    std::abort();
  }
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

bool AgentHub::Add(int fd, std::weak_ptr<Conn> conn, uint64_t* key) {
  uint64_t k;
  {
    // Under mu_, which the hub thread takes before OnReady: it sees *key.
    std::lock_guard l(mu_);
    k = next_key_++;
    *key = k;
    conns_.emplace(k, std::move(conn));
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
  ev.data.u64 = k;
  if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    int e = errno;
    std::lock_guard l(mu_);
    conns_.erase(k);
    *key = 0;
    errno = e;
    return false;
  }
  return true;
}

void AgentHub::Rearm(int fd, uint64_t key) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
  ev.data.u64 = key;
  (void)::epoll_ctl(epfd_, EPOLL_CTL_MOD, fd, &ev);
}

void AgentHub::Remove(int fd, uint64_t key) {
  if (key == 0) return;
  (void)::epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, nullptr);  // ENOENT: removed already
  std::lock_guard l(mu_);
  conns_.erase(key);
}

size_t AgentHub::connections() const {
  std::lock_guard l(mu_);
  return conns_.size();
}

void AgentHub::Loop() {
  // The thread's read buffer: connections keep only the unfinished frame they hold.
  std::unique_ptr<char[]> scratch(new char[kScratchSize]);
  for (;;) {
    // One event at a time: a thread that is held up by one connection's handler has no
    // other connection's event waiting behind it.
    epoll_event ev;
    int n = ::epoll_wait(epfd_, &ev, 1, -1);
    if (n <= 0) continue;  // EINTR
    std::shared_ptr<Conn> c;
    {
      std::lock_guard l(mu_);
      auto it = conns_.find(ev.data.u64);
      if (it != conns_.end()) c = it->second.lock();
    }
    if (!c) continue;  // closed meanwhile; its fd is (being) removed
    c->OnReady(scratch.get(), kScratchSize);
    // The last reference may go here: the connection's destructor runs on this thread,
    // after OnReady has returned.
    c.reset();
  }
}

}  // namespace space::core
