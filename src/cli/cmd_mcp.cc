// `space mcp`: the MCP server on stdio (docs/mcp.md). Reads one JSON-RPC message a line
// from stdin and writes each answer as one line to stdout, nothing else; talks to spaced
// with the client of the other commands (--url/--api-key, SPACE_URL/SPACE_API_KEY).
// Requests run concurrently (a long run_command does not hold up a ping); answers are
// written whole, one at a time. At the end of stdin it finishes what is running and exits 0.
#include <CLI/CLI.hpp>
#include <condition_variable>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <thread>

#include "cli/commands.h"
#include "mcp/mcp.h"

namespace space::cli {

namespace {

constexpr int kMaxConcurrent = 8;

int RunMcp(Context& ctx) {
  auto c = ctx.GetClient();
  if (!c) return ReportError(c.error());
  client::Client* api = *c;
  std::fprintf(stderr, "space mcp: serving MCP on stdio for spaced at %s\n", api->url().c_str());

  std::mutex mu;
  std::condition_variable cv;
  int running = 0;
  bool write_failed = false;
  auto emit = [&](const std::string& line) {
    std::lock_guard lock(mu);
    if (write_failed) return;
    std::string out = line + "\n";
    if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size() || std::fflush(stdout) != 0)
      write_failed = true;
  };
  std::vector<std::thread> threads;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return running < kMaxConcurrent; });
      if (write_failed) break;
      ++running;
    }
    threads.emplace_back([&, msg = std::move(line)] {
      auto answer = mcp::HandleText(msg, *api);
      if (answer) emit(*answer);
      std::lock_guard lock(mu);
      --running;
      cv.notify_all();
    });
    line.clear();
    // Reap finished threads now and then so a long session does not pile them up.
    if (threads.size() >= 64) {
      for (auto& t : threads) t.join();
      threads.clear();
    }
  }
  for (auto& t : threads) t.join();
  if (write_failed) {
    std::fprintf(stderr, "space mcp: stdout closed\n");
    return kExitError;
  }
  return 0;
}

}  // namespace

void AddMcpCommands(CLI::App& app, Context& ctx) {
  CLI::App* cmd = app.add_subcommand(
      "mcp", "Serve the Model Context Protocol on stdin/stdout (tools for SPACE's sandboxes)");
  cmd->callback([&ctx] { ctx.exit_code = RunMcp(ctx); });
}

}  // namespace space::cli
