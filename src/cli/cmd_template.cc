// space template build | import: build templates through POST /v1/templates, following the
// build log on stderr and printing the template digest alone on stdout.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "cli/commands.h"

namespace space::cli {

namespace {

namespace fs = std::filesystem;
constexpr uint64_t kMaxContextBytes = 16ull << 20;  // as spaced accepts

std::string Base64(std::string_view in) {
  static const char* kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(v >> s) & 63];
  }
  if (i + 1 == in.size()) {
    uint32_t v = uint8_t(in[i]) << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

// The COPY sources a spec names, found with a light scan (spaced parses the spec for real).
// "" in the result means "the whole context" (a source we cannot resolve here, e.g. one
// using an ARG, or "." itself); a wildcard stands for the directory above it.
std::set<std::string> CopySources(const std::string& spec) {
  std::set<std::string> out;
  std::vector<std::string> lines;
  std::stringstream ss(spec);
  std::string line, joined;
  while (std::getline(ss, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty() && line.back() == '\\') {
      joined += line.substr(0, line.size() - 1) + " ";
      continue;
    }
    lines.push_back(joined + line);
    joined.clear();
  }
  if (!joined.empty()) lines.push_back(joined);
  for (const auto& l : lines) {
    size_t b = l.find_first_not_of(" \t");
    if (b == std::string::npos || l.size() < b + 5) continue;
    std::string kw = l.substr(b, 4);
    for (auto& ch : kw) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    if (kw != "COPY" || (l.size() > b + 4 && !std::isspace(static_cast<unsigned char>(l[b + 4]))))
      continue;
    std::vector<std::string> words;
    std::string rest = l.substr(b + 4);
    size_t nb = rest.find_first_not_of(" \t");
    if (nb != std::string::npos && rest[nb] == '[') {
      auto j = ParseJson(rest.substr(nb));
      if (!j || !j->is_array()) {
        out.insert("");
        continue;
      }
      for (const auto& w : *j) {
        if (w.is_string()) words.push_back(w.get<std::string>());
      }
    } else {
      std::stringstream ws(rest);
      for (std::string w; ws >> w;) {
        if (words.empty() && StartsWith(w, "--")) continue;
        words.push_back(w);
      }
    }
    for (size_t i = 0; i + 1 < words.size(); ++i) {
      std::string src = words[i];
      while (!src.empty() && src[0] == '/') src.erase(0, 1);
      while (StartsWith(src, "./")) src.erase(0, 2);
      while (!src.empty() && src.back() == '/') src.pop_back();
      if (src.empty() || src == "." || src.find('$') != std::string::npos ||
          src.find('"') != std::string::npos)
        src.clear();
      // A wildcard (`folder/*.py`) is matched by spaced against the context: pack the
      // directory above its first wildcard segment ("folder"; the whole context for `*.py`).
      if (size_t w = src.find_first_of("*?["); w != std::string::npos) {
        size_t slash = src.rfind('/', w);
        src = slash == std::string::npos ? "" : src.substr(0, slash);
      }
      out.insert(src);
    }
  }
  return out;
}

Status AddFile(const fs::path& file, const std::string& rel, Json* context, uint64_t* total) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return Fail(Errc::kNotFound, "cannot read " + file.string());
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  *total += data.size();
  if (*total > kMaxContextBytes)
    return Fail(Errc::kTooLarge, "the build context is larger than 16 MiB");
  (*context)[rel] = Base64(data);
  return Ok();
}

// Packs the files COPY reads from `dir` as {"relative/path": base64}.
Result<Json> PackContext(const std::string& dir, const std::set<std::string>& sources) {
  Json context = Json::object();
  uint64_t total = 0;
  const fs::path root(dir);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return Fail(Errc::kNotFound, "no context directory " + dir);
  std::vector<std::string> todo(sources.begin(), sources.end());
  if (sources.count("")) todo = {""};
  for (const auto& src : todo) {
    fs::path p = src.empty() ? root : root / src;
    auto st = fs::symlink_status(p, ec);
    if (ec || !fs::exists(st))
      return Fail(Errc::kNotFound, "COPY source " + src + " is not in the context " + dir);
    if (fs::is_regular_file(st)) {
      SPACE_TRY(AddFile(p, src, &context, &total));
      continue;
    }
    if (!fs::is_directory(st)) continue;
    for (fs::recursive_directory_iterator it(p, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->is_symlink()) {
        std::fprintf(stderr, "space: skipping symlink %s (not supported in a build context)\n",
                     it->path().c_str());
        continue;
      }
      if (!it->is_regular_file()) continue;
      SPACE_TRY(AddFile(it->path(), fs::relative(it->path(), root).string(), &context, &total));
    }
    if (ec) return Fail(Errc::kInternal, "walk " + p.string() + ": " + ec.message());
  }
  return context;
}

// Posts the build, follows its log on stderr until it ends, prints the digest.
int RunBuild(Context& ctx, Json body) {
  auto c = ctx.GetClient();
  if (!c) return ReportError(c.error());
  auto started = (*c)->Call("POST", "/v1/templates", body);
  if (!started) return ReportError(started.error());
  std::string op_id = JsonStringOr((*started)["operation"], "id", "");
  if (op_id.empty()) return ReportError(Error(Errc::kInternal, 0, "no operation in the answer"));
  size_t shown = 0;
  Json op;
  for (;;) {
    auto o = (*c)->Call("GET", "/v1/operations/" + op_id + "?wait=1s");
    if (!o) return ReportError(o.error());
    op = *o;
    auto log = (*c)->Request("GET", "/v1/templates/builds/" + op_id + "/log");
    if (log && log->ok() && log->body.size() > shown) {
      std::fwrite(log->body.data() + shown, 1, log->body.size() - shown, stderr);
      shown = log->body.size();
    }
    std::string state = JsonStringOr(op, "state", "");
    if (state == "succeeded" || state == "failed") break;
  }
  if (JsonStringOr(op, "state", "") == "failed") {
    const Json* err = JsonField(op, "error");
    return ReportError(Error(Errc::kInternal, 0,
                             "build failed: " + JsonStringOr(err ? *err : Json(), "message", "?")));
  }
  if (ctx.globals.json) {
    PrintJson(op);
  } else {
    const Json* result = JsonField(op, "result");
    PrintText(JsonStringOr(result ? *result : Json(), "digest", "") + "\n");
  }
  return 0;
}

Result<Json> RefBody(const std::string& ref) {
  if (ref.empty()) return Fail(Errc::kInvalidArgument, "-t NAME:TAG is required");
  size_t colon = ref.find(':');
  Json body = {{"name", ref.substr(0, colon)}};
  if (colon != std::string::npos) body["tag"] = ref.substr(colon + 1);
  return body;
}

struct BuildArgs {
  std::string file, ref, context_dir;
  std::vector<std::string> build_args;
  bool network = false;
};

int RunTemplateBuild(Context& ctx, const BuildArgs& a) {
  auto body = RefBody(a.ref);
  if (!body) return ReportUsage(body.error().message);
  std::string spec;
  {
    std::ifstream in(a.file == "-" ? "/dev/stdin" : a.file, std::ios::binary);
    if (!in) return ReportError(Error(Errc::kNotFound, 0, "cannot read " + a.file));
    spec.assign((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  (*body)["spec"] = spec;
  auto sources = CopySources(spec);
  if (!sources.empty()) {
    std::string dir = a.context_dir;
    if (dir.empty()) {
      dir = a.file == "-" ? "." : fs::path(a.file).parent_path().string();
      if (dir.empty()) dir = ".";
    }
    auto packed = PackContext(dir, sources);
    if (!packed) return ReportError(packed.error());
    (*body)["context"] = *packed;
  }
  if (!a.build_args.empty()) {
    Json args = Json::object();
    for (const auto& kv : a.build_args) {
      size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) return ReportUsage("--build-arg wants K=V: " + kv);
      args[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    (*body)["build_args"] = args;
  }
  if (a.network) (*body)["network"] = true;
  return RunBuild(ctx, *body);
}

struct ImportArgs {
  std::string tarball, oci, dir, ref;
};

int RunTemplateImport(Context& ctx, const ImportArgs& a) {
  auto body = RefBody(a.ref);
  if (!body) return ReportUsage(body.error().message);
  int n = !a.tarball.empty() + !a.oci.empty() + !a.dir.empty();
  if (n != 1) return ReportUsage("give exactly one of --tarball, --oci, --dir");
  auto absolute = [](const std::string& p) {
    std::error_code ec;
    auto abs = fs::absolute(p, ec);
    return ec ? p : abs.lexically_normal().string();
  };
  if (!a.tarball.empty()) (*body)["tarball_path"] = absolute(a.tarball);
  if (!a.oci.empty()) (*body)["oci_archive_path"] = absolute(a.oci);
  if (!a.dir.empty()) (*body)["directory"] = absolute(a.dir);
  return RunBuild(ctx, *body);
}

// A template name goes into a URL path as it is: refuse what would change the URL's shape
// (the server checks the rest of the name's syntax).
Status CheckNameInPath(const std::string& ref) {
  if (ref.empty() || ref.find_first_of("/?#% \t\r\n") != std::string::npos)
    return Fail(Errc::kInvalidArgument, "bad template name '" + ref + "': want name:tag");
  return Ok();
}

int RunTemplateTag(Context& ctx, const std::string& from, const std::string& name_tag) {
  if (auto st = CheckNameInPath(name_tag); !st) return ReportUsage(st.error().message);
  auto c = ctx.GetClient();
  if (!c) return ReportError(c.error());
  auto t = (*c)->Call("PUT", "/v1/templates/" + name_tag, Json{{"from", from}});
  if (!t) return ReportError(std::move(t).error().Wrap("template tag " + from + " " + name_tag));
  if (ctx.globals.json) {
    PrintJson(*t);
  } else {
    PrintText(JsonStringOr(*t, "digest", "") + "\n");
  }
  return 0;
}

int RunTemplateUntag(Context& ctx, const std::vector<std::string>& names) {
  auto c = ctx.GetClient();
  if (!c) return ReportError(c.error());
  int rc = 0;
  Json results = Json::array();
  for (const std::string& n : names) {
    if (auto st = CheckNameInPath(n); !st) {
      rc = ReportUsage(st.error().message);
      continue;
    }
    auto r = (*c)->Call("DELETE", "/v1/templates/" + n);
    if (!r) {
      rc = ReportError(std::move(r).error().Wrap("template untag " + n));
      continue;
    }
    if (ctx.globals.json) {
      results.push_back(Json{{"name", n}, {"removed", true}});
    } else {
      PrintText(n + "\n");
    }
  }
  if (ctx.globals.json) PrintJson(results);
  return rc;
}

}  // namespace

void AddTemplateCommands(CLI::App& app, Context& ctx) {
  CLI::App* tmpl = app.add_subcommand("template", "Build, import or name templates");
  tmpl->require_subcommand(1);
  {
    auto a = std::make_shared<BuildArgs>();
    CLI::App* cmd = tmpl->add_subcommand(
        "build", "Build a template from a Dockerfile-subset spec; prints its digest");
    cmd->add_option("-f,--file", a->file, "The spec (Dockerfile syntax; - for stdin)")->required();
    cmd->add_option("-t,--tag", a->ref, "NAME:TAG of the template")->required();
    cmd->add_option("--context", a->context_dir,
                    "Directory COPY sources are read from (default: the spec's directory)");
    cmd->add_option("--build-arg", a->build_args, "ARG override K=V (repeatable)")
        ->allow_extra_args(false);
    cmd->add_flag("--network", a->network, "Give RUN steps network access");
    cmd->callback([&ctx, a] { ctx.exit_code = RunTemplateBuild(ctx, *a); });
  }
  {
    auto a = std::make_shared<ImportArgs>();
    CLI::App* cmd = tmpl->add_subcommand(
        "import", "Import a root filesystem (tarball, OCI archive or directory on spaced's host)");
    cmd->add_option("--tarball", a->tarball, "A (compressed) tar of a root filesystem");
    cmd->add_option("--oci", a->oci, "An OCI image archive or `docker save` output");
    cmd->add_option("--dir", a->dir, "A root filesystem directory");
    cmd->add_option("-t,--tag", a->ref, "NAME:TAG of the template")->required();
    cmd->callback([&ctx, a] { ctx.exit_code = RunTemplateImport(ctx, *a); });
  }
  {
    auto from = std::make_shared<std::string>(), name = std::make_shared<std::string>();
    CLI::App* cmd = tmpl->add_subcommand(
        "tag", "Give a template's build a further name (NAME:TAG); prints its digest");
    cmd->add_option("template", *from, "The build to name: NAME:TAG or sha256:DIGEST")->required();
    cmd->add_option("name", *name, "The new name, NAME:TAG (one naming another build moves here)")
        ->required();
    cmd->callback([&ctx, from, name] { ctx.exit_code = RunTemplateTag(ctx, *from, *name); });
  }
  {
    auto names = std::make_shared<std::vector<std::string>>();
    CLI::App* cmd = tmpl->add_subcommand(
        "untag", "Remove template names (the build stays for what uses it); prints each name removed");
    cmd->add_option("names", *names, "NAME:TAG ...")->required();
    cmd->callback([&ctx, names] { ctx.exit_code = RunTemplateUntag(ctx, *names); });
  }
  for (CLI::App* sub : tmpl->get_subcommands({})) sub->fallthrough();
}

}  // namespace space::cli
