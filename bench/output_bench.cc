// bench/output_bench: the output-throughput figures of space_bench (DESIGN §7: ≥ 1 GB/s end
// to end, no byte lost), each beside its baselines measured in the same run:
//   - end to end: one command's stdout through agent -> spaced (stored in the output log) ->
//     HTTP mux stream -> this client, every byte counted;
//   - the producer alone, inside the sandbox, writing to /dev/null (what the command itself
//     can do: an end-to-end figure above it is impossible, one near it means SPACE is not
//     the bottleneck);
//   - the host writing the same number of bytes into a new file beside the output logs
//     (every byte must pass through one: page-cache writes of new files are the floor).
#include "bench/output_bench.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "bench/stats.h"
#include "sys/sys.h"

namespace space::bench {
namespace {

double Secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// CPU seconds (user + system) spaced has used so far, from /proc (SPACED_PID, set by
// bench/run.sh); -1 when unknown.
double SpacedCpuSecs() {
  const char* pid = std::getenv("SPACED_PID");
  if (!pid || !*pid) return -1;
  std::ifstream f(std::string("/proc/") + pid + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t p = stat.rfind(')');
  if (p == std::string::npos) return -1;
  // Fields after the name: state(3) ... utime(14) stime(15).
  unsigned long long utime = 0, stime = 0;
  if (std::sscanf(stat.c_str() + p + 1,
                  " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime,
                  &stime) != 2)
    return -1;
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// The command that writes `bytes` bytes to stdout: SPACE_BENCH_PRODUCER if set, else dd
// with 1 MiB blocks (busybox's `head -c` writes 4 KiB at a time and tops out at a few
// hundred MB/s by itself, so it measured head, not SPACE).
std::string Producer(int64_t bytes) {
  if (const char* p = std::getenv("SPACE_BENCH_PRODUCER"); p && *p) return p;
  if (bytes % (1 << 20) == 0) return "dd if=/dev/zero bs=1M count=" + std::to_string(bytes >> 20);
  return "head -c " + std::to_string(bytes) + " /dev/zero";
}

// Seconds the producer takes inside the sandbox with its output thrown away: the command's
// round trip through the API (start to exit, which adds ~1-2 ms of command start), best of
// three. -1 on failure.
double ProducerAloneSecs(client::Client& c, const std::string& id, const std::string& producer) {
  double best = -1;
  for (int i = 0; i < 3; ++i) {
    auto t0 = Clock::now();
    auto cmd = c.StartCommand(id, {{"cmd", "(" + producer + ") > /dev/null 2>&1"}});
    if (!cmd) return -1;
    auto done = c.GetCommand(id, (*cmd)["id"].get<std::string>(), std::chrono::seconds(120));
    double s = Secs(Clock::now() - t0);
    if (!done || (*done)["state"] != "exited" || (*done)["exit_code"] != 0) return -1;
    best = best < 0 ? s : std::min(best, s);
  }
  return best;
}

// Seconds to write `bytes` into a new file in `dir` (1 MiB writes), the file removed after.
double FileWriteSecs(const std::string& dir, int64_t bytes) {
  std::string path = dir + "/bench-baseline.bin";
  auto fd = sys::Open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (!fd) return -1;
  std::string block(1 << 20, '\0');
  auto t0 = Clock::now();
  for (int64_t done = 0; done < bytes; done += block.size()) (void)sys::WriteAll(fd->get(), block);
  double s = Secs(Clock::now() - t0);
  ::unlink(path.c_str());
  return s;
}

}  // namespace

int OutputBench(client::Client& c, const std::string& id, const std::string& data_dir,
                int64_t bytes) {
  const std::string producer = Producer(bytes);
  const double alone_secs = ProducerAloneSecs(c, id, producer);

  auto cmd = c.StartCommand(id, {{"cmd", producer}});
  if (!cmd) return 1;
  client::MuxOffsets off;
  uint64_t got = 0;
  const double cpu0 = SpacedCpuSecs();
  auto t0 = Clock::now();
  auto fin = c.FollowOutput(id, (*cmd)["id"].get<std::string>(), off,
                            [&](client::MuxKind k, std::string_view b) {
                              if (k == client::MuxKind::kStdout) got += b.size();
                              return true;
                            });
  const double secs = Secs(Clock::now() - t0);
  const double cpu1 = SpacedCpuSecs();
  const double base_secs = FileWriteSecs(data_dir + "/logs", bytes);
  const bool complete = got == static_cast<uint64_t>(bytes) && fin;

  const double mbps = got / secs / 1e6;
  const double base_mbps = base_secs > 0 ? bytes / base_secs / 1e6 : 0;
  const double alone_mbps = alone_secs > 0 ? bytes / alone_secs / 1e6 : 0;
  // The first line keeps its historical shape (its ratio is a slowdown: time over the
  // baseline's time); scripts parse it.
  std::printf("%-34s %lld bytes in %.2f s = %.0f MB/s, complete: %s | baseline file write %.0f MB/s | ratio %.2fx\n",
              "output throughput (1 command)", static_cast<long long>(got), secs, mbps,
              complete ? "yes" : "NO", base_mbps, base_secs > 0 ? secs / base_secs : 0.0);
  std::printf("%-34s %lld bytes in %.2f s = %.0f MB/s (%s > /dev/null, start to exit)\n",
              "output producer alone (sandbox)", static_cast<long long>(bytes), alone_secs,
              alone_mbps, producer.c_str());
  std::printf("%-34s %.2fx the host file write (target >= 0.8x), %.2fx the producer alone\n",
              "output throughput vs baselines", base_mbps > 0 ? mbps / base_mbps : 0.0,
              alone_mbps > 0 ? mbps / alone_mbps : 0.0);
  if (cpu0 >= 0 && cpu1 >= 0) {
    std::printf("%-34s %.2f s of spaced CPU per GiB\n", "output cost in spaced",
                (cpu1 - cpu0) / (static_cast<double>(got) / (1 << 30)));
  }
  return complete ? 0 : 1;
}

}  // namespace space::bench
