// One call of the space-runtime/v1 contract: exec, JSON in and out, timeouts, process
// group, bounded stderr. See plugin.h and docs/runtime-plugins.md.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include "runtime/plugin/plugin.h"
#include "sys/sys.h"

namespace space::runtime {
namespace {

constexpr size_t kStderrKeep = 16 << 10;   // the tail of a call's stderr that is logged
constexpr int kStderrLines = 40;

// Processes (other than zombies) whose process group is `pgid`.
int CountGroup(pid_t pgid) {
  int n = 0;
  DIR* d = ::opendir("/proc");
  if (!d) return 0;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    auto stat = sys::ReadFile(std::string("/proc/") + e->d_name + "/stat");
    if (!stat) continue;
    size_t rp = stat->rfind(')');
    if (rp == std::string::npos || rp + 2 >= stat->size()) continue;
    // After ") ": state ppid pgrp ...
    char state = (*stat)[rp + 2];
    long ppid = 0, pgrp = 0;
    if (std::sscanf(stat->c_str() + rp + 3, " %ld %ld", &ppid, &pgrp) != 2) continue;
    if (pgrp == pgid && state != 'Z') ++n;
  }
  ::closedir(d);
  return n;
}

void KillGroup(pid_t pgid) {
  if (pgid > 1) ::kill(-pgid, SIGKILL);
}

std::string LastLine(const std::string& text) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ' || t.back() == '\r')) t.pop_back();
  size_t nl = t.find_last_of('\n');
  std::string line = nl == std::string::npos ? t : t.substr(nl + 1);
  if (line.size() > 300) line = line.substr(0, 300) + "...";
  return line;
}

void LogStderr(const PluginCallOptions& o, const std::string& verb, const std::string& err,
               bool truncated, bool failed) {
  if (err.empty()) return;
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < err.size()) {
    size_t nl = err.find('\n', start);
    if (nl == std::string::npos) nl = err.size();
    std::string line = err.substr(start, nl - start);
    start = nl + 1;
    // Control characters from a plugin must not forge log lines.
    for (char& c : line) {
      if (static_cast<unsigned char>(c) < 0x20 && c != '\t') c = '?';
    }
    if (line.size() > 500) line = line.substr(0, 500) + "...";
    if (!line.empty()) lines.push_back(std::move(line));
  }
  size_t first = lines.size() > kStderrLines ? lines.size() - kStderrLines : 0;
  auto level = failed ? spdlog::level::warn : spdlog::level::info;
  if (truncated || first > 0) spdlog::log(level, "runtime plugin {} {}: (earlier stderr dropped)", o.name, verb);
  for (size_t i = first; i < lines.size(); ++i)
    spdlog::log(level, "runtime plugin {} {}: {}", o.name, verb, lines[i]);
}

Errc CodeOf(const Json& err) {
  std::string code = JsonStringOr(err, "code", "internal");
  if (code == "not_supported") return Errc::kInvalidArgument;
  return ErrcFromName(code);
}

}  // namespace

Result<Json> CallPlugin(const std::string& executable, const std::string& verb, Json request,
                        const PluginCallOptions& o) {
  const std::string what = "runtime plugin " + o.name + " " + verb;
  if (::access(executable.c_str(), X_OK) != 0)
    return Fail(Errc::kUnavailable, what + ": " + executable + " is not executable: " + std::strerror(errno));
  request["version"] = kPluginContract;
  request["verb"] = verb;
  const std::string input = request.dump() + "\n";
  // A plugin that exits without reading its request must not kill spaced with SIGPIPE
  // (spaced ignores it already; tools and tests using this may not).
  static const bool sigpipe_ignored = [] {
    struct sigaction sa {};
    if (::sigaction(SIGPIPE, nullptr, &sa) == 0 && sa.sa_handler == SIG_DFL) ::signal(SIGPIPE, SIG_IGN);
    return true;
  }();
  (void)sigpipe_ignored;

  int inp[2], outp[2], errp[2];
  if (::pipe2(inp, O_CLOEXEC) != 0) return ErrnoFail(what + ": pipe");
  sys::UniqueFd in_r(inp[0]), in_w(inp[1]);
  if (::pipe2(outp, O_CLOEXEC) != 0) return ErrnoFail(what + ": pipe");
  sys::UniqueFd out_r(outp[0]), out_w(outp[1]);
  if (::pipe2(errp, O_CLOEXEC) != 0) return ErrnoFail(what + ": pipe");
  sys::UniqueFd err_r(errp[0]), err_w(errp[1]);

  sys::SpawnOptions so;
  so.argv = {executable, verb};
  so.cwd = o.cwd;
  so.new_session = true;  // its own process group: killed as one on timeout
  so.stdin_fd = in_r.get();
  so.stdout_fd = out_w.get();
  so.stderr_fd = err_w.get();
  auto child = sys::Spawn(so);
  if (!child) return tl::unexpected(std::move(child.error()).Wrap(what));
  const pid_t pid = child->pid();
  in_r.Reset();
  out_w.Reset();
  err_w.Reset();
  for (int fd : {in_w.get(), out_r.get(), err_r.get()})
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  int pfd_raw = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pfd_raw < 0) {
    KillGroup(pid);
    return ErrnoFail(what + ": pidfd_open");
  }
  sys::UniqueFd pidfd(pfd_raw);

  std::string out, err;
  bool err_truncated = false, too_big = false, exited = false;
  size_t written = 0;
  const int64_t deadline = MonotonicNanos() + o.timeout_ms * 1000000;
  auto drain = [&](int fd, bool is_out) -> bool {  // false at EOF
    char buf[65536];
    for (;;) {
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n == 0) return false;
      if (n < 0) return !(errno != EAGAIN && errno != EINTR);
      if (is_out) {
        if (out.size() + n > o.max_reply_bytes) {
          too_big = true;
          return false;
        }
        out.append(buf, n);
      } else {
        err.append(buf, n);
        if (err.size() > 2 * kStderrKeep) {
          err.erase(0, err.size() - kStderrKeep);
          err_truncated = true;
        }
      }
    }
  };
  bool out_open = true, err_open = true;
  while (!exited && !too_big) {
    int64_t left_ms = (deadline - MonotonicNanos()) / 1000000;
    if (left_ms <= 0) break;
    pollfd p[4];
    int n = 0;
    p[n++] = {pidfd.get(), POLLIN, 0};
    int i_out = -1, i_err = -1, i_in = -1;
    if (out_open) { i_out = n; p[n++] = {out_r.get(), POLLIN, 0}; }
    if (err_open) { i_err = n; p[n++] = {err_r.get(), POLLIN, 0}; }
    if (in_w && written < input.size()) { i_in = n; p[n++] = {in_w.get(), POLLOUT, 0}; }
    int r = ::poll(p, n, static_cast<int>(std::min<int64_t>(left_ms, 1000)));
    if (r < 0 && errno != EINTR) break;
    if (r <= 0) continue;
    if (i_in >= 0 && (p[i_in].revents & (POLLOUT | POLLERR | POLLHUP))) {
      ssize_t w = ::write(in_w.get(), input.data() + written, input.size() - written);
      if (w > 0) written += static_cast<size_t>(w);
      if (w < 0 && errno != EAGAIN && errno != EINTR) written = input.size();  // it closed stdin
      if (written >= input.size()) in_w.Reset();
    }
    if (i_out >= 0 && (p[i_out].revents & (POLLIN | POLLHUP | POLLERR))) out_open = drain(out_r.get(), true);
    if (i_err >= 0 && (p[i_err].revents & (POLLIN | POLLHUP | POLLERR))) err_open = drain(err_r.get(), false);
    if (p[0].revents & POLLIN) exited = true;
  }
  if (!exited || too_big) {
    KillGroup(pid);
    (void)child->Wait();
    if (out_open) drain(out_r.get(), true);
    drain(err_r.get(), false);
    LogStderr(o, verb, err, err_truncated, true);
    if (too_big)
      return Fail(Errc::kInternal, what + ": reply larger than " + std::to_string(o.max_reply_bytes) +
                                       " bytes; its process group was killed");
    return Fail(Errc::kDeadlineExceeded, what + ": no reply within " + std::to_string(o.timeout_ms) +
                                             " ms; its process group was killed");
  }
  auto status = child->Wait();
  // What it wrote before exiting is in the pipes; a process it left behind may hold them
  // open, so read only what is there now.
  if (out_open) out_open = drain(out_r.get(), true);
  if (err_open) drain(err_r.get(), false);
  int left = CountGroup(pid);
  if (left > 0) KillGroup(pid);
  if (!status) return tl::unexpected(std::move(status.error()).Wrap(what));
  int code = WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
  std::string how = WIFEXITED(*status) ? "exit " + std::to_string(code)
                                       : "signal " + std::to_string(WTERMSIG(*status));
  LogStderr(o, verb, err, err_truncated, code != 0 || left > 0 || too_big);
  if (too_big)
    return Fail(Errc::kInternal, what + ": reply larger than " + std::to_string(o.max_reply_bytes) + " bytes");
  if (left > 0)
    return Fail(Errc::kInternal, what + ": left " + std::to_string(left) +
                                     " process(es) in its process group, now killed (a plugin "
                                     "runs what must outlive the call in a session of its own)");
  std::string text = out;
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  std::optional<Json> reply = text.empty() ? std::nullopt : ParseJson(text);
  bool is_object = reply && reply->is_object();
  const Json* error = is_object ? JsonField(*reply, "error") : nullptr;
  if (code != 0 || error) {
    if (error && error->is_object()) {
      std::string msg = JsonStringOr(*error, "message", "");
      if (msg.size() > 2000) msg = msg.substr(0, 2000) + "...";
      return Fail(CodeOf(*error), what + ": " + (msg.empty() ? how : msg));
    }
    std::string line = LastLine(err);
    return Fail(Errc::kInternal, what + ": " + how + " without an error object" +
                                     (line.empty() ? "" : ": " + line));
  }
  if (!is_object) {
    std::string shown = LastLine(text);
    return Fail(Errc::kInternal, what + ": reply is not a JSON object" +
                                     (shown.empty() ? " (empty)" : ": " + shown.substr(0, 120)));
  }
  std::string version = JsonStringOr(*reply, "version", "");
  if (verb != "version" && version != kPluginContract)
    return Fail(Errc::kInternal, what + ": reply has version \"" + version + "\", not \"" +
                                     kPluginContract + "\"");
  return std::move(*reply);
}

std::vector<std::string> FindPlugins(const std::vector<std::string>& dirs) {
  std::vector<std::string> found;
  std::map<std::string, std::string> by_name;
  for (const auto& dir : dirs) {
    DIR* d = ::opendir(dir.c_str());
    if (!d) continue;
    std::vector<std::string> names;
    while (dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
    ::closedir(d);
    std::sort(names.begin(), names.end());
    for (const auto& name : names) {
      bool ok = !name.empty() && name.size() <= 64 &&
                ((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= '0' && name[0] <= '9'));
      for (char c : name)
        ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-');
      if (!ok) continue;
      std::string path = dir + "/" + name;
      struct stat st;
      if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if (auto it = by_name.find(name); it != by_name.end()) {
        spdlog::warn("runtime plugin {}: {} is shadowed by {}", name, path, it->second);
        continue;
      }
      by_name[name] = path;
      found.push_back(path);
    }
  }
  return found;
}

}  // namespace space::runtime
