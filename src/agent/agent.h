// agent/agent: the event loop of space-agent, the in-sandbox end of docs/agent-protocol.md.
//
// One Agent owns the listening socket (or the pre-connected fd), at most one host
// connection, a signalfd and every running command's pipes, all multiplexed by one
// epoll instance on one thread. It keeps each command's unacknowledged output in memory
// (bounded by the window) until the host ACKs it and retransmits it on every new
// connection. Once a command's main process has exited, pipes that a leftover
// background process keeps open are closed after a short grace period, so the command
// still finishes; pending stdin is capped (both in docs/agent-protocol.md). Run() returns
// only on SIGTERM (after the commands are gone) or on a fatal setup error. Not
// thread-safe: all methods run on the loop thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

#include "agent/files.h"
#include "agent/out_queue.h"
#include "agent/protocol.h"
#include "common/common.h"
#include "sys/sys.h"

namespace space::agent {

inline constexpr char kAgentVersion[] = "space-agent 0.1";

// After a command's main process is reaped, its output pipes get this long to reach EOF
// (extended by output read meanwhile, up to kOutputLingerMaxNs in all); then the agent
// closes them and reports the exit. Time spent not reading a pipe because of
// backpressure does not count.
inline constexpr int64_t kOutputLingerNs = 250'000'000;
inline constexpr int64_t kOutputLingerMaxNs = 2'000'000'000;

struct AgentOptions {
  std::string listen_path;          // unix socket to listen on, or
  int fd = -1;                      // an already connected stream (serial port)
  std::string root = "/";           // resolution root of file operations
  uint64_t window = kOutputWindow;  // unacknowledged output bytes per fd
  bool is_init = false;             // PID 1: forwards SIGINT/SIGHUP too
  // --checkpoint-signals (gVisor: a bound host socket cannot be checkpointed): SIGUSR1
  // closes the listening socket (and the connection) and removes its file, SIGUSR2 binds
  // it again. Neither is forwarded to commands.
  bool checkpoint_signals = false;
};

class Agent {
 public:
  // Sets up the socket (stale socket file removed, mode 0600), epoll, and the signalfd.
  // The caller must already have blocked SIGCHLD, SIGTERM, SIGINT and SIGHUP (and, with
  // checkpoint_signals, SIGUSR1 and SIGUSR2).
  [[nodiscard]] static Result<std::unique_ptr<Agent>> Create(const AgentOptions& opts);
  ~Agent();

  // Runs the loop; returns the process exit code.
  int Run();

 private:
  struct Command;
  struct Output;

  explicit Agent(const AgentOptions& opts, FileService files);

  // Connection.
  void Accept();
  Status Listen();
  void StartConnection();
  void SendHello();
  void DropConnection(const char* why);
  void ReadConnection();
  void HandleFrame(Frame& f);
  void Flush();
  void UpdateConnectionInterest();
  bool connected() const { return conn_live_; }
  size_t OutPending() const { return outq_.pending(); }
  void SendFrame(FrameType type, uint32_t stream, std::string_view payload);
  void Respond(uint32_t request, const Json& json, std::string_view body = {});
  void RespondError(uint32_t request, const Error& e);

  // Requests.
  void HandleRequest(uint32_t request, std::string_view payload);
  void StartExec(uint32_t request, const Json& req);
  void SignalOp(uint32_t request, const Json& req);
  void ResizeOp(uint32_t request, const Json& req);
  void ForwardOp(uint32_t request, const Json& req);

  // Commands.
  void OnExecStatus(Command& c);
  void ReadOutput(Command& c, int index);
  // Tees what waits in the pipe into a new keep-pipe chunk when it is worth it; true if it
  // did (then the pipe is not read until those bytes are spliced out).
  bool TeeOutput(Command& c, Output& o);
  // A copy of `n` bytes at stream offset `from` of the teed chunk whose bytes from stream
  // offset `offset` on are in keep pipe `keep`.
  Result<BlockRef> CopyKept(int keep, uint64_t offset, uint64_t from, size_t n);
  // Closes an output's pipe (EOF, or cut after lingering).
  void ClosePipe(Output& o);
  void StartLinger(Command& c);
  void CheckLinger(Command& c, int64_t now);
  void CutOutput(Command& c, int index, int64_t now);
  void OnAck(uint32_t stream, std::string_view payload);
  void OnStdin(uint32_t stream, std::string_view payload);
  void FlushStdin(Command& c);
  void CloseStdin(Command& c);
  bool Reap();  // false when the agent has no children left
  void OnSignals();
  void CheckDeadlines();
  bool SignalCommand(Command& c, int sig);
  void Pump();
  void UpdatePipeInterest();
  void SetInterest(int fd, uint64_t tag, uint32_t events, uint32_t* current);
  bool Finished(const Command& c) const;
  void Forget(uint32_t stream);
  Json Hello() const;
  int NextTimeoutMs() const;

  AgentOptions opts_;
  FileService files_;
  sys::UniqueFd epoll_, listen_, signal_fd_;
  // The connection: in listen mode a fresh accepted socket each time; in --fd mode the
  // same fd, "live" again once the peer reconnects (polled while it reports hang-up).
  sys::UniqueFd conn_;
  bool conn_live_ = false;
  uint32_t conn_gen_ = 0;  // tags epoll events of the connection
  uint32_t conn_events_ = 0;
  FrameDecoder decoder_;
  BlockPool blocks_;  // of command output (agent/out_queue.h)
  OutQueue outq_;    // frames not yet written to the connection
  bool tee_ok_ = true;  // tee(2) works here (gVisor may refuse it)
  std::unique_ptr<char[]> scratch_;  // read buffer of the connection, kScratchSize bytes

  std::map<uint32_t, std::unique_ptr<Command>> commands_;  // by stream
  std::unordered_map<pid_t, uint32_t> pids_;               // unreaped main pids
  struct Forward {
    pid_t pid;
    int listen_port;
    std::string address;
  };
  std::map<int, Forward> forwards_;  // relays by loopback port (agent/forward.h)
  bool shutting_down_ = false;
  int64_t shutdown_deadline_ns_ = 0;
  bool shutdown_killed_ = false;
  int64_t next_fd_poll_ns_ = 0;
};

}  // namespace space::agent
