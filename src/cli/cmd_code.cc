// space run-code: runs a cell in a code context of a code-interpreter sandbox
// (POST /v1/sandboxes/{id}/code, docs/code-interpreter.md).
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"
#include "sys/sys.h"

namespace space::cli {

namespace {

struct RunCodeArgs {
  std::string id;
  std::string language = "python";
  std::string context;
  std::string file;
  double timeout = 0;
  std::vector<std::string> env;
};

// What a result shows as text: its text form, or which kinds of data it holds.
std::string ResultText(const Json& r) {
  std::string text = JsonStringOr(r, "text", "");
  std::vector<std::string> kinds;
  for (const char* k : {"png", "jpeg", "svg", "html", "pdf", "latex", "markdown", "json", "javascript"}) {
    if (JsonField(r, k)) kinds.push_back(k);
  }
  if (!kinds.empty() && (text.empty() || text.rfind("<", 0) == 0)) {
    std::string s = "[";
    for (size_t i = 0; i < kinds.size(); ++i) s += (i ? ", " : "") + kinds[i];
    s += " result]";
    return text.empty() ? s : text + " " + s;
  }
  return text;
}

int RunCode(Context& ctx, const RunCodeArgs& a) {
  std::string code;
  if (a.file == "-") {
    auto all = sys::ReadAll(STDIN_FILENO);
    if (!all) return ReportError(all.error());
    code = std::move(*all);
  } else {
    auto f = sys::ReadFile(a.file);
    if (!f) return ReportError(std::move(f.error()).Wrap(a.file));
    code = std::move(*f);
  }
  Json body = {{"code", code}, {"language", a.language}};
  if (!a.context.empty()) body["context"] = a.context;
  if (a.timeout > 0) body["timeout_ms"] = static_cast<int64_t>(a.timeout * 1000);
  if (!a.env.empty()) {
    Json env = Json::object();
    for (const auto& kv : a.env) {
      size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) return ReportUsage("run-code: --env wants K=V, got " + kv);
      env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    body["env"] = env;
  }
  auto c = ctx.GetClient();
  if (!c) return ReportError(c.error());
  auto ex = (*c)->Call("POST", "/v1/sandboxes/" + a.id + "/code", body);
  if (!ex) return ReportError(ex.error());
  if (ctx.globals.json) {
    PrintJson(*ex);
  } else {
    const Json* logs = JsonField(*ex, "logs");
    for (const char* stream : {"stdout", "stderr"}) {
      const Json* l = logs ? JsonField(*logs, stream) : nullptr;
      if (!l || !l->is_array()) continue;
      for (const auto& piece : *l) {
        if (!piece.is_string()) continue;
        const std::string& t = piece.get_ref<const std::string&>();
        std::fwrite(t.data(), 1, t.size(), std::string(stream) == "stdout" ? stdout : stderr);
      }
    }
    std::fflush(stdout);
    if (const Json* rs = JsonField(*ex, "results"); rs && rs->is_array()) {
      for (const auto& r : *rs) {
        std::string t = ResultText(r);
        if (!t.empty()) PrintText(t + "\n");
      }
    }
  }
  const Json* err = JsonField(*ex, "error");
  if (err && err->is_object()) {
    if (!ctx.globals.json) {
      std::string tb = JsonStringOr(*err, "traceback", "");
      if (!tb.empty()) std::fprintf(stderr, "%s\n", tb.c_str());
      std::fprintf(stderr, "%s: %s\n", JsonStringOr(*err, "name", "Error").c_str(),
                   JsonStringOr(*err, "value", "").c_str());
    }
    return kExitError;
  }
  if (JsonStringOr(*ex, "state", "") != "done") {
    std::fprintf(stderr, "space: the cell is still running (GET /v1/sandboxes/%s/code/%s)\n",
                 a.id.c_str(), JsonStringOr(*ex, "id", "").c_str());
    return kExitError;
  }
  return 0;
}

}  // namespace

void AddCodeCommands(CLI::App& app, Context& ctx) {
  auto a = std::make_shared<RunCodeArgs>();
  auto* cmd = app.add_subcommand(
      "run-code",
      "run code in a stateful context of a code-interpreter sandbox; prints its output and the "
      "text form of its results, exits 1 if it raised");
  cmd->add_option("id", a->id, "sandbox id")->required();
  cmd->add_option("file", a->file, "file with the code, or - for stdin")->required();
  cmd->add_option("--language,-l", a->language, "python, javascript or bash")->capture_default_str();
  cmd->add_option("--context,-c", a->context,
                  "context id to run in (state kept between cells); default: a new context "
                  "(its id is in --json's output)");
  cmd->add_option("--timeout", a->timeout, "seconds before the cell is interrupted");
  cmd->add_option("--env,-e", a->env, "K=V for this cell (repeatable)");
  cmd->callback([&ctx, a] { ctx.exit_code = RunCode(ctx, *a); });
}

}  // namespace space::cli
