// agent/agent_internal.h: what agent.cc (the loop, the connection, requests, signals) and
// agent_commands.cc (commands: exec, output, lingering, stdin, reaping) share. Private to
// space-agent.
#pragma once

#include <sys/epoll.h>
#include <time.h>

#include <cstdint>
#include <deque>
#include <string>

#include "agent/agent.h"
#include "agent/exec.h"
#include "agent/out_queue.h"
#include "common/json.h"

namespace space::agent {

// What an epoll event belongs to: the kind in the high half of data.u64, a stream id (or
// the connection generation) in the low half. Lookups by stream make stale events for
// fds closed earlier in the same batch harmless.
enum Kind : uint32_t {
  kListenTag = 1,
  kConnTag,
  kSignalTag,
  kStdoutTag,  // kStdoutTag + 1 is stderr
  kStderrTag,
  kStdinTag,
  kExecStatusTag,
};
inline std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

inline uint64_t Tag(Kind k, uint32_t id) { return (static_cast<uint64_t>(k) << 32) | id; }

// Encoded frames waiting for the socket: above this the agent stops turning buffered
// output into frames (and stops reading pipes) until the host catches up.
inline constexpr size_t kOutHighWater = 2u << 20;
inline constexpr size_t kScratchSize = kMaxDataChunk;
// A pipe read goes into the last block while it has at least this much room, else into a
// new block: reads stay large, and a trickle of small output shares one block.
inline constexpr size_t kMinBlockRead = 64u << 10;
// Output at least this large waiting in a command's pipe is teed and spliced, not read
// (agent/out_queue.h); smaller output is read, and coalesced.
inline constexpr size_t kTeeMin = 64u << 10;
// ... into at most this many keep pipes per output at once (each is an fd of the agent's;
// beyond it output is read): 16 pieces of up to 1 MiB cover the 8 MiB window.
inline constexpr int kMaxKeepPipes = 16;
inline constexpr int64_t kCoalesceNs = 2'000'000;      // hold small output at most this long
inline constexpr uint64_t kCoalesceBytes = 256 << 10;  // ... and only while less than this
inline constexpr int64_t kShutdownGraceNs = 5'000'000'000;
inline constexpr int64_t kFdPollIntervalNs = 200'000'000;

inline int64_t RealtimeNanos() {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

struct Agent::Output {
  // Output bytes [offset, end()): consecutive chunks, the last one ending at `produced`.
  // A chunk read from the pipe is in a block (only the last one grows, while its block has
  // room); a teed one is the `len` bytes in its keep pipe (read end; nothing reads it but
  // retransmissions, through a tee).
  struct Chunk {
    uint64_t offset;
    BlockRef block;
    sys::UniqueFd keep;
    uint64_t len = 0;
    uint64_t end() const { return offset + (block ? block->used : len); }
  };
  sys::UniqueFd pipe;
  // The pipe as the source of spliced frames, made on the first tee (agent/out_queue.h).
  // While bytes teed from it are still in it (src->head < produced) the pipe is not read.
  PipeSourceRef src;
  int keep_pipes = 0;  // chunks with a keep pipe
  uint32_t events = 0;  // registered epoll interest; 0 = not registered
  bool eof = false;     // EOF seen, or the pipe was closed after lingering
  uint64_t produced = 0, acked = 0, sent = 0;
  // The end of everything ever queued for a host, on any connection. Bytes below it go out
  // again only as copies, never spliced (OutQueue): a host may acknowledge them before it has
  // read this connection's frames of them (it stored them from an earlier one), and the
  // acknowledgement lets their block be reused while the socket still refers to its pages.
  // Bytes sent for the first time can be acknowledged only once read.
  uint64_t sent_max = 0;
  // Lingering: the main process has exited, the pipe has not reached EOF yet. It is cut
  // at linger_deadline_ns (extended by output read, up to linger_limit_ns). While the
  // agent does not read it (backpressure) the clock stops: blocked_since_ns is set and
  // both deadlines move on by the time spent blocked.
  int64_t linger_deadline_ns = 0;  // 0 = not lingering
  int64_t linger_limit_ns = 0;
  int64_t blocked_since_ns = 0;
  // Coalescing (Nagle's rule): while output already sent is unacknowledged, small unsent
  // output is held for up to kCoalesceNs from when it was read (or until the ACK), so a
  // program writing in 4 KiB pieces is sent in large frames (fewer frames, ACKs and host
  // wake-ups). Output after a quiet spell is sent at once.
  int64_t unsent_since_ns = 0;  // 0 = nothing unsent
  std::deque<Chunk> chunks;  // [chunks.front().offset <= acked, produced)
};

struct Agent::Command {
  uint32_t stream = 0;
  std::string id;
  pid_t pid = -1;
  ExecRequest req;            // for error messages
  uint32_t exec_request = 0;  // the request answered once exec's outcome is known
  uint32_t exec_conn = 0;     // ... on the connection (generation) that carried it
  sys::UniqueFd exec_status;
  uint32_t exec_status_events = 0;
  bool started = false;  // exec succeeded
  bool exited = false;   // main process reaped
  // When the pipes began to linger (main process reaped and exec confirmed).
  int64_t linger_start_ns = 0;
  bool timed_out = false;
  bool exit_sent = false;  // EXIT sent on the current connection
  int exit_code = -1;
  int term_signal = 0;
  int64_t deadline_ns = 0;  // 0 = no timeout
  Output out[2];            // stdout, stderr
  sys::UniqueFd stdin_pipe;
  uint32_t stdin_events = 0;
  std::string stdin_buf;
  size_t stdin_pos = 0;
  bool stdin_eof = false;
  sys::UniqueFd pty_master;  // a pty command's terminal (for resizes); else invalid
};

}  // namespace space::agent
