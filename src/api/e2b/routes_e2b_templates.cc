// E2B's template build API — what `Template.build` of the 2.x SDKs drives — on SPACE's
// template builds (docs/e2b-compat.md, "Templates"):
//
//   POST /v3/templates {name[:tag], tags, cpuCount, memoryMB}       -> {templateID, buildID, …}
//   GET  /templates/{templateID}/files/{hash}                       -> {present, url}
//   PUT  <url> (/e2b-template-files/{hash}?sig=…): the COPY files' tar, signed link, no key
//   POST /v2/templates/{templateID}/builds/{buildID} {fromTemplate|fromImage, steps,
//        startCmd, readyCmd}                                        -> 202, a SPACE build starts
//   GET  /templates/{templateID}/builds/{buildID}/status?logsOffset= -> {status, logEntries, …}
//   GET  /templates/aliases/{alias}                                 -> 200 or 404
//
// The steps become a Spacefile (exec and JSON forms, so no step's text is re-parsed) and the
// uploaded tars its build context; the build is an ordinary SPACE template build
// (operation kind template_build, its log the status's logEntries). The template ID is the
// template's name, so `Sandbox.create(name)` finds it. A build request is kept as a small
// JSON file under DATA/e2b-templates/builds until its build is asked for.
#include <sodium.h>
#include <sys/stat.h>

#include <dirent.h>

#include <regex>
#include <sstream>

#include "api/e2b/control.h"
#include "api/e2b/parse.h"
#include "core/template_build.h"
#include "core/templates.h"
#include "sys/sys.h"

namespace space::api::e2b {

namespace {

constexpr size_t kMaxUploadBytes = 64u << 20;  // a tar of COPY files (the context is <= 16 MiB)
constexpr size_t kMaxLogEntries = 100;         // per status answer, as E2B pages them

std::string Dir(core::Platform* p) { return p->config().data_dir + "/e2b-templates"; }

bool ValidHash(const std::string& h) {
  if (h.size() != 64) return false;
  for (char c : h)
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// E2B's build ids are UUIDs (its SDKs parse some as such); "bld-…" ones were made before.
bool ValidBuildId(const std::string& id) {
  if (IsUuidText(id)) return true;
  if (id.size() < 4 || id.size() > 64 || id.rfind("bld-", 0) != 0) return false;
  for (char c : id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
  return true;
}

// The key upload links are signed with (made on first use, kept in the data dir).
Result<std::string> UploadKey(core::Platform* p) {
  const std::string path = Dir(p) + "/upload.key";
  if (auto k = sys::ReadFile(path); k && k->size() == crypto_auth_KEYBYTES) return *k;
  SPACE_TRY(sys::MkdirAll(Dir(p), 0700));
  std::string key(crypto_auth_KEYBYTES, '\0');
  crypto_auth_keygen(reinterpret_cast<unsigned char*>(key.data()));
  // Written aside and linked into place: of two first uses at once, one key wins and both
  // sign with it (a rename would let the loser's key replace the one already handed out).
  const std::string tmp = path + "." + NewId("k");
  SPACE_TRY(sys::WriteFileAtomic(tmp, key, 0600));
  const bool linked = ::link(tmp.c_str(), path.c_str()) == 0;
  const int err = errno;
  (void)::unlink(tmp.c_str());
  if (!linked && err != EEXIST) return ErrnoFail("store the upload key " + path, err);
  return sys::ReadFile(path);
}

std::string Sign(const std::string& key, const std::string& hash) {
  unsigned char mac[crypto_auth_BYTES];
  crypto_auth(mac, reinterpret_cast<const unsigned char*>(hash.data()), hash.size(),
              reinterpret_cast<const unsigned char*>(key.data()));
  char hex[crypto_auth_BYTES * 2 + 1];
  sodium_bin2hex(hex, sizeof hex, mac, sizeof mac);
  return hex;
}

// ---- build requests

struct BuildRequest {
  std::string build_id, name, tag, op;
  std::vector<std::string> tags;
  int64_t created_ms = 0;
  Json ToJson() const {
    return {{"build_id", build_id}, {"name", name}, {"tag", tag}, {"tags", tags}, {"op", op}, {"created_ms", created_ms}};
  }
};

std::string BuildPath(core::Platform* p, const std::string& id) { return Dir(p) + "/builds/" + id + ".json"; }

Status SaveBuild(core::Platform* p, const BuildRequest& b) {
  SPACE_TRY(sys::MkdirAll(Dir(p) + "/builds", 0700));
  return sys::WriteFileAtomic(BuildPath(p, b.build_id), b.ToJson().dump(), 0600);
}

Result<BuildRequest> LoadBuild(core::Platform* p, const std::string& template_id, const std::string& build_id) {
  if (!ValidBuildId(build_id)) return Fail(Errc::kNotFound, "no build " + build_id);
  auto raw = sys::ReadFile(BuildPath(p, build_id));
  auto j = raw ? ParseJson(*raw) : std::nullopt;
  if (!j || !j->is_object()) return Fail(Errc::kNotFound, "no build " + build_id);
  BuildRequest b;
  b.build_id = build_id;
  b.name = JsonStringOr(*j, "name", "");
  b.tag = JsonStringOr(*j, "tag", "latest");
  b.op = JsonStringOr(*j, "op", "");
  b.created_ms = JsonIntOr(*j, "created_ms", 0);
  if (const Json* t = JsonField(*j, "tags"); t && t->is_array())
    for (const auto& x : *t)
      if (x.is_string()) b.tags.push_back(x.get<std::string>());
  if (b.name != template_id) return Fail(Errc::kNotFound, "build " + build_id + " is not of template " + template_id);
  return b;
}

// ---- steps -> Spacefile

std::string JsonStr(const std::string& s) { return Json(s).dump(); }

// What FROM names: a SPACE template. Images cannot be pulled (SPACE has no registry
// client); the E2B base image and Debian's are the built-ins that hold the same.
Result<std::string> FromLine(const Json& body) {
  std::string tpl = JsonStringOr(body, "fromTemplate", "");
  std::string image = JsonStringOr(body, "fromImage", "");
  if (!tpl.empty()) return TemplateRef(tpl);
  if (JsonField(body, "fromImageRegistry")) image = image.empty() ? "(a registry image)" : image;
  if (image.empty()) return std::string("e2b-base:latest");
  const std::string repo = image.substr(0, image.find(':'));
  const std::string tag = image.find(':') == std::string::npos ? "latest" : image.substr(image.find(':') + 1);
  if (repo == "e2bdev/base" || repo == "e2bdev/code-interpreter") return std::string(repo == "e2bdev/base" ? "e2b-base:latest" : "code-interpreter:latest");
  if (repo == "debian" && (tag == "bookworm" || tag == "12" || tag == "stable" || tag == "latest" ||
                           tag == "bookworm-slim" || tag == "12-slim" || tag == "stable-slim"))
    return std::string("debian:bookworm");
  return Fail(Errc::kInvalidArgument, "fromImage " + image +
                                          ": SPACE builds from its own templates and pulls no images; use "
                                          "fromTemplate (e.g. \"base\", \"python\", \"debian:bookworm\") or "
                                          "fromImage(\"e2bdev/base\") / \"debian:bookworm\"");
}

struct Translated {
  std::string spec;
  std::vector<std::string> hashes;  // the COPY steps' uploads, in order
};

Result<Translated> ToSpacefile(const Json& body) {
  Translated t;
  auto from = FromLine(body);
  if (!from) return tl::unexpected(from.error());
  t.spec = "FROM " + *from + "\n";
  const Json* steps = JsonField(body, "steps");
  if (steps && !steps->is_array()) return Fail(Errc::kInvalidArgument, "steps must be an array");
  std::string user;  // the last USER set here ("" = the base's)
  int n = 0;
  for (const Json& st : steps ? *steps : Json::array()) {
    ++n;
    const std::string where = "steps[" + std::to_string(n - 1) + "]: ";
    if (!st.is_object()) return Fail(Errc::kInvalidArgument, where + "not an object");
    const std::string type = JsonStringOr(st, "type", "");
    std::vector<std::string> args;
    if (const Json* a = JsonField(st, "args"); a && a->is_array())
      for (const auto& x : *a) {
        if (!x.is_string()) return Fail(Errc::kInvalidArgument, where + "args must be strings");
        args.push_back(x.get<std::string>());
      }
    auto need = [&](size_t k) -> Status {
      if (args.size() < k) return Fail(Errc::kInvalidArgument, where + type + " needs " + std::to_string(k) + " args");
      return {};
    };
    if (type == "RUN") {
      SPACE_TRY(need(1));
      const bool as_other = args.size() > 1 && !args[1].empty();
      if (as_other) t.spec += "USER " + args[1] + "\n";
      t.spec += "RUN [\"/bin/sh\", \"-c\", " + JsonStr(args[0]) + "]\n";
      if (as_other) t.spec += "USER " + (user.empty() ? std::string("root") : user) + "\n";
    } else if (type == "COPY") {
      SPACE_TRY(need(2));
      const std::string hash = JsonStringOr(st, "filesHash", "");
      if (!ValidHash(hash)) return Fail(Errc::kInvalidArgument, where + "COPY needs the filesHash of its upload");
      t.hashes.push_back(hash);
      std::string flags;
      if (args.size() > 2 && !args[2].empty()) flags += "--chown=" + args[2] + " ";
      if (args.size() > 3 && !args[3].empty()) flags += "--chmod=" + args[3] + " ";
      // E2B copies what a wildcard matches into the destination, as a directory (its own
      // suite: copy("folder/*", "folder") then `cat folder/test.txt`); a Dockerfile needs
      // the trailing '/' for that when the wildcard matches several paths.
      std::string dest = args[1];
      if (args[0].find_first_of("*?[") != std::string::npos && !dest.empty() && dest.back() != '/')
        dest += '/';
      t.spec += "COPY " + flags + "[" + JsonStr(args[0]) + ", " + JsonStr(dest) + "]\n";
    } else if (type == "ENV") {
      if (args.size() % 2) return Fail(Errc::kInvalidArgument, where + "ENV wants key, value pairs");
      for (size_t i = 0; i + 1 < args.size(); i += 2) {
        std::string v;
        for (char c : args[i + 1]) {
          if (c == '"' || c == '\\' || c == '$') v += '\\';
          if (c == '\n') return Fail(Errc::kInvalidArgument, where + "ENV values are one line");
          v += c;
        }
        t.spec += "ENV " + args[i] + "=\"" + v + "\"\n";
      }
    } else if (type == "WORKDIR" || type == "USER") {
      SPACE_TRY(need(1));
      if (args[0].find('\n') != std::string::npos) return Fail(Errc::kInvalidArgument, where + type + " is one line");
      t.spec += type + " " + args[0] + "\n";
      if (type == "USER") user = args[0];
    } else {
      return Fail(Errc::kInvalidArgument, where + "step type \"" + type + "\" is not one SPACE builds (RUN, COPY, ENV, WORKDIR, USER)");
    }
  }
  if (std::string start = JsonStringOr(body, "startCmd", ""); !start.empty())
    t.spec += "CMD [\"/bin/sh\", \"-c\", " + JsonStr(start) + "]\n";
  if (std::string ready = JsonStringOr(body, "readyCmd", ""); !ready.empty()) {
    if (ready.find('\n') != std::string::npos) return Fail(Errc::kInvalidArgument, "readyCmd is one line");
    t.spec += "HEALTHCHECK CMD " + ready + "\n";
  }
  return t;
}

// The regular files of an uploaded tar, by path relative to the context root.
Status AddUpload(const std::string& tar, const std::string& scratch, std::map<std::string, std::string>* context,
                 uint64_t* total) {
  (void)sys::RemoveAll(scratch);
  SPACE_TRY(sys::MkdirAll(scratch, 0700));
  sys::SpawnOptions o;
  o.argv = {"tar", "-xf", tar, "-C", scratch, "--no-same-owner", "--no-same-permissions"};
  auto r = sys::RunChecked(o, 120000);
  if (!r) {
    (void)sys::RemoveAll(scratch);
    return Fail(Errc::kInvalidArgument, "an uploaded file archive does not unpack: " + r.error().message);
  }
  std::vector<std::string> todo = {""};
  Status st;
  while (!todo.empty() && st) {
    std::string rel = todo.back();
    todo.pop_back();
    DIR* d = ::opendir((scratch + "/" + rel).c_str());
    if (!d) continue;
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n == "." || n == "..") continue;
      std::string child = rel.empty() ? n : rel + "/" + n;
      struct stat sb;
      if (::lstat((scratch + "/" + child).c_str(), &sb) != 0) continue;
      if (S_ISDIR(sb.st_mode)) {
        todo.push_back(child);
      } else if (S_ISREG(sb.st_mode)) {
        *total += static_cast<uint64_t>(sb.st_size);
        if (*total > core::kMaxBuildContextBytes) {
          st = Fail(Errc::kResourceExhausted, "the COPY files exceed SPACE's build context limit of " +
                                                  std::to_string(core::kMaxBuildContextBytes >> 20) + " MiB");
          break;
        }
        auto bytes = sys::ReadFile(scratch + "/" + child);
        if (bytes) (*context)[child] = std::move(*bytes);
      }
    }
    ::closedir(d);
  }
  (void)sys::RemoveAll(scratch);
  return st;
}

std::string StatusOf(const store::OperationRecord& op) {
  if (op.state == "succeeded") return "ready";
  if (op.state == "failed") return "error";
  return "building";
}

// ---- routes

Awaitable<void> RequestBuild(Ctx& ctx) {
  core::Platform* p = ctx.platform;
  auto body = co_await ctx.ReadJson();
  if (!body || !body->is_object()) {
    // (Built outside the co_await: g++ 12 mishandles conditional temporaries inside one.)
    const std::string why = body ? std::string("want a JSON object") : body.error().message;
    co_await ReplyError(ctx, 400, why);
    co_return;
  }
  std::string name = JsonStringOr(*body, "name", JsonStringOr(*body, "alias", ""));
  std::vector<std::string> tags;
  if (const Json* t = JsonField(*body, "tags"); t && !t->is_null()) {
    if (!t->is_array()) {
      co_await ReplyError(ctx, 400, "tags must be an array of strings");
      co_return;
    }
    for (const auto& x : *t) {
      if (!x.is_string()) {
        co_await ReplyError(ctx, 400, "tags must be an array of strings");
        co_return;
      }
      tags.push_back(x.get<std::string>());
    }
  }
  std::string tag = "latest";
  if (auto colon = name.find(':'); colon != std::string::npos) {
    tag = name.substr(colon + 1);
    name.resize(colon);
    tags.insert(tags.begin(), tag);
  } else if (!tags.empty()) {
    tag = tags.front();
  }
  if (name.empty()) {
    co_await ReplyError(ctx, 400, "name is required");
    co_return;
  }
  if (tags.empty()) tags.push_back(tag);
  for (const auto& t : tags) {
    auto ok = core::ParseTemplateRef(name + ":" + t);
    if (!ok) {
      co_await ReplyError(ctx, 400, ok.error().message);
      co_return;
    }
  }
  BuildRequest b;
  b.build_id = NewUuidV4();
  b.name = name;
  b.tag = tag;
  b.tags = tags;
  b.created_ms = NowUnixMillis();
  auto saved = co_await ctx.Blocking([&] { return SaveBuild(p, b); });
  if (!saved) {
    co_await ReplyError(ctx, saved.error());
    co_return;
  }
  Json names = Json::array({name});
  Json reply = {{"templateID", name}, {"buildID", b.build_id}, {"public", false},
                {"aliases", names}, {"names", names}, {"tags", b.tags}};
  co_await ctx.Reply(202, reply);
}

Awaitable<void> FileLink(Ctx& ctx, const std::string& hash) {
  core::Platform* p = ctx.platform;
  if (!ValidHash(hash)) {
    co_await ReplyError(ctx, 400, "files hash must be 64 hex digits");
    co_return;
  }
  auto key = co_await ctx.Blocking([&] { return UploadKey(p); });
  if (!key) {
    co_await ReplyError(ctx, key.error());
    co_return;
  }
  const bool present = sys::Exists(Dir(p) + "/files/" + hash + ".tar");
  std::string host = ctx.Header(http::field::host);
  if (host.empty()) host = "127.0.0.1";
  Json reply = {{"present", present}};
  if (!present) reply["url"] = "http://" + host + "/e2b-template-files/" + hash + "?sig=" + Sign(*key, hash);
  co_await ctx.Reply(201, reply);
}

Awaitable<void> Upload(Ctx& ctx, const std::string& hash) {
  core::Platform* p = ctx.platform;
  auto key = co_await ctx.Blocking([&] { return UploadKey(p); });
  const std::string sig = ctx.Query("sig");
  if (!ValidHash(hash) || !key || sig.size() != crypto_auth_BYTES * 2 ||
      sodium_memcmp(sig.data(), Sign(*key, hash).data(), sig.size()) != 0) {
    co_await ReplyError(ctx, 403, "not a valid upload link");
    co_return;
  }
  const std::string dir = Dir(p) + "/files";
  auto made = sys::MkdirAll(dir, 0700);
  const std::string tmp = dir + "/.tmp-" + hash + "-" + NewId("up");
  if (!made) {
    co_await ReplyError(ctx, made.error());
    co_return;
  }
  auto fd = sys::Open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (!fd) {
    co_await ReplyError(ctx, fd.error());
    co_return;
  }
  const int out = fd->get();
  std::function<Awaitable<Status>(std::string_view)> sink = [&](std::string_view piece) -> Awaitable<Status> {
    co_return sys::WriteAll(out, piece);
  };
  auto st = co_await ctx.ReadBodyStream(kMaxUploadBytes, sink);
  fd->Reset();
  if (!st) {
    (void)::unlink(tmp.c_str());
    co_await ReplyError(ctx, st.error());
    co_return;
  }
  if (::rename(tmp.c_str(), (dir + "/" + hash + ".tar").c_str()) != 0) {
    (void)::unlink(tmp.c_str());
    co_await ReplyError(ctx, 500, "store the upload: " + std::string(std::strerror(errno)));
    co_return;
  }
  co_await ctx.ReplyBytes(200, "", "text/plain");
}

Awaitable<void> StartBuild(Ctx& ctx, const std::string& template_id, const std::string& build_id) {
  core::Platform* p = ctx.platform;
  auto b = co_await ctx.Blocking([&] { return LoadBuild(p, template_id, build_id); });
  if (!b) {
    co_await ReplyError(ctx, b.error());
    co_return;
  }
  if (!b->op.empty()) {
    co_await ReplyError(ctx, 409, "build " + build_id + " has started already");
    co_return;
  }
  auto body = co_await ctx.ReadJson();
  if (!body || !body->is_object()) {
    // (Built outside the co_await: g++ 12 mishandles conditional temporaries inside one.)
    const std::string why = body ? std::string("want a JSON object") : body.error().message;
    co_await ReplyError(ctx, 400, why);
    co_return;
  }
  auto t = ToSpacefile(*body);
  if (!t) {
    co_await ReplyError(ctx, t.error());
    co_return;
  }
  core::TemplateBuildRequest req;
  req.name = b->name;
  req.tag = b->tag;
  req.spec = t->spec;
  req.network = true;  // as on E2B: steps reach the network (under the always-denied set)
  const std::string files = Dir(p) + "/files/";
  auto ctxd = co_await ctx.Blocking([&]() -> Status {
    uint64_t total = 0;
    for (const auto& h : t->hashes) {
      if (!sys::Exists(files + h + ".tar"))
        return Fail(Errc::kInvalidArgument, "the files of hash " + h + " were not uploaded");
      SPACE_TRY(AddUpload(files + h + ".tar", Dir(p) + "/tmp-" + build_id, &req.context, &total));
    }
    return {};
  });
  if (!ctxd) {
    co_await ReplyError(ctx, ctxd.error());
    co_return;
  }
  auto op = co_await ctx.Blocking([&] { return p->BuildTemplate(req); });
  if (!op) {
    co_await ReplyError(ctx, op.error());
    co_return;
  }
  b->op = op->id;
  auto saved = co_await ctx.Blocking([&] { return SaveBuild(p, *b); });
  if (!saved) {
    co_await ReplyError(ctx, saved.error());
    co_return;
  }
  co_await ctx.ReplyBytes(202, "", "application/json");
}

Awaitable<void> BuildStatus(Ctx& ctx, const std::string& template_id, const std::string& build_id) {
  core::Platform* p = ctx.platform;
  auto b = co_await ctx.Blocking([&] { return LoadBuild(p, template_id, build_id); });
  if (!b) {
    co_await ReplyError(ctx, b.error());
    co_return;
  }
  int64_t offset = 0;
  if (std::string o = ctx.Query("logsOffset"); !o.empty()) {
    char* end = nullptr;
    offset = std::strtoll(o.c_str(), &end, 10);
    if (*end || offset < 0) {
      co_await ReplyError(ctx, 400, "logsOffset must be a non-negative integer");
      co_return;
    }
  }
  Json reply = {{"templateID", template_id}, {"buildID", build_id}, {"status", "waiting"},
                {"logs", Json::array()}, {"logEntries", Json::array()}};
  if (!b->op.empty()) {
    const std::string op_id = b->op;
    auto op = co_await ctx.Blocking([&] { return p->GetOperation(op_id); });
    if (!op) {
      co_await ReplyError(ctx, op.error());
      co_return;
    }
    auto log = co_await ctx.Blocking([&] { return p->TemplateBuildLog(op_id); });
    std::vector<std::string> lines;
    if (log) {
      std::istringstream in(*log);
      for (std::string line; std::getline(in, line);) lines.push_back(line);
    }
    const std::string ts = FormatRfc3339(op->updated_ms);
    for (size_t i = static_cast<size_t>(offset); i < lines.size() && i < static_cast<size_t>(offset) + kMaxLogEntries; ++i) {
      reply["logs"].push_back(lines[i]);
      reply["logEntries"].push_back({{"timestamp", ts}, {"level", "info"}, {"message", lines[i]}});
    }
    reply["status"] = StatusOf(*op);
    // The build's other tags, once it is built (the build itself made the first).
    if (op->state == "succeeded" && b->tags.size() > 1) {
      const std::string first = b->name + ":" + b->tag;
      auto tagged = co_await ctx.Blocking([&]() -> Status {
        for (const auto& t : b->tags) {
          if (t != b->tag) SPACE_TRY(p->TagTemplate(first, b->name + ":" + t));
        }
        return Ok();
      });
      if (!tagged) {
        co_await ReplyError(ctx, tagged.error());
        co_return;
      }
    }
    if (op->state == "failed") reply["reason"] = {{"message", op->error_message}};
  }
  co_await ctx.Reply(200, reply);
}

Awaitable<void> AliasExists(Ctx& ctx, const std::string& alias) {
  core::Platform* p = ctx.platform;
  auto list = co_await ctx.Blocking([&] { return p->ListTemplates(); });
  if (!list) {
    co_await ReplyError(ctx, list.error());
    co_return;
  }
  const std::string ref = TemplateRef(alias);
  for (const auto& t : *list) {
    if (t.name == alias || t.name + ":" + t.tag == ref) {
      Json reply = {{"templateID", t.name}, {"public", false}};
      co_await ctx.Reply(200, reply);
      co_return;
    }
  }
  co_await ReplyError(ctx, 404, "template " + alias + " not found");
}

}  // namespace

Awaitable<bool> RouteTemplates(Ctx& ctx) {
  const auto& s = ctx.segments;
  const std::string& m = ctx.method;
  // The upload link carries its own signature, not the API key.
  if (s.size() == 2 && s[0] == "e2b-template-files" && m == "PUT") {
    co_await Upload(ctx, s[1]);
    co_return true;
  }
  if (co_await RouteTemplateTags(ctx)) co_return true;
  const bool ours = (s.size() == 2 && s[0] == "v3" && s[1] == "templates" && m == "POST") ||
                    (s.size() == 4 && s[0] == "templates" && s[2] == "files" && m == "GET") ||
                    (s.size() == 5 && s[0] == "v2" && s[1] == "templates" && s[3] == "builds" && m == "POST") ||
                    (s.size() == 5 && s[0] == "templates" && s[2] == "builds" && s[4] == "status" && m == "GET") ||
                    (s.size() == 3 && s[0] == "templates" && s[1] == "aliases" && m == "GET");
  if (!ours) co_return false;
  if (!ApiKeyValid(ctx)) {
    co_await ReplyError(ctx, 401, "missing or invalid API key (X-API-KEY)");
    co_return true;
  }
  if (s[0] == "v3") co_await RequestBuild(ctx);
  else if (s[0] == "v2") co_await StartBuild(ctx, s[2], s[4]);
  else if (s[1] == "aliases") co_await AliasExists(ctx, s[2]);
  else if (s[2] == "files") co_await FileLink(ctx, s[3]);
  else co_await BuildStatus(ctx, s[1], s[3]);
  co_return true;
}

}  // namespace space::api::e2b
