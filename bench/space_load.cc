// space_load: a bounded load test against a running spaced (loopback only).
//
// --clients threads each loop until --seconds have passed: create a sandbox, run
// --commands commands whose output is known in advance (streamed as it is produced), check
// the streamed bytes and then the stored bytes (read back from offset 0), delete the
// sandbox. A 429 answer is honoured by sleeping its Retry-After and retrying; anything else
// that fails counts as an error. Meanwhile a prober times GET /healthz every 20 ms.
//
// Afterwards it checks that nothing leaked: no sandbox is listed, and (with --data-dir and
// SPACED_PID) no sandbox root, runtime state or mount is left and spaced's file descriptors
// are back to where they were before the load. Exit status 0 only if every output was
// complete, nothing leaked and /healthz p99 stayed under --healthz-p99-ms.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/stats.h"
#include "cli/client.h"
#include "sys/sys.h"

using namespace space;
using namespace space::bench;
using namespace std::chrono_literals;

namespace {

struct Totals {
  std::mutex mu;
  std::vector<double> create_ms, run_ms, delete_ms, healthz_ms;
  uint64_t bytes_checked = 0;
  int sandboxes = 0, commands = 0, throttled = 0, errors = 0, mismatches = 0;
  std::vector<std::string> error_samples;

  void Error(const std::string& what) {
    std::lock_guard l(mu);
    ++errors;
    if (error_samples.size() < 5) error_samples.push_back(what);
  }
};

// The output of `seq 1 N` (busybox), known in advance.
std::string SeqOutput(int n) {
  std::string s;
  for (int i = 1; i <= n; ++i) s += std::to_string(i) + "\n";
  return s;
}

// Retries `call` while it answers 429 (sleeping what Retry-After says, 1 s by default).
template <class F>
auto Throttled(Totals& t, F call) -> decltype(call()) {
  for (;;) {
    auto r = call();
    if (r || r.error().code != Errc::kResourceExhausted) return r;
    {
      std::lock_guard l(t.mu);
      ++t.throttled;
    }
    std::this_thread::sleep_for(1s);
  }
}

void ClientLoop(const std::string& url, const std::string& key, Clock::time_point end,
                int commands, int lines, Totals& t) {
  client::ClientOptions opts;
  opts.retry_busy_for = std::chrono::milliseconds{0};  // 429s are counted and honoured here
  client::Client c(url, key, opts);
  const std::string expect = SeqOutput(lines);
  while (Clock::now() < end) {
    auto t0 = Clock::now();
    auto sb = Throttled(t, [&] { return c.CreateSandboxAndWait(Json::object(), 120s); });
    if (!sb) {
      t.Error("create: " + sb.error().message);
      std::this_thread::sleep_for(200ms);
      continue;
    }
    const std::string id = (*sb)["id"];
    auto t1 = Clock::now();
    {
      std::lock_guard l(t.mu);
      t.create_ms.push_back(Ms(t1 - t0));
      ++t.sandboxes;
    }
    for (int i = 0; i < commands; ++i) {
      auto r0 = Clock::now();
      std::string cid, streamed;
      client::MuxOffsets off;
      auto run = Throttled(t, [&] {
        streamed.clear();
        return c.StartAndStream(id, Json{{"argv", {"seq", "1", std::to_string(lines)}}}, off,
                                [&](client::MuxKind k, std::string_view b) {
                                  if (k == client::MuxKind::kStdout) streamed.append(b);
                                  return true;
                                }, &cid);
      });
      if (!run) {
        t.Error("run: " + run.error().message);
        continue;
      }
      auto r1 = Clock::now();
      // What was stored must be what was streamed must be what seq printed.
      auto stored = Throttled(t, [&] { return c.ReadOutput(id, cid, "stdout", 0); });
      std::lock_guard l(t.mu);
      t.run_ms.push_back(Ms(r1 - r0));
      ++t.commands;
      if (!stored || streamed != expect || stored->bytes != expect) {
        ++t.mismatches;
        if (t.error_samples.size() < 5)
          t.error_samples.push_back("output of " + cid + " in " + id + " is incomplete");
      } else {
        t.bytes_checked += 2 * expect.size();
      }
    }
    auto d0 = Clock::now();
    auto del = Throttled(t, [&]() -> Result<Json> {
      SPACE_TRY(c.DeleteSandboxAndWait(id, 120s));
      return Json::object();
    });
    if (!del) {
      t.Error("delete " + id + ": " + del.error().message);
      continue;
    }
    std::lock_guard l(t.mu);
    t.delete_ms.push_back(Ms(Clock::now() - d0));
  }
}

std::vector<double> ProbeHealth(client::Client& c, Clock::time_point end, std::atomic<bool>* stop) {
  std::vector<double> ms;
  while (Clock::now() < end && !(stop && stop->load())) {
    auto t0 = Clock::now();
    bool ok = static_cast<bool>(c.Health());
    double d = Ms(Clock::now() - t0);
    ms.push_back(ok ? d : 1e9);  // a failed probe counts as infinitely slow
    std::this_thread::sleep_for(20ms);
  }
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"space_load: bounded load against a running spaced"};
  std::string url, key, data_dir;
  int clients = 200, seconds = 30, commands = 2, lines = 20000;
  double healthz_p99_ms = 50;
  int spinners = 0;
  app.add_option("--url", url)->required();
  app.add_option("--key", key)->required();
  app.add_option("--data-dir", data_dir, "spaced's data dir, for the leak checks");
  app.add_option("--clients", clients)->check(CLI::Range(1, 1000));
  app.add_option("--seconds", seconds)->check(CLI::Range(1, 600));
  app.add_option("--commands", commands, "commands per sandbox")->check(CLI::Range(1, 100));
  app.add_option("--lines", lines, "each command prints seq 1 LINES")->check(CLI::Range(1, 10000000));
  app.add_option("--healthz-p99-ms", healthz_p99_ms);
  app.add_option("--spinners", spinners,
                 "sandboxes that spin at their CPU limit for the whole run (CPU starvation check)")
      ->check(CLI::Range(0, 64));
  CLI11_PARSE(app, argc, argv);

  client::Client probe(url, key);
  if (!probe.Health()) {
    std::fprintf(stderr, "spaced is not answering at %s\n", url.c_str());
    return 1;
  }
  const char* pid_env = std::getenv("SPACED_PID");
  const std::string proc = pid_env ? std::string("/proc/") + pid_env : "";
  // Baselines: /healthz on an idle daemon, one client alone doing the same work, and
  // spaced's open files.
  auto idle = ProbeHealth(probe, Clock::now() + 2s, nullptr);
  Totals alone;
  ClientLoop(url, key, Clock::now() + 3s, commands, lines, alone);
  // Spinners: sandboxes whose processes burn their whole CPU limit (1 cpu each) while the
  // load runs, so the API competes with them for the host's cores.
  std::vector<std::string> spinning;
  for (int i = 0; i < spinners; ++i) {
    auto sb = probe.CreateSandboxAndWait(Json{{"metadata", {{"space_load", "spinner"}}}}, 60s);
    if (!sb) {
      std::fprintf(stderr, "spinner create: %s\n", sb.error().message.c_str());
      return 1;
    }
    std::string id = (*sb)["id"];
    spinning.push_back(id);
    for (int k = 0; k < 2; ++k) {
      auto cmd = probe.StartCommand(id, Json{{"cmd", "while :; do :; done"}});
      if (!cmd) {
        std::fprintf(stderr, "spinner command: %s\n", cmd.error().message.c_str());
        return 1;
      }
    }
  }
  if (spinners > 0) std::this_thread::sleep_for(1s);  // let them reach their limit
  size_t fds0 = proc.empty() ? 0 : sys::CountDirEntries(proc + "/fd");

  Totals t;
  const auto start = Clock::now();
  const auto end = start + std::chrono::seconds(seconds);
  std::atomic<bool> stop{false};
  std::vector<double> health;
  std::thread prober([&] { health = ProbeHealth(probe, end + 600s, &stop); });
  std::vector<std::thread> threads;
  threads.reserve(clients);
  for (int i = 0; i < clients; ++i)
    threads.emplace_back([&] { ClientLoop(url, key, end, commands, lines, t); });
  for (auto& th : threads) th.join();
  const double elapsed_s = Ms(Clock::now() - start) / 1000;
  stop = true;
  prober.join();
  for (const auto& id : spinning) (void)probe.DeleteSandboxAndWait(id, 60s);

  std::printf("# space_load: %d clients for %d s (ran %.1f s), %d commands per sandbox of %zu bytes, "
              "%d sandboxes spinning\n",
              clients, seconds, elapsed_s, commands, SeqOutput(lines).size(), spinners);
  std::printf("sandboxes %d (%.1f/s), commands %d (%.1f/s), output checked %.1f MiB, "
              "429s honoured %d, errors %d, incomplete outputs %d\n",
              t.sandboxes, t.sandboxes / elapsed_s, t.commands, t.commands / elapsed_s,
              t.bytes_checked / 1048576.0, t.throttled, t.errors, t.mismatches);
  for (const auto& e : t.error_samples) std::printf("  e.g. %s\n", e.c_str());
  std::printf("(baselines: the same steps by one client alone, and /healthz when idle)\n");
  Print("create (wait until running)", Summarize(t.create_ms), Summarize(alone.create_ms));
  Print("run + stream a command", Summarize(t.run_ms), Summarize(alone.run_ms));
  Print("delete (wait until gone)", Summarize(t.delete_ms), Summarize(alone.delete_ms));
  Stats hs = Summarize(health);
  Print("/healthz under load", hs, Summarize(idle));

  bool ok = t.errors == 0 && t.mismatches == 0 && t.commands > 0;
  if (hs.p99 > healthz_p99_ms) {
    std::printf("FAIL: /healthz p99 %.2f ms > %.0f ms\n", hs.p99, healthz_p99_ms);
    ok = false;
  }
  // Leaks: nothing listed; nothing on disk; spaced's fds back to the baseline.
  auto list = probe.ListSandboxes();
  size_t listed = list && list->is_array() ? list->size() : 0;
  std::string leaks;
  if (!list) leaks += " list failed: " + list.error().message + ";";
  if (listed) leaks += " " + std::to_string(listed) + " sandboxes still listed;";
  if (!data_dir.empty()) {
    // Pool members (if any) are expected; count only what exceeds them.
    size_t roots = sys::CountDirEntries(data_dir + "/storage/pool/roots");
    size_t states = sys::CountDirEntries(data_dir + "/runtime/oci/run");
    if (roots != states) leaks += " " + std::to_string(roots) + " roots for " + std::to_string(states) + " instances;";
    if (states > 8) leaks += " " + std::to_string(states) + " instances left;";
  }
  if (!proc.empty()) {
    size_t fds1 = 0;
    // Connections and sessions wind down asynchronously: give them a few seconds.
    for (int i = 0; i < 50; ++i) {
      fds1 = sys::CountDirEntries(proc + "/fd");
      if (fds1 <= fds0 + 4) break;
      std::this_thread::sleep_for(100ms);
    }
    std::printf("spaced open files: %zu before, %zu after\n", fds0, fds1);
    if (fds1 > fds0 + 4) leaks += " spaced holds " + std::to_string(fds1 - fds0) + " more fds;";
  }
  if (!leaks.empty()) {
    std::printf("FAIL: leaked:%s\n", leaks.c_str());
    ok = false;
  } else {
    std::printf("nothing leaked\n");
  }
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
