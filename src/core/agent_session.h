// core/agent_session: the host end of one sandbox's agent channel.
//
// An AgentSession owns a connected unix socket, served by the process's AgentHub (a few
// threads for all sessions, no thread of its own). Output and exit frames are handed to
// the Handlers on a hub thread, one frame at a time and in the order they arrived; the
// session acknowledges output with the durable size the handler returns (the credit return
// of docs/agent-protocol.md). Call() sends a request and blocks for its response.
// Thread-safe. Close() (or the destructor) shuts the socket and waits for a handler that is
// running on another thread; handlers are never called after it. Close() from inside a
// handler returns at once (no further handler is called).
//
// Output is handed to on_output in pieces as it arrives (the offset-based contract makes a
// piece of a frame as good as a frame): the output of a large STDOUT/STDERR frame is left
// in the socket until the handler moves it into its log (store::OutputBytes: splice(2),
// no copy through user space), never assembled in memory.
//
// Memory: an idle session holds no read buffer (hub threads read into their own); any
// other frame that arrives in pieces is assembled in a buffer of its size, at most 4 MiB +
// 9 bytes.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "agent/protocol.h"
#include "core/agent_hub.h"
#include "common/common.h"
#include "common/json.h"
#include "store/store.h"
#include "sys/sys.h"

namespace space::core {

class AgentSession : public std::enable_shared_from_this<AgentSession>, public AgentHub::Conn {
 public:
  struct Handlers {
    // Stores output that starts at stream position `offset`, consuming what it stores from
    // `bytes` (the session drops the rest); returns the stream's durable size (sent back as
    // the ACK offset).
    std::function<Result<uint64_t>(uint32_t stream, store::OutputStream s, uint64_t offset,
                                   store::OutputBytes& bytes)> on_output;
    // Records a command's end durably; the session then ACKs the exit. kResourceExhausted:
    // not yet (its output is held); the exit stays unacknowledged and the agent sends it
    // again after the next HELLO.
    std::function<Status(uint32_t stream, const Json& exit)> on_exit;
    // Every HELLO after the first (optional): the frames that follow it are the agent's
    // retransmission.
    std::function<void(const Json& hello)> on_hello;
    // The connection ended (agent gone, or a protocol error). Not called after Close().
    std::function<void(const Error& why)> on_disconnect;
  };

  // Connects to the agent's socket, retrying while it does not exist yet, and waits for
  // its HELLO, all within timeout_ms. Returns the session and the HELLO JSON.
  [[nodiscard]] static Result<std::shared_ptr<AgentSession>> Connect(const std::string& socket_path,
                                                                     Handlers handlers,
                                                                     int64_t timeout_ms,
                                                                     Json* hello);
  ~AgentSession();

  // Sends a request and waits for its response; an agent error response becomes an Error.
  [[nodiscard]] Result<agent::Message> Call(const Json& request, std::string_view body,
                                            int64_t timeout_ms);
  // As Call, but runs `meanwhile` after the request is sent and before waiting for the
  // answer (overlapping, say, an fsync with the agent's work). Its Status is in *meanwhile_st.
  [[nodiscard]] Result<agent::Message> Call(const Json& request, std::string_view body,
                                            int64_t timeout_ms,
                                            const std::function<Status()>& meanwhile,
                                            Status* meanwhile_st);
  // Sends stdin bytes (chunked) to a command; eof closes its stdin afterwards.
  [[nodiscard]] Status SendStdin(uint32_t stream, std::string_view bytes, bool eof);
  // Asks the agent for a fresh HELLO: it retransmits everything unacknowledged, and
  // every pending EXIT (how held output resumes, guards.cc).
  [[nodiscard]] Status RequestHello();
  void Close();
  bool connected() const { return connected_.load(); }

 private:
  AgentSession(sys::UniqueFd fd, Handlers handlers);
  void OnReady(char* scratch, size_t size) override;
  // Handles the frames in `in` (and the one in progress in decoder_); false with *why when
  // the connection must end.
  bool Consume(std::string_view in, Error* why);
  // The connection ended (agent gone or a protocol error): wakes callers, tells the owner.
  void Lost(const Error& why);
  Status HandleFrame(const agent::FrameView& f);
  // Gives one piece of output to on_output and notes the ACK it earns.
  Status HandleData(uint32_t stream, store::OutputStream s, uint64_t offset,
                    store::OutputBytes& bytes);
  // If `start` (the unread input) begins a STDOUT/STDERR frame whose output is mostly still
  // to come, hands over the output it holds and leaves the rest in the socket (spliced_):
  // true. The caller then drops `start`.
  Result<bool> MaybeSplice(std::string_view start);
  // Hands over the next piece of the frame in spliced_ that is in the socket; false with
  // *why when the connection must end.
  bool ContinueSplice(Error* why);
  Status Send(const std::string& wire);
  void FailPending(const Error& e);
  // Sends the pending ACKs; unless `force`, only when they are due (see the .cc).
  Status FlushAcks(bool force);
  bool Closing() {
    std::lock_guard l(state_mu_);
    return closing_;
  }

  sys::UniqueFd fd_;
  Handlers handlers_;
  uint64_t hub_key_ = 0;
  std::atomic<bool> connected_{true};
  std::mutex write_mu_;

  // Who runs OnReady now (Close waits for it unless it is that very thread).
  std::mutex state_mu_;
  std::condition_variable state_cv_;
  bool closing_ = false;
  bool busy_ = false;
  std::thread::id busy_thread_;

  std::mutex mu_;
  std::condition_variable cv_;
  uint32_t next_request_ = 1;
  std::map<uint32_t, std::optional<Result<agent::Message>>> pending_;
  std::optional<Json> hello_;
  // Hub (OnReady) only: the frame being assembled, and the highest durable offset per
  // (stream, fd) not yet ACKed.
  agent::FrameDecoder decoder_;
  std::map<std::pair<uint32_t, uint8_t>, uint64_t> pending_acks_;
  std::map<std::pair<uint32_t, uint8_t>, uint64_t> acks_sent_;  // the last ACK of each
  // A STDOUT/STDERR frame whose output is (partly) still in the socket: `left` bytes of it,
  // which start at stream position `offset`.
  struct Spliced {
    uint32_t stream = 0;
    store::OutputStream s = store::OutputStream::kStdout;
    uint64_t offset = 0;
    size_t left = 0;
  };
  Spliced spliced_;
  // After a spliced frame the next read takes only the next frame's header (and offset), so
  // the output of a stream of large frames never lands in memory.
  bool headers_only_ = false;
};

}  // namespace space::core
