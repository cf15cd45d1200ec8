// space snapshot | snapshots | snapshot-rm | fork
#include <CLI/CLI.hpp>
#include <memory>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/progress.h"

namespace space::cli {

namespace {

constexpr int kMaxForks = 32;  // docs/api.md: count is 1..32

// ---- snapshot ----

struct SnapshotArgs {
  std::string id;
  bool async = false;
  double wait_timeout = 0;
};

int RunSnapshot(Context& ctx, const SnapshotArgs& a) {
  if (a.wait_timeout < 0) return ReportUsage("--wait-timeout must not be negative");
  auto c = ctx.GetClient();
  if (!c) return ReportError(c.error());
  if (a.async) {
    auto r = (*c)->StartSnapshot(a.id);
    if (!r) return ReportError(std::move(r).error().Wrap("snapshot " + a.id));
    PrintAsync(ctx, *r);
    return 0;
  }
  auto sid = (*c)->SnapshotAndWait(a.id, WaitOptionsFor(a.wait_timeout));
  if (!sid) return ReportError(std::move(sid).error().Wrap("snapshot " + a.id));
  if (!ctx.globals.json) {
    PrintText(*sid + "\n");
    return 0;
  }
  auto snap = (*c)->GetSnapshot(*sid);
  if (!snap) return ReportError(std::move(snap).error().Wrap("snapshot " + *sid + " was taken"));
  PrintJson(*snap);
  return 0;
}

// ---- snapshots ----

int RunSnapshots(Context& ctx, const std::string& sandbox_id) {
  auto c = ctx.GetClient();
  if (!c) return ReportError(c.error());
  auto list = (*c)->ListSnapshots(sandbox_id);
  if (!list) return ReportError(list.error());
  if (ctx.globals.json) {
    PrintJson(*list);
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {{"ID", "SANDBOX", "KIND", "STATE", "SIZE", "AGE"}};
  for (const Json& s : *list) {
    auto created = ParseRfc3339Millis(JsonStringOr(s, "created_at", ""));
    auto size = JsonInt(s, "size");
    rows.push_back({Cell(s, "id"), Cell(s, "sandbox_id"), Cell(s, "kind"), Cell(s, "state"),
                    size ? FormatSize(*size) : "-", FormatAge(created, NowUnixMillis())});
  }
  PrintText(FormatTable(rows));
  return 0;
}

// ---- snapshot-rm ----

int RunSnapshotRm(Context& ctx, const std::vector<std::string>& ids) {
  auto c = ctx.GetClient();
  if (!c) return ReportError(c.error());
  int rc = 0;
  Json results = Json::array();
  for (const std::string& sid : ids) {
    auto r = (*c)->DeleteSnapshot(sid);
    if (!r) {
      rc = ReportError(std::move(r).error().Wrap("snapshot-rm " + sid));
      continue;
    }
    if (ctx.globals.json) {
      results.push_back(Json{{"id", sid}, {"deleted", true}});
    } else {
      PrintText(sid + "\n");
    }
  }
  if (ctx.globals.json) PrintJson(results);
  return rc;
}

// ---- fork ----

struct ForkArgs {
  std::string id;
  int count = 1;
  bool async = false;
  double wait_timeout = 0;
};

int RunFork(Context& ctx, const ForkArgs& a) {
  if (a.count < 1 || a.count > kMaxForks) {
    return ReportUsage("fork: --count must be 1.." + std::to_string(kMaxForks));
  }
  if (a.wait_timeout < 0) return ReportUsage("--wait-timeout must not be negative");
  auto c = ctx.GetClient();
  if (!c) return ReportError(c.error());
  if (a.async) {
    auto r = (*c)->StartFork(a.id, a.count);
    if (!r) return ReportError(std::move(r).error().Wrap("fork " + a.id));
    PrintAsync(ctx, *r);
    return 0;
  }
  // Once the fork turns out to take a while: "N of M running" on stderr (terminals only),
  // from the new sandboxes the operation names.
  client::WaitOptions wait = WaitOptionsFor(a.wait_timeout);
  std::unique_ptr<ProgressTicker> progress;
  client::Client* cl = *c;
  if (a.count > 1 && wait.on_pending) {
    wait.on_pending = [&, first = wait.on_pending](const Json& op) {
      first(op);
      std::vector<std::string> ids;
      if (const Json* res = JsonField(op, "result"); res && res->contains("sandbox_ids")) {
        for (const Json& i : (*res)["sandbox_ids"]) {
          if (i.is_string()) ids.push_back(i.get<std::string>());
        }
      }
      if (ids.empty()) return;
      // Its own client: the main thread's is busy in the operation's long poll.
      auto own = std::make_shared<client::Client>(cl->url(), cl->api_key());
      progress = std::make_unique<ProgressTicker>([own, ids, id = a.id] {
        size_t up = 0, failed = 0;
        for (const auto& i : ids) {
          auto sb = own->GetSandbox(i);
          std::string state = sb ? JsonStringOr(*sb, "state", "") : "";
          up += state == "running";
          failed += state == "error";
        }
        return "fork " + id + ": " + std::to_string(up) + " of " + std::to_string(ids.size()) +
               " running" + (failed ? ", " + std::to_string(failed) + " failed" : "");
      }, std::chrono::milliseconds{0}, std::chrono::milliseconds{500});
    };
  }
  auto forks = (*c)->ForkAndWait(a.id, a.count, wait);
  progress.reset();
  if (!forks) return ReportError(std::move(forks).error().Wrap("fork " + a.id));
  int rc = 0;
  Json out = Json::array();
  for (const client::ForkedSandbox& f : *forks) {
    out.push_back(Json{{"id", f.id}, {"state", f.state}, {"error", f.error}});
    if (f.state == "running") {
      if (!ctx.globals.json) PrintText(f.id + "\n");
      continue;
    }
    std::string why =
        f.error.empty() ? "state " + (f.state.empty() ? "unknown" : f.state) : f.error;
    rc = ReportError(
        Error{Errc::kInternal, 0,
              "fork " + a.id + ": " + (f.id.empty() ? "a fork" : f.id) + " failed: " + why});
  }
  if (ctx.globals.json) PrintJson(out);
  return rc;
}

}  // namespace

void AddSnapshotCommands(CLI::App& app, Context& ctx) {
  {
    auto a = std::make_shared<SnapshotArgs>();
    CLI::App* cmd = app.add_subcommand(
        "snapshot", "Snapshot a sandbox; prints the snapshot id (--async: the operation id)");
    cmd->add_option("id", a->id, "Sandbox id")->required();
    cmd->add_flag("--async", a->async, "Do not wait: print the operation's id");
    cmd->add_option("--wait-timeout", a->wait_timeout,
                    "Give up waiting after SECS (default: no limit)");
    cmd->callback([&ctx, a] { ctx.exit_code = RunSnapshot(ctx, *a); });
  }
  {
    auto id = std::make_shared<std::string>();
    CLI::App* cmd = app.add_subcommand("snapshots", "List snapshots (all, or of one sandbox)");
    cmd->add_option("id", *id, "Only the snapshots of this sandbox");
    cmd->callback([&ctx, id] { ctx.exit_code = RunSnapshots(ctx, *id); });
  }
  {
    auto ids = std::make_shared<std::vector<std::string>>();
    CLI::App* cmd = app.add_subcommand("snapshot-rm", "Delete snapshots; prints each id deleted");
    cmd->add_option("ids", *ids, "Snapshot ids")->required();
    cmd->callback([&ctx, ids] { ctx.exit_code = RunSnapshotRm(ctx, *ids); });
  }
  {
    auto a = std::make_shared<ForkArgs>();
    CLI::App* cmd = app.add_subcommand(
        "fork",
        "Fork a sandbox into N copies; prints the new ids one per line (--async: the "
        "operation id)");
    cmd->add_option("id", a->id, "Sandbox id")->required();
    cmd->add_option("-n,--count", a->count, "How many copies, 1..32 (default 1)");
    cmd->add_flag("--async", a->async, "Do not wait: print the operation's id");
    cmd->add_option("--wait-timeout", a->wait_timeout,
                    "Give up waiting after SECS (default: no limit)");
    cmd->callback([&ctx, a] { ctx.exit_code = RunFork(ctx, *a); });
  }
}

}  // namespace space::cli
