// agent/out_queue: the bytes space-agent has to write to its host connection, and the
// blocks of command output they are made of. Private to space-agent; single-threaded (the
// agent's loop).
//
// A command's output is read from its pipe straight into an OutBlock and stays there, never
// copied in user space, until the host acknowledges it (docs/agent-protocol.md, "Durable
// output"): the command's unacknowledged chunks and the STDOUT/STDERR frames queued for the
// socket both hold references to the block, and a queued data frame is just its header plus
// a range of a block. A block is filled front to back, once; bytes in it never change while
// anyone holds it.
//
// A large payload sent for the first time is not copied into the socket either: vmsplice(2)
// hands the block's pages to a pipe and splice(2) moves them from there into the socket,
// where they stay until the host has read them. That is safe because a block is reused only
// after the host has acknowledged all of its bytes, and a host can acknowledge bytes it has
// never been sent only once it has read them. A retransmission is different (the host may
// have stored those bytes from an earlier connection and acknowledge them before reading
// this one's frames), so retransmitted payloads, small ones, and every payload where the
// connection cannot take spliced pages are copied, gathered with writev(2).
//
// Output that piles up in a command's pipe (64 KiB or more at once, see agent_internal.h)
// is not read at all: tee(2) links its pages into a keep pipe, which holds them until the
// host acknowledges them, and splice(2) then moves the same pages from the command's pipe
// into the socket. Neither copies a byte; the pages the command wrote are the ones the
// host reads. The command's pipe is shared as a PipeSource between the Output and the
// frames queued from it: a frame takes (claims) the bytes at the pipe's front, and until
// every claimed and teed byte has left the pipe nothing else reads it. Retransmissions of
// those bytes are copied out of the keep pipe (tee into a scratch pipe, then read).
//
// Blocks come from a BlockPool, which keeps released blocks for reuse: a fresh block's
// pages cost a page fault and zeroing each (as much CPU as copying the bytes once more).
// The pool gives its blocks back to the system once it has been unused for a second, so an
// idle agent holds none (many idle sandboxes each run an agent).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "agent/protocol.h"
#include "sys/sys.h"

namespace space::agent {

struct OutBlock {
  static constexpr size_t kCapacity = kMaxDataChunk;  // one block never spans two frames
  std::unique_ptr<char[]> data{new char[kCapacity]};  // not zero-filled: untouched pages cost nothing
  size_t used = 0;                                    // bytes [0, used) are output
  size_t room() const { return kCapacity - used; }
};
using BlockRef = std::shared_ptr<OutBlock>;

// A command's output pipe as a source of frames: bytes [head, head + claimed) at its front
// belong to queued frames (OutQueue splices them into the connection and advances head);
// the agent tees more only once everything teed has left it.
struct PipeSource {
  sys::UniqueFd fd;  // a dup of the pipe's read end: queued frames outlive a cut pipe
  uint64_t head = 0;     // stream offset of the pipe's first byte
  uint64_t claimed = 0;  // bytes at the front that queued frames will splice
  bool release = false;  // the Output is done with the pipe: close fd once nothing is claimed
  void MaybeRelease() {
    if (release && claimed == 0) fd.Reset();
  }
};
using PipeSourceRef = std::shared_ptr<PipeSource>;

class BlockPool {
 public:
  static constexpr int64_t kIdleNs = 1'000'000'000;
  BlockPool();
  // An empty block: a pooled one if any, else a new one. Released (its last reference
  // dropped) it returns to the pool.
  BlockRef Get(int64_t now_ns);
  // Frees the pooled blocks once none was taken for kIdleNs; true if it freed any.
  bool TrimIfIdle(int64_t now_ns);
  // When TrimIfIdle has something to do; 0 when the pool is empty.
  int64_t NextTrimNs() const;
  size_t pooled() const { return state_->free.size(); }

 private:
  struct State {
    std::vector<std::unique_ptr<OutBlock>> free;
    int64_t last_get_ns = 0;
  };
  // Shared with the blocks' deleters, so a block released after the pool is gone is freed.
  std::shared_ptr<State> state_;
};

class OutQueue {
 public:
  // Appends a whole frame (control frames: HELLO, RESPONSE, EXIT).
  void PushFrame(FrameType type, uint32_t stream, std::string_view payload);
  // Appends a STDOUT/STDERR frame of block bytes [begin, begin + len) at stream `offset`,
  // without copying them; `may_splice` lets a large one be spliced (bytes sent for the
  // first time; see the file comment).
  void PushData(FrameType type, uint32_t stream, uint64_t offset, BlockRef block, size_t begin,
                size_t len, bool may_splice);
  // Appends a STDOUT/STDERR frame of the `len` bytes at the front of `src` (after those
  // already claimed), which are spliced into the connection; claims them.
  void PushPipeData(FrameType type, uint32_t stream, uint64_t offset, PipeSourceRef src,
                    size_t len);
  // Bytes queued and not yet written.
  size_t pending() const { return pending_; }
  // Drops everything (the connection is gone).
  void Clear();
  // Drops every frame not begun; a frame partly written stays, so the stream remains
  // well-formed once it is finished.
  void DropUnstarted();
  // Writes as much as `fd` takes without blocking. Returns 0, or the errno of a failed
  // write (the connection is then unusable); EAGAIN is not an error.
  int Flush(int fd);
  // Payloads at least this large are spliced (above); smaller ones are copied.
  static constexpr size_t kSpliceMin = 64u << 10;
  // Whether payloads may be spliced into the connection at all: the agent allows it on
  // sockets only (a microVM's serial port is written with writev).
  void AllowSplice(bool allow) { splice_ok_ = allow; }
  // Whether payloads are spliced into this connection (allowed, and never refused so far).
  bool splicing() const { return splice_ok_; }
  // Closes the splice pipe unless it holds bytes (when output has gone quiet): pipe buffers
  // count against a per-user limit that all sandboxes' processes share on the host (their
  // root is one uid there), and past it every new pipe gets two pages.
  void ReleasePipe();

 private:
  struct Item {
    std::string head;  // a whole control frame, or a data frame's header
    BlockRef block;    // a data frame's payload: block->data[begin, begin + len), or
    PipeSourceRef src;  // ... the first len bytes of src that the frames before it leave
    size_t begin = 0, len = 0;
    bool may_splice = false;
    size_t size() const { return head.size() + len; }
  };
  void Consume(size_t n);
  bool Spliced(const Item& it) const {
    return it.src || (splice_ok_ && it.may_splice && it.len >= kSpliceMin);
  }
  // Gives back the claim of an item dropped unwritten (its payload after `written` bytes).
  static void Unclaim(Item& it, size_t written);
  // Splices the front item's payload (its header is written) from its PipeSource; 0, EAGAIN
  // while the socket is full, or another errno for a broken connection. A connection that
  // takes no spliced pages gets the payload copied instead (read from the pipe).
  int SpliceFromSource(int fd);
  // Moves the front item's payload (its header is written) through the pipe; 0, EAGAIN
  // while the socket is full, another errno for a broken connection, or -1 when splicing
  // does not work here (then it is not tried again).
  int SplicePayload(int fd);
  void EmptyPipe();

  std::deque<Item> items_;
  size_t pos_ = 0;  // bytes of items_.front() already written to the connection
  size_t pending_ = 0;
  // The pipe between vmsplice and splice, made on first use; it holds in_pipe_ bytes of
  // the front item's payload (the ones after pos_).
  sys::UniqueFd pipe_r_, pipe_w_;
  size_t in_pipe_ = 0;
  bool splice_ok_ = false;  // allowed, and not refused by the kernel (or gVisor) so far
};

}  // namespace space::agent
