// cli/progress: one self-rewriting progress line on stderr for long operations (large
// copies, forks of many), shown only when stderr is a terminal; stdout never sees it.
// Internal to the space executable.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

namespace space::cli {

// Calls `line()` every `every` on its own thread and shows what it returns (if not empty)
// as the progress line, from `after` on (quick operations show nothing). The line is
// cleared when the ticker is destroyed. Does nothing at all when stderr is not a terminal.
class ProgressTicker {
 public:
  ProgressTicker(std::function<std::string()> line,
                 std::chrono::milliseconds after = std::chrono::milliseconds{700},
                 std::chrono::milliseconds every = std::chrono::milliseconds{200});
  ~ProgressTicker();
  ProgressTicker(const ProgressTicker&) = delete;
  ProgressTicker& operator=(const ProgressTicker&) = delete;

 private:
  std::atomic<bool> stop_{false};
  bool shown_ = false;
  std::thread thread_;
};

// "12.5 MiB"
std::string FormatBytes(uint64_t n);
// "12.5 MiB of 100 MiB (12%), 40.1 MiB/s"
std::string TransferLine(uint64_t done, uint64_t total, double seconds);

}  // namespace space::cli
