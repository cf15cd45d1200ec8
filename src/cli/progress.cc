#include "cli/progress.h"

#include <unistd.h>

#include <cstdio>
#include <fmt/format.h>

namespace space::cli {

ProgressTicker::ProgressTicker(std::function<std::string()> line, std::chrono::milliseconds after,
                               std::chrono::milliseconds every) {
  if (!::isatty(STDERR_FILENO)) return;
  thread_ = std::thread([this, line = std::move(line), after, every] {
    const auto start = std::chrono::steady_clock::now();
    while (!stop_.load()) {
      std::this_thread::sleep_for(every);
      if (stop_.load() || std::chrono::steady_clock::now() - start < after) continue;
      std::string text = line();
      if (text.empty()) continue;
      // \r, the line, then erase the rest of the old one.
      std::fprintf(stderr, "\r%s\x1b[K", text.c_str());
      std::fflush(stderr);
      shown_ = true;
    }
  });
}

ProgressTicker::~ProgressTicker() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (shown_) {
    std::fprintf(stderr, "\r\x1b[K");
    std::fflush(stderr);
  }
}

std::string FormatBytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", n) : fmt::format("{:.1f} {}", v, units[u]);
}

std::string TransferLine(uint64_t done, uint64_t total, double seconds) {
  std::string s = FormatBytes(done);
  if (total > 0) s += fmt::format(" of {} ({}%)", FormatBytes(total), done * 100 / total);
  if (seconds > 0.1) s += ", " + FormatBytes(static_cast<uint64_t>(done / seconds)) + "/s";
  return s;
}

}  // namespace space::cli
