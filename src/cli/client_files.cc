// Client: files (streamed both ways), operations and templates (see client.h).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "cli/client.h"
#include "cli/client_internal.h"
#include "sys/sys.h"

namespace space::client {

using internal::ArrayField;
using internal::DeadlineFor;
using internal::FormatMode;
using internal::NextWait;
using internal::OperationFinished;
using internal::ParseAnswer;
using internal::PathEscape;

// ---------------------------------------------------------------------------------------------
// Files

Result<uint64_t> Client::ReadFile(std::string_view id, std::string_view path,
                                  const DataCallback& sink) {
  Transfer t;
  t.method = "GET";
  t.path = SandboxPath(id) + "/files?path=" + QueryEscape(path);
  uint64_t size = 0;
  t.sink = [&](std::string_view bytes) {
    size += bytes.size();
    return sink(bytes);
  };
  auto r = Perform(t);
  if (!r) return tl::unexpected(r.error());
  if (!r->ok()) return tl::unexpected(ErrorFromResponse(*r));
  if (t.sink_stopped) return Fail(Errc::kInternal, "reading " + std::string(path) + ": aborted");
  return size;
}

Result<std::string> Client::ReadFile(std::string_view id, std::string_view path) {
  std::string data;
  auto r = ReadFile(id, path, [&](std::string_view bytes) {
    data.append(bytes);
    return true;
  });
  if (!r) return tl::unexpected(r.error());
  return data;
}

Result<uint64_t> Client::ReadFileTo(std::string_view id, std::string_view path,
                                    const std::string& host_path, int host_mode) {
  // The host file is opened on the first byte of a successful answer, so an error answer
  // (404, 403, ...) leaves an existing file alone.
  sys::UniqueFd fd;
  std::optional<Error> write_error;
  auto open_file = [&]() -> bool {
    if (fd) return true;
    auto f = sys::Open(host_path, O_WRONLY | O_CREAT | O_TRUNC, static_cast<mode_t>(host_mode));
    if (!f) {
      write_error = f.error();
      return false;
    }
    fd = std::move(*f);
    return true;
  };
  auto r = ReadFile(id, path, [&](std::string_view bytes) {
    if (!open_file()) return false;
    auto w = sys::WriteAll(fd.get(), bytes);
    if (!w) {
      write_error = w.error().Wrap("write " + host_path);
      return false;
    }
    return true;
  });
  if (r && !write_error) open_file();  // an empty file still has to exist
  if (write_error || !r) {
    if (fd) {
      fd.Reset();
      ::unlink(host_path.c_str());
    }
    if (write_error) return tl::unexpected(*write_error);
    return tl::unexpected(r.error());
  }
  return *r;
}

namespace {
std::string FilesQuery(std::string_view path, int mode) {
  std::string q = "?path=" + Client::QueryEscape(path);
  if (mode >= 0) q += "&mode=" + FormatMode(mode);
  return q;
}
}  // namespace

Result<Json> Client::WriteFile(std::string_view id, std::string_view path, std::string_view data,
                               int mode) {
  auto r = Request("PUT", SandboxPath(id) + "/files" + FilesQuery(path, mode), data,
                   "application/octet-stream");
  if (!r) return tl::unexpected(r.error());
  if (!r->ok()) return tl::unexpected(ErrorFromResponse(*r));
  return ParseAnswer(*r, "PUT files");
}

Result<Json> Client::WriteFileFromFd(std::string_view id, std::string_view path, int fd,
                                     int64_t size, int mode) {
  Transfer t;
  t.method = "PUT";
  t.path = SandboxPath(id) + "/files" + FilesQuery(path, mode);
  t.content_type = "application/octet-stream";
  t.upload_size = size;
  t.reader = [&](char* buf, size_t len) -> std::optional<size_t> {
    for (;;) {
      ssize_t n = ::read(fd, buf, len);
      if (n >= 0) return static_cast<size_t>(n);
      if (errno == EINTR) continue;
      t.read_error = ErrnoFail("reading the upload for " + std::string(path)).value();
      return std::nullopt;
    }
  };
  auto r = Perform(t);
  if (!r) return tl::unexpected(r.error());
  if (!r->ok()) return tl::unexpected(ErrorFromResponse(*r));
  return ParseAnswer(*r, "PUT files");
}

Result<Json> Client::WriteFileFrom(std::string_view id, std::string_view path,
                                   const std::string& host_path, int mode) {
  auto fd = sys::Open(host_path, O_RDONLY);
  if (!fd) return tl::unexpected(fd.error());
  struct stat st;
  if (::fstat(fd->get(), &st) != 0) return ErrnoFail("stat " + host_path);
  if (S_ISDIR(st.st_mode)) return Fail(Errc::kInvalidArgument, host_path + " is a directory");
  int64_t size = S_ISREG(st.st_mode) ? static_cast<int64_t>(st.st_size) : -1;
  return WriteFileFromFd(id, path, fd->get(), size, mode);
}

Result<Json> Client::ListFiles(std::string_view id, std::string_view path, int depth) {
  auto r = Call("GET", SandboxPath(id) + "/files:list?path=" + QueryEscape(path) +
                           "&depth=" + std::to_string(depth));
  if (!r) return r;
  return ArrayField(*r, "entries");
}

Result<Json> Client::Stat(std::string_view id, std::string_view path) {
  return Call("GET", SandboxPath(id) + "/files:stat?path=" + QueryEscape(path));
}

Status Client::Mkdir(std::string_view id, std::string_view path) {
  auto r = Call("POST", SandboxPath(id) + "/files:mkdir?path=" + QueryEscape(path));
  if (!r) return tl::unexpected(r.error());
  return Ok();
}

Status Client::Remove(std::string_view id, std::string_view path, bool recursive) {
  std::string q = SandboxPath(id) + "/files?path=" + QueryEscape(path);
  if (recursive) q += "&recursive=1";
  auto r = Call("DELETE", q);
  if (!r) return tl::unexpected(r.error());
  return Ok();
}

Status Client::Rename(std::string_view id, std::string_view from, std::string_view to) {
  auto r = Call("POST", SandboxPath(id) + "/files:rename",
                Json{{"from", std::string(from)}, {"to", std::string(to)}});
  if (!r) return tl::unexpected(r.error());
  return Ok();
}

// ---------------------------------------------------------------------------------------------
// Operations and templates

Result<Json> Client::GetOperation(std::string_view id, milliseconds wait) {
  std::string path = "/v1/operations/" + PathEscape(id);
  if (wait.count() > 0) path += "?wait=" + FormatWait(wait);
  return Call("GET", path);
}

Result<Json> Client::WaitOperation(std::string_view id, milliseconds timeout) {
  auto deadline = DeadlineFor(timeout);
  for (;;) {
    milliseconds wait = NextWait(deadline);
    auto started = std::chrono::steady_clock::now();
    auto op = GetOperation(id, std::max(wait, milliseconds{1}));
    if (!op) return op;
    if (OperationFinished(*op)) return op;
    if (deadline && std::chrono::steady_clock::now() >= *deadline) {
      return Fail(Errc::kDeadlineExceeded, "operation " + std::string(id) + " still " +
                                               JsonStringOr(*op, "state", "?") + " after " +
                                               std::to_string(timeout.count()) + "ms");
    }
    // A server that answered at once despite `wait` must not turn this into a busy loop.
    if (std::chrono::steady_clock::now() - started < milliseconds{20}) {
      std::this_thread::sleep_for(milliseconds{50});
    }
  }
}

Result<Json> Client::ListOperations(std::string_view state, int limit) {
  std::string query;
  if (!state.empty()) query += "?state=" + QueryEscape(state);
  if (limit >= 0)
    query += std::string(query.empty() ? "?" : "&") + "limit=" + std::to_string(limit);
  auto r = Call("GET", "/v1/operations" + query);
  if (!r) return r;
  return ArrayField(*r, "operations");
}

Result<Json> Client::ListTemplates() {
  auto r = Call("GET", "/v1/templates");
  if (!r) return r;
  return ArrayField(*r, "templates");
}

Result<Json> Client::ListRuntimes() {
  auto r = Call("GET", "/v1/runtimes");
  if (!r) return r;
  return ArrayField(*r, "runtimes");
}

}  // namespace space::client
