// core/agent_hub: a few threads serve every agent connection of the process (issue 17).
//
// One epoll set holds all connections, each armed EPOLLONESHOT: when its fd is readable,
// exactly one of the hub's threads takes it, calls its OnReady, and the connection re-arms
// itself when it is done. So a connection's events are handled one at a time, in order,
// while other connections go on being served by the other threads: a connection whose
// handler blocks (a slow disk under on_output) holds one thread, not the hub. The hub's
// threads are made on first use and live as long as the process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace space::core {

class AgentHub {
 public:
  class Conn {
   public:
    virtual ~Conn() = default;
    // On a hub thread, when the fd is readable or hung up; never twice at once for one
    // connection. `scratch` (the thread's, kScratchSize bytes) is free to use meanwhile.
    // The connection calls Rearm to hear about its fd again, or Remove.
    virtual void OnReady(char* scratch, size_t size) = 0;
  };
  // Small: a frame larger than what is left of a read goes on into the session's own
  // buffer (AgentSession reads its rest there directly), so a big scratch would only
  // hold resident pages once a large read had touched them (4 hub threads x 1 MiB was
  // most of what spaced kept after deletes, issue 17).
  static constexpr size_t kScratchSize = 64u << 10;

  // The process's hub (threads: max(4, 2 x cores), at most 16).
  static AgentHub& Get();
  explicit AgentHub(int threads);
  AgentHub(const AgentHub&) = delete;
  AgentHub& operator=(const AgentHub&) = delete;

  // Watches fd for `conn` (held weakly: an event for a connection that is gone is dropped).
  // Stores the key Rearm and Remove take in *key before the first event can come (OnReady
  // may run before Add returns); false if the fd cannot be watched (errno set, *key 0).
  bool Add(int fd, std::weak_ptr<Conn> conn, uint64_t* key);
  // Watch the fd again after an OnReady (EPOLLONESHOT disarmed it).
  void Rearm(int fd, uint64_t key);
  // Stops watching (idempotent). An OnReady already under way may still run to its end.
  void Remove(int fd, uint64_t key);
  int threads() const { return static_cast<int>(threads_.size()); }
  size_t connections() const;

 private:
  void Loop();

  int epfd_ = -1;
  mutable std::mutex mu_;
  uint64_t next_key_ = 1;
  std::unordered_map<uint64_t, std::weak_ptr<Conn>> conns_;
  std::vector<std::thread> threads_;
};

}  // namespace space::core
