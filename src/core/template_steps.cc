// Template builds from a spec: each RUN in a throwaway build sandbox whose root becomes the
// step's layer, each COPY an edit of a copy of the previous layer (see template_build.cc).
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <set>
#include <sstream>

#include "core/internal.h"
#include "core/template_build_internal.h"
#include "core/templates.h"
#include "sys/sys.h"
#include "template/template.h"

namespace space::core::build {

namespace {

// ------------------------------------------------------------ writing into a root safely
//
// A root's tree was made by earlier build steps, i.e. by untrusted commands: any component
// may be a symlink pointing anywhere on the host. Every path below is walked from the root
// one component at a time with O_NOFOLLOW, so nothing is read or written outside it.

Result<sys::UniqueFd> OpenDirIn(int root_fd, const std::string& rel, bool create, uid_t uid,
                                gid_t gid) {
  int cur = ::dup(root_fd);
  if (cur < 0) return ErrnoFail("dup");
  sys::UniqueFd fd(cur);
  std::stringstream ss(rel);
  std::string comp;
  while (std::getline(ss, comp, '/')) {
    if (comp.empty() || comp == ".") continue;
    if (comp == "..") return Fail(Errc::kInvalidArgument, "path with '..': " + rel);
    int next = ::openat(fd.get(), comp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0 && errno == ENOENT && create) {
      if (::mkdirat(fd.get(), comp.c_str(), 0755) != 0 && errno != EEXIST)
        return ErrnoFail("mkdir " + rel);
      next = ::openat(fd.get(), comp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (next >= 0 && ::fchown(next, uid, gid) != 0) {
        ::close(next);
        return ErrnoFail("chown " + rel);
      }
    }
    if (next < 0) {
      if (errno == ENOTDIR || errno == ELOOP)
        return Fail(Errc::kInvalidArgument, "\"/" + rel + "\": a component is not a directory");
      return ErrnoFail("open /" + rel);
    }
    fd = sys::UniqueFd(next);
  }
  return fd;
}

Status WriteFileIn(int root_fd, const std::string& rel, std::string_view data, mode_t mode,
                   uid_t uid, gid_t gid, uid_t dir_uid, gid_t dir_gid) {
  size_t slash = rel.rfind('/');
  std::string dir = slash == std::string::npos ? "" : rel.substr(0, slash);
  std::string base = slash == std::string::npos ? rel : rel.substr(slash + 1);
  if (base.empty() || base == "." || base == "..")
    return Fail(Errc::kInvalidArgument, "bad destination file name /" + rel);
  auto dfd = OpenDirIn(root_fd, dir, true, dir_uid, dir_gid);
  if (!dfd) return tl::unexpected(dfd.error());
  struct stat st;
  if (::fstatat(dfd->get(), base.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (S_ISDIR(st.st_mode))
      return Fail(Errc::kInvalidArgument, "destination /" + rel + " is a directory");
    if (::unlinkat(dfd->get(), base.c_str(), 0) != 0) return ErrnoFail("replace /" + rel);
  }
  int fd = ::openat(dfd->get(), base.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                    0600);
  if (fd < 0) return ErrnoFail("create /" + rel);
  sys::UniqueFd f(fd);
  SPACE_TRY(sys::WriteAll(f.get(), data));
  if (::fchown(f.get(), uid, gid) != 0) return ErrnoFail("chown /" + rel);
  if (::fchmod(f.get(), mode) != 0) return ErrnoFail("chmod /" + rel);
  return Ok();
}

// Reads a small file of a root (e.g. /etc/passwd), without following symlinks.
Result<std::string> ReadFileIn(int root_fd, const std::string& rel) {
  size_t slash = rel.rfind('/');
  auto dfd = OpenDirIn(root_fd, slash == std::string::npos ? "" : rel.substr(0, slash), false, 0, 0);
  if (!dfd) return tl::unexpected(dfd.error());
  int fd = ::openat(dfd->get(), rel.substr(slash + 1).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return ErrnoFail("open /" + rel);
  sys::UniqueFd f(fd);
  return sys::ReadAll(f.get());
}

// Resolves a user or group name (or number) through the root's /etc/passwd or /etc/group.
Result<uint32_t> LookupId(int root_fd, const std::string& name, bool group) {
  if (name.empty()) return Fail(Errc::kInvalidArgument, "empty user or group");
  if (std::all_of(name.begin(), name.end(), ::isdigit)) {
    if (name.size() > 9) return Fail(Errc::kInvalidArgument, "id too large: " + name);
    uint32_t id = static_cast<uint32_t>(std::stoul(name));
    if (id >= 65536) return Fail(Errc::kInvalidArgument, "id outside 0-65535: " + name);
    return id;
  }
  auto text = ReadFileIn(root_fd, group ? "etc/group" : "etc/passwd");
  if (text) {
    std::stringstream ss(*text);
    std::string line;
    while (std::getline(ss, line)) {
      std::vector<std::string> parts;
      std::stringstream ls(line);
      for (std::string f; std::getline(ls, f, ':');) parts.push_back(f);
      if (parts.size() >= 3 && parts[0] == name) {
        try {
          uint32_t id = static_cast<uint32_t>(std::stoul(parts[2]));
          if (id < 65536) return id;
        } catch (...) {
        }
      }
    }
  }
  return Fail(Errc::kInvalidArgument, std::string("unknown ") + (group ? "group " : "user ") + name);
}

// ------------------------------------------------------------ the build

// Runs argv in a build sandbox made from `layer`; on exit 0 stores the root as layer
// `key_hex`. The sandbox (instance and root) is gone when this returns, whatever happened.
Status RunStep(Build& b, const std::string& layer, const std::string& key_hex,
               const tmpl::Step& step, const ImageConfig& cfg) {
  Platform::Impl& impl = *b.impl;
  auto rt_it = impl.runtimes.find(impl.config.default_runtime);
  if (rt_it == impl.runtimes.end()) return Fail(Errc::kInternal, "no default runtime");
  runtime::Runtime* rt = rt_it->second.get();
  const std::string id = NewId("bld");
  b.log->Line("  build sandbox " + id);

  struct RunState {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    int exit_code = -1;
    int signal = 0;
    std::string lost;
    uint64_t size[2] = {0, 0};
  };
  auto rs = std::make_shared<RunState>();
  std::shared_ptr<AgentSession> session;
  bool started = false;
  // Cleanup on every path: session, instance, root.
  struct Cleanup {
    std::function<void()> fn;
    ~Cleanup() { fn(); }
  } cleanup{[&] {
    if (session) session->Close();
    if (started) {
      if (auto st = impl.DestroyInstance(rt, id); !st)
        spdlog::warn("template build: destroy {}: {}", id, st.error().message);
    }
    if (auto st = impl.storage->DeleteRoot(id); !st)
      spdlog::warn("template build: delete root {}: {}", id, st.error().message);
  }};

  auto root = impl.storage->CreateRoot(id, layer, 0);
  if (!root) return tl::unexpected(std::move(root.error()).Wrap("create build root"));
  runtime::InstanceSpec spec;
  spec.id = id;
  spec.rootfs = *root;
  spec.hostname = "build";
  spec.network = b.req.network;
  spec.allow_setuid = cfg.allow_setuid;  // RUN sudo … after USER, as in the sandboxes
  bool have_path = false;
  for (const auto& [k, v] : cfg.env) {
    spec.env.push_back(k + "=" + v);
    if (k == "PATH") have_path = true;
  }
  if (!have_path) spec.env.push_back(std::string("PATH=") + kDefaultPath);
  started = true;  // a failed Start may leave parts behind: Destroy is ok if missing
  std::map<std::string, std::string> net_env;
  if (b.req.network) {
    // RUN steps reach every public destination (apt-get, pip install), under the same
    // always-denied set as sandboxes.
    if (!impl.network) return Fail(Errc::kUnavailable, "spaced runs without networking");
    net::Policy policy;
    policy.mode = net::Policy::Mode::kInternet;
    auto attached = impl.network->Attach(id, policy);
    if (!attached) return tl::unexpected(std::move(attached.error()).Wrap("build sandbox network"));
    spec.netns_path = attached->netns_path;
    spec.resolv_conf = attached->resolv_conf;
    net_env = attached->env;
  }
  SPACE_TRY_WRAP(rt->Start(spec), "start build sandbox");

  AgentSession::Handlers h;
  BuildLog* log = b.log.get();
  h.on_output = [rs, log](uint32_t, store::OutputStream s, uint64_t offset,
                          store::OutputBytes& data) -> Result<uint64_t> {
    auto view = data.View();
    if (!view) return tl::unexpected(view.error());
    std::string_view bytes = *view;
    std::lock_guard l(rs->mu);
    uint64_t& size = rs->size[s == store::OutputStream::kStderr ? 1 : 0];
    if (offset + bytes.size() > size && offset <= size) {
      log->Write(bytes.substr(size - offset));
      size = offset + bytes.size();
    }
    return size;
  };
  h.on_exit = [rs](uint32_t, const Json& exit) -> Status {
    std::lock_guard l(rs->mu);
    rs->exit_code = static_cast<int>(JsonIntOr(exit, "exit_code", -1));
    rs->signal = static_cast<int>(JsonIntOr(exit, "signal", 0));
    rs->done = true;
    rs->cv.notify_all();
    return Ok();
  };
  h.on_disconnect = [rs](const Error& why) {
    std::lock_guard l(rs->mu);
    if (!rs->done) rs->lost = why.message;
    rs->done = true;
    rs->cv.notify_all();
  };
  Json hello;
  auto s = AgentSession::Connect(rt->AgentSocketPath(id), std::move(h),
                                 impl.config.agent_connect_timeout_ms, &hello);
  if (!s) return tl::unexpected(std::move(s.error()).Wrap("connect to build sandbox agent"));
  session = *s;

  // The RUN's environment: the image's ENV, then ARGs for names ENV did not set.
  Json env = Json::object();
  for (const auto& [k, v] : cfg.env) env[k] = v;
  for (const auto& kv : step.run_env) {
    size_t eq = kv.find('=');
    std::string k = kv.substr(0, eq);
    if (!cfg.HasEnv(k)) env[k] = eq == std::string::npos ? "" : kv.substr(eq + 1);
  }
  for (const auto& [k, v] : net_env) {
    if (!env.contains(k)) env[k] = v;
  }
  std::string user = cfg.user.substr(0, cfg.user.find(':'));
  Json exec = {{"op", "exec"}, {"stream", 1},   {"id", "run"},  {"argv", tmpl::RunArgv(step)},
               {"env", env},   {"stdin", false}, {"timeout_ms", 0}, {"cwd", cfg.workdir},
               {"user", user}};
  auto resp = session->Call(exec, {}, impl.config.agent_request_timeout_ms);
  if (!resp) {
    return Fail(Errc::kInvalidArgument, "line " + std::to_string(step.line) + ": RUN could not start: " +
                                            resp.error().message);
  }
  {
    std::unique_lock l(rs->mu);
    while (!rs->done) {
      rs->cv.wait_for(l, std::chrono::milliseconds(200));
      std::lock_guard ql(impl.q_mu);
      if (impl.stopping) return Fail(Errc::kUnavailable, "spaced is shutting down");
    }
  }
  if (!rs->lost.empty())
    return Fail(Errc::kInternal, "line " + std::to_string(step.line) +
                                     ": build sandbox agent lost: " + rs->lost);
  if (rs->exit_code != 0) {
    std::string how = rs->signal ? "was killed by signal " + std::to_string(rs->signal)
                                 : "exited with code " + std::to_string(rs->exit_code);
    return Fail(Errc::kInvalidArgument, "line " + std::to_string(step.line) + ": RUN " + how);
  }
  session->Close();
  session.reset();
  SPACE_TRY_WRAP(impl.DestroyInstance(rt, id), "stop build sandbox");
  started = false;
  if (auto st = impl.storage->ImportLayerFromRoot(key_hex, id); !st) {
    if (!(st.error().code == Errc::kConflict && impl.storage->HasLayer(key_hex)))
      return tl::unexpected(std::move(st.error()).Wrap("store layer"));
  }
  return Ok();
}

// Files of the context a COPY source names: (relative path in context, path below dest).
std::vector<std::pair<std::string, std::string>> CopySources(
    const std::map<std::string, std::string>& context, const std::string& src, bool* is_dir) {
  std::vector<std::pair<std::string, std::string>> out;
  *is_dir = false;
  if (src == "." || src.empty()) {
    *is_dir = true;
    for (const auto& [p, _] : context) out.emplace_back(p, p);
    return out;
  }
  if (context.count(src)) {
    out.emplace_back(src, src.substr(src.rfind('/') + 1));
    return out;
  }
  std::string prefix = src + "/";
  for (auto it = context.lower_bound(prefix); it != context.end() && StartsWith(it->first, prefix);
       ++it) {
    *is_dir = true;
    out.emplace_back(it->first, it->first.substr(prefix.size()));
  }
  return out;
}

// One source a COPY step copies: a source as written, or one path a wildcard matched.
struct CopySource {
  size_t arg = 0;       // which of the step's sources it comes from
  bool wildcard = false;
  std::string path;     // the context path (the match, for a wildcard)
  bool is_dir = false;
  std::vector<std::pair<std::string, std::string>> files;  // as CopySources returns them
};

// The step's sources in copy order, each wildcard replaced by its matches (Docker's order,
// tmpl::MatchCopyPattern); every one is then resolved by CopySources as if written out.
// kInvalidArgument, naming the line, for a source not in the context, a wildcard matching
// nothing, and a wildcard matching several paths for a destination without a trailing '/'
// (Docker: one match is copied as a source of its own would be, several need a directory).
Result<std::vector<CopySource>> ExpandCopySources(const std::map<std::string, std::string>& context,
                                                  const tmpl::Step& step) {
  const std::string line = "line " + std::to_string(step.line) + ": ";
  const std::string& dest = step.args.back();
  std::vector<CopySource> out;
  for (size_t i = 0; i + 1 < step.args.size(); ++i) {
    const std::string& src = step.args[i];
    std::vector<std::string> paths = {src};
    const bool wildcard = tmpl::IsCopyPattern(src);
    if (wildcard) {
      paths = tmpl::MatchCopyPattern(src, context);
      if (paths.empty())
        return Fail(Errc::kInvalidArgument, line + "COPY source \"" + src +
                                                "\" matches nothing in the build context (no "
                                                "source files were specified)");
      if (paths.size() > 1 && dest.back() != '/')
        return Fail(Errc::kInvalidArgument,
                    line + "COPY source \"" + src + "\" matches " + std::to_string(paths.size()) +
                        " paths; copying several needs a destination directory ending in '/'");
    }
    for (auto& p : paths) {
      CopySource c{i, wildcard, std::move(p)};
      c.files = CopySources(context, c.path, &c.is_dir);
      if (c.files.empty())
        return Fail(Errc::kInvalidArgument,
                    line + "COPY source \"" + src + "\" is not in the build context");
      out.push_back(std::move(c));
    }
  }
  return out;
}

}  // namespace

// A digest over what a COPY step reads, so a changed context file invalidates the cache.
// Each file is keyed by where it lands and its bytes; a wildcard's matches are keyed too,
// since whether a match is a file or a directory decides where its files land.
Result<std::string> CopyDigest(const std::map<std::string, std::string>& context,
                               const tmpl::Step& step) {
  auto sources = ExpandCopySources(context, step);
  if (!sources) return tl::unexpected(sources.error());
  std::string acc;
  for (const CopySource& c : *sources) {
    const std::string i = std::to_string(c.arg);
    if (c.wildcard)
      acc += i + ":match:" + std::to_string(c.path.size()) + ":" + c.path + (c.is_dir ? ":d" : ":f") + "\n";
    for (const auto& [p, rel] : c.files) {
      const std::string& data = context.at(p);
      acc += i + ":" + std::to_string(rel.size()) + ":" + rel + ":" + std::to_string(data.size()) +
             ":" + tmpl::Sha256Bytes(data) + "\n";
    }
  }
  return tmpl::Sha256Bytes(acc);
}

// Applies `fill` to a fresh root made from `layer`, then stores it as layer `key_hex`.
namespace {

Status LayerFromRootEdit(Build& b, const std::string& layer, const std::string& key_hex,
                         const std::function<Status(int root_fd)>& fill) {
  Platform::Impl& impl = *b.impl;
  const std::string id = NewId("bld");
  auto root = impl.storage->CreateRoot(id, layer, 0);
  if (!root) return tl::unexpected(std::move(root.error()).Wrap("create build root"));
  auto st = [&]() -> Status {
    auto fd = sys::Open(*root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (!fd) return tl::unexpected(fd.error());
    SPACE_TRY(fill(fd->get()));
    if (auto s = impl.storage->ImportLayerFromRoot(key_hex, id); !s) {
      if (!(s.error().code == Errc::kConflict && impl.storage->HasLayer(key_hex)))
        return tl::unexpected(std::move(s.error()).Wrap("store layer"));
    }
    return Ok();
  }();
  if (auto d = impl.storage->DeleteRoot(id); !d)
    spdlog::warn("template build: delete root {}: {}", id, d.error().message);
  return st;
}

Status CopyStep(Build& b, const std::string& layer, const std::string& key_hex,
                const tmpl::Step& step) {
  const uint32_t shift = b.impl->config.uid_shift;
  const std::string line = "line " + std::to_string(step.line) + ": ";
  return LayerFromRootEdit(b, layer, key_hex, [&](int root_fd) -> Status {
    uint32_t uid = 0, gid = 0;
    if (!step.chown.empty()) {
      std::string u = step.chown.substr(0, step.chown.find(':'));
      std::string g = step.chown.find(':') == std::string::npos
                          ? "" : step.chown.substr(step.chown.find(':') + 1);
      auto uid_r = LookupId(root_fd, u, false);
      if (!uid_r) return Fail(Errc::kInvalidArgument, line + uid_r.error().message);
      uid = gid = *uid_r;
      if (!g.empty()) {
        auto gid_r = LookupId(root_fd, g, true);
        if (!gid_r) return Fail(Errc::kInvalidArgument, line + gid_r.error().message);
        gid = *gid_r;
      }
    }
    mode_t mode = step.chmod.empty() ? 0644 : static_cast<mode_t>(std::stoul(step.chmod, nullptr, 8));
    const std::string& dest = step.args.back();
    auto sources = ExpandCopySources(b.req.context, step);
    if (!sources) return tl::unexpected(sources.error());
    for (const CopySource& c : *sources) {
      bool into_dir = c.is_dir || sources->size() > 1 || (!dest.empty() && dest.back() == '/');
      if (!into_dir && OpenDirIn(root_fd, dest.substr(1), false, 0, 0)) into_dir = true;
      for (const auto& [p, rel] : c.files) {
        std::string target = into_dir ? dest + (dest.back() == '/' ? "" : "/") + rel : dest;
        while (!target.empty() && target[0] == '/') target.erase(0, 1);
        auto st = WriteFileIn(root_fd, target, b.req.context.at(p), mode, shift + uid, shift + gid,
                              shift + uid, shift + gid);
        if (!st) return Fail(st.error().code, line + "COPY " + p + ": " + st.error().message);
      }
    }
    return Ok();
  });
}

Result<std::string> EnsureScratchLayer(Platform::Impl& impl) {
  auto tmp = sys::TempDir::Create(impl.config.data_dir + "/tmp", "scratch-");
  if (!tmp) return tl::unexpected(tmp.error());
  auto digest = TreeDigest(tmp->path());
  if (!digest) return tl::unexpected(digest.error());
  if (!impl.storage->HasLayer(Hex(*digest))) {
    auto st = impl.storage->ImportLayer(Hex(*digest), tmp->path(), impl.config.uid_shift);
    if (!st && !impl.storage->HasLayer(Hex(*digest))) return tl::unexpected(st.error());
  }
  return Hex(*digest);
}

// Resolves FROM to (layer digest "sha256:...", config). kNotFound if unknown.
Result<std::pair<std::string, Json>> ResolveFrom(Platform::Impl& impl, const tmpl::FromRef& from) {
  switch (from.kind) {
    case tmpl::FromRef::Kind::kScratch: {
      auto hex = EnsureScratchLayer(impl);
      if (!hex) return tl::unexpected(hex.error());
      return std::make_pair("sha256:" + *hex, Json{{"env", Json::array()}, {"workdir", "/"},
                                                   {"user", "root"}});
    }
    case tmpl::FromRef::Kind::kNameTag: {
      auto t = impl.store->GetTemplate(from.name, from.tag);
      if (!t) {
        if (t.error().code == Errc::kNotFound)
          return Fail(Errc::kNotFound, "FROM: unknown template " + from.name + ":" + from.tag);
        return tl::unexpected(t.error());
      }
      if (!impl.storage->HasLayer(Hex(t->digest)))
        return Fail(Errc::kNotFound, "FROM: the layer of " + from.name + ":" + from.tag + " is missing");
      return std::make_pair(t->digest, t->config);
    }
    case tmpl::FromRef::Kind::kDigest: {
      if (!impl.storage->HasLayer(Hex(from.digest)))
        return Fail(Errc::kNotFound, "FROM: no layer " + from.digest);
      // The config of a template with that digest, if one exists.
      Json cfg = {{"env", Json::array({std::string("PATH=") + kDefaultPath})}, {"workdir", "/"},
                  {"user", "root"}};
      if (auto ts = impl.store->ListTemplates()) {
        for (const auto& t : *ts) {
          if (t.digest == from.digest) {
            cfg = t.config;
            break;
          }
        }
      }
      return std::make_pair(from.digest, cfg);
    }
  }
  return Fail(Errc::kInternal, "bad FROM");
}

}  // namespace

tmpl::ParseOptions ParseOptionsFor(const TemplateBuildRequest& req, const Json& base_config) {
  tmpl::ParseOptions po;
  po.build_args = req.build_args;
  ImageConfig c = ImageConfig::FromJson(base_config);
  for (const auto& [k, v] : c.env) po.base_env[k] = v;
  po.base_workdir = c.workdir.empty() || c.workdir[0] != '/' ? "/" : c.workdir;
  return po;
}

Result<Json> BuildFromSpec(Build& b) {
  Platform::Impl& impl = *b.impl;
  auto first = tmpl::ParseSpec(b.req.spec, ParseOptionsFor(b.req, Json::object()));
  if (!first) return tl::unexpected(first.error());
  auto base = ResolveFrom(impl, first->from);
  if (!base) return tl::unexpected(base.error());
  auto spec = tmpl::ParseSpec(b.req.spec, ParseOptionsFor(b.req, base->second));
  if (!spec) return tl::unexpected(spec.error());
  for (const auto& w : spec->warnings) b.log->Line("warning: " + w);
  b.steps = static_cast<int>(spec->steps.size());
  b.log->Line("FROM " + first->from.ToString() + " (" + base->first + ")");

  ImageConfig cfg = ImageConfig::FromJson(base->second);
  if (!spec->start_cmd.empty()) {
    cfg.start_cmd = spec->start_cmd;
    cfg.ready_cmd.clear();  // a new start command brings its own check, or none
  }
  if (!spec->ready_cmd.empty()) cfg.ready_cmd = spec->ready_cmd;
  if (spec->allow_setuid) cfg.allow_setuid = *spec->allow_setuid;
  std::string layer = Hex(base->first);  // the filesystem so far
  std::string key = first->from.kind == tmpl::FromRef::Kind::kScratch ? "scratch" : base->first;
  for (int k = 0; k < b.steps; ++k) {
    const tmpl::Step& step = spec->steps[k];
    b.Progress(k);
    b.log->Line("[" + std::to_string(k + 1) + "/" + std::to_string(b.steps) + "] line " +
                std::to_string(step.line) + ": " + step.text);
    std::string copy_digest;
    if (step.kind == tmpl::StepKind::kCopy) {
      auto d = CopyDigest(b.req.context, step);
      if (!d) return tl::unexpected(d.error());
      copy_digest = *d;
    }
    key = tmpl::StepCacheKey(key, step, copy_digest);
    const std::string key_hex = Hex(key);
    const int64_t t0 = MonotonicNanos();
    switch (step.kind) {
      case tmpl::StepKind::kEnv:
        for (const auto& kv : step.args) cfg.SetEnv(kv);
        b.log->Line("  config");
        continue;
      case tmpl::StepKind::kUser:
        cfg.user = step.args.at(0);
        b.log->Line("  config");
        continue;
      case tmpl::StepKind::kWorkdir: {
        cfg.workdir = step.args.at(0);
        // Docker creates the directory; do it in a layer when the parent lacks it.
        auto lp = impl.storage->LayerPath(layer);
        if (!lp) return tl::unexpected(lp.error());
        struct stat st;
        bool exists = ::lstat((*lp + cfg.workdir).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
        if (exists) {
          b.log->Line("  config");
          continue;
        }
        if (impl.storage->HasLayer(key_hex)) {
          b.log->Line("  cached");
        } else {
          const uint32_t shift = impl.config.uid_shift;
          std::string rel = cfg.workdir.substr(1);
          SPACE_TRY(LayerFromRootEdit(b, layer, key_hex, [&](int root_fd) -> Status {
            auto d = OpenDirIn(root_fd, rel, true, shift, shift);
            if (!d) return tl::unexpected(d.error());
            return Ok();
          }));
        }
        layer = key_hex;
        continue;
      }
      case tmpl::StepKind::kRun:
      case tmpl::StepKind::kCopy:
        break;
    }
    if (impl.storage->HasLayer(key_hex)) {
      b.log->Line("  cached");
    } else if (step.kind == tmpl::StepKind::kRun) {
      SPACE_TRY(RunStep(b, layer, key_hex, step, cfg));
      b.log->Line("  done in " + std::to_string((MonotonicNanos() - t0) / 1000000) + " ms");
    } else {
      SPACE_TRY(CopyStep(b, layer, key_hex, step));
      b.log->Line("  done in " + std::to_string((MonotonicNanos() - t0) / 1000000) + " ms");
    }
    layer = key_hex;
  }
  b.Progress(b.steps);
  return Json{{"digest", "sha256:" + layer}, {"config", cfg.ToJson()}};
}

}  // namespace space::core::build
