#include "cli/exec_io.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>

#include "cli/args.h"
#include "cli/commands.h"

namespace space::cli {

namespace {

void Pump(client::Client& c, const std::string& id, const std::string& cid, int stop_fd) {
  std::string buf(256 << 10, '\0');
  for (;;) {
    pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    ssize_t n = ::read(STDIN_FILENO, buf.data(), buf.size());
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) {
      if (n < 0) std::fprintf(stderr, "space: reading stdin: %s\n", std::strerror(errno));
      auto s = c.SendStdin(id, cid, {}, /*eof=*/true);
      // The command may have ended (and closed its stdin) already: nothing to report then.
      if (!s && s.error().code != Errc::kConflict && s.error().code != Errc::kNotFound) {
        std::fprintf(stderr, "space: closing the command's stdin: %s\n", s.error().message.c_str());
      }
      return;
    }
    auto s = c.SendStdin(id, cid, std::string_view(buf.data(), static_cast<size_t>(n)));
    if (!s) {
      if (s.error().code != Errc::kConflict && s.error().code != Errc::kNotFound) {
        std::fprintf(stderr, "space: sending stdin: %s\n", s.error().message.c_str());
      }
      return;
    }
  }
}

}  // namespace

StdinPump::StdinPump(client::Client& c, std::string id, std::string cid) {
  int p[2] = {-1, -1};
  if (::pipe2(p, O_CLOEXEC) != 0) {
    status_ = ErrnoFail("pipe");
    return;
  }
  stop_r_ = sys::UniqueFd(p[0]);
  stop_w_ = sys::UniqueFd(p[1]);
  thread_ = std::thread([&c, id = std::move(id), cid = std::move(cid), fd = stop_r_.get()] {
    Pump(c, id, cid, fd);
  });
}

StdinPump::~StdinPump() {
  if (stop_w_) (void)!::write(stop_w_.get(), "x", 1);
  if (thread_.joinable()) thread_.join();
}

int ExitStatusOf(const Result<Json>& command, bool output_broken, const std::string& cid) {
  if (!command) return ReportError(command.error());
  if (output_broken || command->is_null()) return 128 + SIGPIPE;
  std::string state = JsonStringOr(*command, "state", "");
  if (state == "failed") {
    std::fprintf(stderr, "space: %s could not start: %s\n", CommandLine(*command).c_str(),
                 JsonStringOr(*command, "reason", "unknown reason").c_str());
  } else if (state == "lost") {
    std::fprintf(stderr, "space: %s was lost: %s\n", cid.c_str(),
                 JsonStringOr(*command, "reason", "its sandbox stopped").c_str());
  }
  return client::Client::ExitCodeOf(*command);
}

}  // namespace space::cli
