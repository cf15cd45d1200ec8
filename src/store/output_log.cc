// OutputLog: append-only per-command output files. See store.h for the contract.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "store/store.h"

namespace space::store {
namespace {

// The id becomes a file name under `dir`, so it must not be able to name anything else.
Status ValidateCommandId(const std::string& id) {
  if (id.empty()) return Fail(Errc::kInvalidArgument, "command id is empty");
  if (id.find('/') != std::string::npos || id.find('\0') != std::string::npos ||
      id.find("..") != std::string::npos || id == ".") {
    return Fail(Errc::kInvalidArgument, "invalid command id \"" + id + "\"");
  }
  return Ok();
}

// Index into OutputLog's per-stream arrays, or -1 for a value outside the enum.
int StreamIndex(OutputStream s) {
  switch (s) {
    case OutputStream::kStdout:
      return 0;
    case OutputStream::kStderr:
      return 1;
  }
  return -1;
}

}  // namespace

std::string_view OutputStreamName(OutputStream s) {
  switch (s) {
    case OutputStream::kStdout:
      return "stdout";
    case OutputStream::kStderr:
      return "stderr";
  }
  return "unknown";
}

std::string OutputPath(const std::string& dir, const std::string& command_id, OutputStream s) {
  std::string path = dir;
  path += '/';
  path += command_id;
  path += '.';
  path += OutputStreamName(s);
  return path;
}

Result<std::unique_ptr<OutputLog>> OutputLog::Open(const std::string& dir,
                                                   const std::string& command_id) {
  const std::string ctx = "open output log " + command_id;
  SPACE_TRY_WRAP(ValidateCommandId(command_id), ctx);
  SPACE_TRY_WRAP(sys::MkdirAll(dir, 0700), ctx);
  auto log = std::make_unique<OutputLog>();
  log->dir_ = dir;
  log->command_id_ = command_id;
  // Files are created on the first byte (creating files costs ~0.3 ms each on ext4, and
  // most commands write to one stream at most). An existing file — after a daemon
  // restart — is where its stream continues.
  for (OutputStream s : {OutputStream::kStdout, OutputStream::kStderr}) {
    int i = StreamIndex(s);
    struct stat st;
    if (::stat(OutputPath(dir, command_id, s).c_str(), &st) == 0) {
      log->sizes_[i] = static_cast<uint64_t>(st.st_size);
    } else if (errno != ENOENT) {
      return ErrnoFail(ctx + ": stat");
    }
  }
  return log;
}

Result<uint64_t> OutputLog::Append(OutputStream s, uint64_t offset, std::string_view bytes) {
  OutputBytes b(bytes);
  return Append(s, offset, b);
}

Result<uint64_t> OutputLog::Append(OutputStream s, uint64_t offset, OutputBytes& bytes,
                                   uint64_t end) {
  int i = StreamIndex(s);
  if (i < 0) return Fail(Errc::kInvalidArgument, "append output: invalid stream");
  const std::string_view name = OutputStreamName(s);
  uint64_t& size = sizes_[i];
  if (offset > size) {
    return Fail(Errc::kInvalidArgument, "append " + std::string(name) + ": gap: chunk at offset " +
                                            std::to_string(offset) + " but log ends at " +
                                            std::to_string(size));
  }
  // Bytes below `size` are already stored (a retransmission after a reconnect).
  const uint64_t skip = size - offset;
  if (skip >= bytes.left() || end <= size) return size;
  const size_t n = static_cast<size_t>(std::min<uint64_t>(bytes.left() - skip, end - size));
  SPACE_TRY_WRAP(bytes.Skip(static_cast<size_t>(skip)), "append " + std::string(name));
  if (!fds_[i]) {
    // Written at explicit offsets (the log's size), not O_APPEND: splice(2) refuses
    // O_APPEND files. This object is the files' only writer.
    auto fd = sys::Open(OutputPath(dir_, command_id_, s), O_WRONLY | O_CREAT, 0600);
    if (!fd) return tl::unexpected(std::move(fd).error().Wrap("append " + std::string(name)));
    fds_[i] = std::move(*fd);
  }
  auto w = bytes.WriteTo(fds_[i].get(), size, n);
  if (!w) {
    // A failed write may still have stored part of the chunk (e.g. ENOSPC midway): take
    // the size from the file so the next Append (a retransmission) continues correctly.
    struct stat st;
    if (::fstat(fds_[i].get(), &st) == 0) size = static_cast<uint64_t>(st.st_size);
    return tl::unexpected(std::move(w).error().Wrap("append " + std::string(name)));
  }
  size += n;
  return size;
}

uint64_t OutputLog::Size(OutputStream s) const {
  int i = StreamIndex(s);
  return i < 0 ? 0 : sizes_[i];
}

Status OutputLog::Sync() {
  for (OutputStream s : {OutputStream::kStdout, OutputStream::kStderr}) {
    const auto& fd = fds_[StreamIndex(s)];
    if (fd.valid() && ::fdatasync(fd.get()) != 0) {
      return ErrnoFail("fdatasync " + std::string(OutputStreamName(s)));
    }
  }
  return Ok();
}

namespace {
// Reads up to `max` bytes at `offset` from an open log file.
Result<std::string> ReadAt(int fd, const std::string& ctx, uint64_t offset, size_t max) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoFail(ctx + ": fstat");
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (offset >= size || max == 0) return std::string();
  // Size the buffer from the file, not from `max` (which may be huge). The writer may
  // append meanwhile; bytes beyond the fstat size are left for the next read.
  size_t want = static_cast<size_t>(std::min<uint64_t>(max, size - offset));
  std::string out(want, '\0');
  size_t got = 0;
  while (got < want) {
    ssize_t n = ::pread(fd, out.data() + got, want - got, static_cast<off_t>(offset + got));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoFail(ctx + ": pread");
    }
    if (n == 0) break;  // truncated under us; return what there is
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return out;
}
}  // namespace

Result<std::string> ReadOutput(const std::string& dir, const std::string& command_id,
                               OutputStream s, uint64_t offset, size_t max) {
  OutputReader reader(dir, command_id);
  return reader.Read(s, offset, max);
}

OutputReader::OutputReader(std::string dir, std::string command_id)
    : dir_(std::move(dir)), command_id_(std::move(command_id)) {}

Result<int> OutputReader::File(OutputStream s) {
  const std::string ctx = "read output " + command_id_;
  SPACE_TRY_WRAP(ValidateCommandId(command_id_), ctx);
  int index = StreamIndex(s);
  if (index < 0) return Fail(Errc::kInvalidArgument, ctx + ": invalid stream");
  sys::UniqueFd& fd = fds_[index];
  if (!fd) {
    const std::string path = OutputPath(dir_, command_id_, s);
    int raw = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (raw < 0) {
      if (errno == ENOENT) return -1;  // nothing written yet
      return ErrnoFail(ctx + ": open " + path);
    }
    fd.Reset(raw);
  }
  return fd.get();
}

Result<std::string> OutputReader::Read(OutputStream s, uint64_t offset, size_t max) {
  auto fd = File(s);
  if (!fd) return tl::unexpected(fd.error());
  if (*fd < 0) return std::string();
  return ReadAt(*fd, "read output " + command_id_, offset, max);
}

Result<OutputReader::Extent> OutputReader::Find(OutputStream s, uint64_t offset, size_t max) {
  auto fd = File(s);
  if (!fd) return tl::unexpected(fd.error());
  if (*fd < 0) return Extent{};
  struct stat st;
  if (::fstat(*fd, &st) != 0) return ErrnoFail("read output " + command_id_ + ": fstat");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (offset >= size) return Extent{*fd, 0};
  return Extent{*fd, static_cast<size_t>(std::min<uint64_t>(max, size - offset))};
}

uint64_t OutputSize(const std::string& dir, const std::string& command_id, OutputStream s) {
  if (!ValidateCommandId(command_id) || StreamIndex(s) < 0) return 0;
  struct stat st;
  if (::stat(OutputPath(dir, command_id, s).c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace space::store
