#include "agent/out_queue.h"

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace space::agent {

BlockPool::BlockPool() : state_(std::make_shared<State>()) {}

BlockRef BlockPool::Get(int64_t now_ns) {
  state_->last_get_ns = now_ns;
  std::unique_ptr<OutBlock> b;
  if (!state_->free.empty()) {
    b = std::move(state_->free.back());
    state_->free.pop_back();
    b->used = 0;
  } else {
    b = std::make_unique<OutBlock>();
  }
  std::weak_ptr<State> pool = state_;
  return BlockRef(b.release(), [pool](OutBlock* p) {
    if (auto st = pool.lock()) {
      st->free.emplace_back(p);
    } else {
      delete p;
    }
  });
}

bool BlockPool::TrimIfIdle(int64_t now_ns) {
  if (state_->free.empty() || now_ns - state_->last_get_ns < kIdleNs) return false;
  std::vector<std::unique_ptr<OutBlock>>().swap(state_->free);
  return true;
}

int64_t BlockPool::NextTrimNs() const {
  return state_->free.empty() ? 0 : state_->last_get_ns + kIdleNs;
}

void OutQueue::PushFrame(FrameType type, uint32_t stream, std::string_view payload) {
  Item it;
  EncodeFrame(type, stream, payload, &it.head);
  pending_ += it.size();
  items_.push_back(std::move(it));
}

void OutQueue::PushData(FrameType type, uint32_t stream, uint64_t offset, BlockRef block,
                        size_t begin, size_t len, bool may_splice) {
  Item it;
  it.head.reserve(kDataHeaderSize);
  EncodeDataFrameHeader(type, stream, offset, len, &it.head);
  it.block = std::move(block);
  it.begin = begin;
  it.len = len;
  it.may_splice = may_splice;
  pending_ += it.size();
  items_.push_back(std::move(it));
}

void OutQueue::PushPipeData(FrameType type, uint32_t stream, uint64_t offset,
                            PipeSourceRef src, size_t len) {
  Item it;
  it.head.reserve(kDataHeaderSize);
  EncodeDataFrameHeader(type, stream, offset, len, &it.head);
  src->claimed += len;
  it.src = std::move(src);
  it.len = len;
  pending_ += it.size();
  items_.push_back(std::move(it));
}

void OutQueue::Unclaim(Item& it, size_t written) {
  if (!it.src) return;
  it.src->claimed -= it.len - written;
  it.src->MaybeRelease();
}

void OutQueue::Clear() {
  if (!items_.empty()) {
    Item& f = items_.front();
    Unclaim(f, pos_ > f.head.size() ? pos_ - f.head.size() : 0);
    for (size_t i = 1; i < items_.size(); ++i) Unclaim(items_[i], 0);
  }
  items_.clear();
  pos_ = 0;
  pending_ = 0;
  EmptyPipe();
}

void OutQueue::EmptyPipe() {
  // Bytes moved into the pipe for a connection that is gone.
  char buf[4096];
  while (in_pipe_ > 0) {
    ssize_t n = ::read(pipe_r_.get(), buf, std::min(sizeof buf, in_pipe_));
    if (n <= 0) break;
    in_pipe_ -= static_cast<size_t>(n);
  }
  in_pipe_ = 0;
}

void OutQueue::ReleasePipe() {
  if (in_pipe_ > 0) return;
  pipe_r_.Reset();
  pipe_w_.Reset();
}

void OutQueue::DropUnstarted() {
  if (pos_ == 0 && in_pipe_ == 0) return Clear();
  while (items_.size() > 1) {
    pending_ -= items_.back().size();
    Unclaim(items_.back(), 0);
    items_.pop_back();
  }
}

void OutQueue::Consume(size_t n) {
  pending_ -= n;
  while (n > 0) {
    Item& front = items_.front();
    size_t left = front.size() - pos_;
    if (n < left) {
      pos_ += n;
      return;
    }
    n -= left;
    pos_ = 0;
    items_.pop_front();
  }
}

int OutQueue::SplicePayload(int fd) {
  Item& f = items_.front();
  if (in_pipe_ == 0) {
    if (!pipe_r_) {
      int p[2];
      if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) return -1;
      pipe_r_.Reset(p[0]);
      pipe_w_.Reset(p[1]);
      (void)::fcntl(p[1], F_SETPIPE_SZ, static_cast<int>(OutBlock::kCapacity));  // else more rounds
    }
    const size_t done = pos_ - f.head.size();
    struct iovec v = {f.block->data.get() + f.begin + done, f.len - done};
    ssize_t m = ::vmsplice(pipe_w_.get(), &v, 1, SPLICE_F_NONBLOCK);
    if (m < 0 && errno == EINTR) return 0;
    if (m <= 0) return -1;
    in_pipe_ = static_cast<size_t>(m);
  }
  ssize_t w = ::splice(pipe_r_.get(), nullptr, fd, nullptr, in_pipe_, SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
  if (w > 0) {
    in_pipe_ -= static_cast<size_t>(w);
    Consume(static_cast<size_t>(w));
    return 0;
  }
  if (w < 0 && (errno == EINTR || errno == EAGAIN)) return errno == EAGAIN ? EAGAIN : 0;
  // A connection that takes no spliced pages says so before taking any (EINVAL): the bytes
  // go back out of the pipe and are written from the block instead.
  if (w < 0 && errno == EINVAL) {
    EmptyPipe();
    return -1;
  }
  return w == 0 ? EPIPE : errno;
}

int OutQueue::SpliceFromSource(int fd) {
  Item& f = items_.front();
  PipeSource& src = *f.src;
  const size_t left = f.len - (pos_ - f.head.size());
  if (splice_ok_) {
    ssize_t w =
        ::splice(src.fd.get(), nullptr, fd, nullptr, left, SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
    if (w > 0) {
      src.head += static_cast<uint64_t>(w);
      src.claimed -= static_cast<uint64_t>(w);
      src.MaybeRelease();
      Consume(static_cast<size_t>(w));
      return 0;
    }
    if (w < 0 && (errno == EINTR || errno == EAGAIN)) return errno == EAGAIN ? EAGAIN : 0;
    if (w == 0) return EPIPE;  // the claimed bytes are gone: should not happen
    if (errno != EINVAL) return errno;
    splice_ok_ = false;  // the connection takes no spliced pages: from here on, copies
  }
  // The rest of the payload is read out of the pipe into a block and written from there:
  // the item becomes a plain copy of its remaining bytes (its header is already out).
  auto block = std::make_shared<OutBlock>();
  size_t got = 0;
  while (got < left) {
    ssize_t n = ::read(src.fd.get(), block->data.get() + got, left - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n == 0 ? EPIPE : errno;
    got += static_cast<size_t>(n);
  }
  block->used = got;
  src.head += got;
  src.claimed -= got;
  src.MaybeRelease();
  f.src.reset();
  f.head.clear();
  f.block = std::move(block);
  f.begin = 0;
  f.len = got;
  f.may_splice = false;
  pos_ = 0;
  return 0;
}

int OutQueue::Flush(int fd) {
  constexpr int kMaxIov = 64;
  while (!items_.empty()) {
    if (items_.front().src && pos_ >= items_.front().head.size()) {
      int r = SpliceFromSource(fd);
      if (r == EAGAIN) return 0;
      if (r > 0) return r;
      continue;
    }
    if (in_pipe_ > 0 || (Spliced(items_.front()) && pos_ >= items_.front().head.size())) {
      int r = SplicePayload(fd);
      if (r == EAGAIN) return 0;
      if (r > 0) return r;
      if (r < 0) splice_ok_ = false;  // from here on, writev
      continue;
    }
    struct iovec iov[kMaxIov];
    int n = 0;
    size_t skip = pos_;
    for (auto it = items_.begin(); it != items_.end() && n + 2 <= kMaxIov; ++it) {
      if (skip < it->head.size()) {
        iov[n++] = {const_cast<char*>(it->head.data()) + skip, it->head.size() - skip};
        skip = 0;
      } else {
        skip -= it->head.size();
      }
      if (Spliced(*it)) break;  // its payload goes through the pipe, after its header
      if (it->len > skip) {
        iov[n++] = {it->block->data.get() + it->begin + skip, it->len - skip};
      }
      skip = 0;
    }
    ssize_t w = ::writev(fd, iov, n);
    if (w > 0) {
      Consume(static_cast<size_t>(w));
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) return 0;
    return w == 0 ? EPIPE : errno;
  }
  return 0;
}

}  // namespace space::agent
