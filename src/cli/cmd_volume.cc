// space volume create | ls | rm (docs/volumes.md)
#include <CLI/CLI.hpp>
#include <memory>

#include "cli/args.h"
#include "cli/commands.h"

namespace space::cli {

namespace {

struct VolumeCreateArgs {
  std::string name;
  std::string size;
};

int RunVolumeCreate(Context& ctx, const VolumeCreateArgs& a) {
  Json body = {{"name", a.name}};
  if (!a.size.empty()) {
    auto n = ParseByteSize(a.size);
    if (!n) return ReportUsage("--size: " + n.error().message);
    if (*n <= 0) return ReportUsage("--size must be positive");
    body["size_bytes"] = *n;
  }
  auto c = ctx.GetClient();
  if (!c) return ReportError(c.error());
  auto v = (*c)->Call("POST", "/v1/volumes", body);
  if (!v) return ReportError(std::move(v).error().Wrap("volume create " + a.name));
  if (ctx.globals.json) {
    PrintJson(*v);
  } else {
    PrintText(JsonStringOr(*v, "name", a.name) + "\n");
  }
  return 0;
}

int RunVolumeLs(Context& ctx) {
  auto c = ctx.GetClient();
  if (!c) return ReportError(c.error());
  auto list = (*c)->Call("GET", "/v1/volumes");
  if (!list) return ReportError(list.error());
  const Json vols = list->value("volumes", Json::array());
  if (ctx.globals.json) {
    PrintJson(vols);
    return 0;
  }
  std::vector<std::vector<std::string>> rows = {{"NAME", "ID", "SIZE", "AGE"}};
  for (const Json& v : vols) {
    auto created = ParseRfc3339Millis(JsonStringOr(v, "created_at", ""));
    auto size = JsonInt(v, "size_bytes");
    rows.push_back({Cell(v, "name"), Cell(v, "id"), size ? FormatSize(*size) : "-",
                    FormatAge(created, NowUnixMillis())});
  }
  PrintText(FormatTable(rows));
  return 0;
}

int RunVolumeRm(Context& ctx, const std::vector<std::string>& names) {
  auto c = ctx.GetClient();
  if (!c) return ReportError(c.error());
  int rc = 0;
  Json results = Json::array();
  for (const std::string& n : names) {
    auto r = (*c)->Call("DELETE", "/v1/volumes/" + n);
    if (!r) {
      rc = ReportError(std::move(r).error().Wrap("volume rm " + n));
      continue;
    }
    if (ctx.globals.json) {
      results.push_back(Json{{"name", n}, {"deleted", true}});
    } else {
      PrintText(n + "\n");
    }
  }
  if (ctx.globals.json) PrintJson(results);
  return rc;
}

}  // namespace

void AddVolumeCommands(CLI::App& app, Context& ctx) {
  CLI::App* vol = app.add_subcommand("volume", "Named volumes: create, ls, rm");
  vol->require_subcommand(1);
  {
    auto a = std::make_shared<VolumeCreateArgs>();
    CLI::App* cmd = vol->add_subcommand("create", "Create a named volume; prints its name");
    cmd->add_option("name", a->name, "Volume name ([A-Za-z0-9._-], up to 63)")->required();
    cmd->add_option("--size", a->size, "Quota: bytes or 512M, 10G (default 1G)");
    cmd->callback([&ctx, a] { ctx.exit_code = RunVolumeCreate(ctx, *a); });
  }
  {
    CLI::App* cmd = vol->add_subcommand("ls", "List volumes");
    cmd->callback([&ctx] { ctx.exit_code = RunVolumeLs(ctx); });
  }
  {
    auto names = std::make_shared<std::vector<std::string>>();
    CLI::App* cmd = vol->add_subcommand(
        "rm", "Delete volumes (refused while a sandbox mounts one); prints each name deleted");
    cmd->add_option("names", *names, "Volume names or ids")->required();
    cmd->callback([&ctx, names] { ctx.exit_code = RunVolumeRm(ctx, *names); });
  }
}

}  // namespace space::cli
