// Built-in templates: the ones that ship with SPACE besides `base`.
//
// - `debian:bookworm`: Debian 12 (minbase) made by debootstrap from the Debian mirror the
//   host's own apt sources name; the host's apt sources are copied in, so apt inside reaches
//   the same mirrors (the `debian` egress preset).
// - every `<dir>/<name>/Spacefile` under Config::builtin_templates_dir: `<name>:latest`,
//   built from that spec (network on) with the other files of its directory as context.
//
// A built-in is built the first time it is asked for (a create naming it, POST /v1/templates
// with "builtin", or spaced --prepare-template), one build at a time, in an operation of kind
// template_build whose log shows the progress. What it is FROM is built first, in the same
// operation. Each result is keyed by its recipe (the spec and context bytes, and its base's
// key) and kept as a tarball in Config::template_cache_dir, shared by data dirs: another data
// dir with the same recipe imports it instead of building it.
#include <dirent.h>
#include <fcntl.h>
#include <sodium.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <sstream>

#include "core/internal.h"
#include "core/template_archive.h"
#include "core/template_build_internal.h"
#include "core/templates.h"
#include "sys/sys.h"
#include "template/template.h"

namespace space::core {

using namespace build;

namespace {

constexpr const char* kRecipeVersion = "space-builtin/1";
constexpr int64_t kDebootstrapTimeoutMs = 30 * 60 * 1000;

struct Builtin {
  std::string name, tag;
  bool debootstrap = false;
  std::string dir;   // Spacefile builtins: the directory holding Spacefile and its context
  std::string spec;  // its text
  std::map<std::string, std::string> context;
  std::string from_name, from_tag;  // what FROM names ("" for scratch / digests)
  std::string key;                  // hex sha256 of the recipe, including its base's key
  std::string Ref() const { return name + ":" + tag; }
};

Result<std::vector<std::string>> ListDir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return ErrnoFail("open " + dir);
  std::vector<std::string> out;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::string Sha256Hex(std::string_view data) {
  unsigned char h[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(h, reinterpret_cast<const unsigned char*>(data.data()), data.size());
  return HexEncode(std::string_view(reinterpret_cast<char*>(h), sizeof h));
}

void AddField(std::string* out, std::string_view v) {
  *out += std::to_string(v.size());
  *out += ':';
  out->append(v);
  *out += '\n';
}

// Reads the files of a Spacefile's directory (all but Spacefile itself) as a build context.
Status ReadContext(const std::string& root, const std::string& rel,
                   std::map<std::string, std::string>* out, uint64_t* total) {
  std::string dir = rel.empty() ? root : root + "/" + rel;
  auto names = ListDir(dir);
  if (!names) return tl::unexpected(names.error());
  for (const auto& n : *names) {
    std::string r = rel.empty() ? n : rel + "/" + n;
    if (r == "Spacefile" || n == "__pycache__" || n.ends_with(".pyc")) continue;
    struct stat st;
    if (::lstat((root + "/" + r).c_str(), &st) != 0) return ErrnoFail("stat " + root + "/" + r);
    if (S_ISDIR(st.st_mode)) {
      SPACE_TRY(ReadContext(root, r, out, total));
    } else if (S_ISREG(st.st_mode)) {
      auto data = sys::ReadFile(root + "/" + r);
      if (!data) return tl::unexpected(data.error());
      *total += data->size();
      if (*total > kMaxBuildContextBytes)
        return Fail(Errc::kTooLarge, "built-in template context " + root + " is over 16 MiB");
      (*out)[r] = std::move(*data);
    }
  }
  return Ok();
}

// The Debian mirror the host's apt sources use for bookworm's main component.
Result<std::string> HostDebianMirror() {
  auto first_uri = [](const std::string& text, bool deb822) -> std::string {
    std::istringstream in(text);
    std::string line;
    if (deb822) {
      // Stanzas separated by blank lines: URIs + Suites containing exactly "bookworm".
      std::string uris, suites;
      auto flush = [&]() -> std::string {
        std::string r;
        std::istringstream s(suites);
        std::string w;
        bool ok = false;
        while (s >> w) ok = ok || w == "bookworm";
        if (ok) {
          std::istringstream u(uris);
          u >> r;
        }
        uris.clear();
        suites.clear();
        return r;
      };
      while (std::getline(in, line)) {
        if (!line.empty() && line[0] == '#') continue;
        if (line.find_first_not_of(" \t\r") == std::string::npos) {
          if (auto r = flush(); !r.empty()) return r;
          continue;
        }
        if (StartsWith(line, "URIs:")) uris = line.substr(5);
        if (StartsWith(line, "Suites:")) suites = line.substr(7);
      }
      return flush();
    }
    while (std::getline(in, line)) {
      std::istringstream s(line);
      std::vector<std::string> w;
      std::string x;
      while (s >> x) w.push_back(x);
      if (w.size() < 3 || w[0] != "deb") continue;
      size_t i = 1;
      if (StartsWith(w[i], "[")) {
        while (i < w.size() && w[i].back() != ']') ++i;
        ++i;
      }
      if (i + 1 < w.size() && w[i + 1] == "bookworm") return w[i];
    }
    return "";
  };
  if (auto t = sys::ReadFile("/etc/apt/sources.list")) {
    if (auto r = first_uri(*t, false); !r.empty()) return r;
  }
  if (auto names = ListDir("/etc/apt/sources.list.d")) {
    std::vector<std::string> sorted = *names;
    std::sort(sorted.begin(), sorted.end());
    for (const auto& n : sorted) {
      bool d822 = n.ends_with(".sources");
      if (!d822 && !n.ends_with(".list")) continue;
      if (auto t = sys::ReadFile("/etc/apt/sources.list.d/" + n)) {
        if (auto r = first_uri(*t, d822); !r.empty()) return r;
      }
    }
  }
  return Fail(Errc::kUnavailable,
              "the host's apt sources name no Debian mirror for bookworm (needed to build "
              "debian:bookworm)");
}

// Runs argv with its output appended to the build log; kills it at the deadline.
Status RunLogged(Build& b, std::vector<std::string> argv, int64_t timeout_ms) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return ErrnoFail("pipe");
  sys::UniqueFd rd(fds[0]), wr(fds[1]);
  sys::SpawnOptions so;
  so.argv = argv;
  so.stdout_fd = wr.get();
  so.stderr_fd = wr.get();
  so.new_session = true;
  so.die_with_parent = true;
  auto child = sys::Spawn(so);
  if (!child) return tl::unexpected(child.error());
  wr.Reset();
  const int64_t deadline = MonotonicNanos() + timeout_ms * 1000000;
  char buf[8192];
  std::string line;
  for (;;) {
    ssize_t n = ::read(rd.get(), buf, sizeof buf);
    if (n > 0) {
      b.log->Write(std::string_view(buf, static_cast<size_t>(n)));
    } else if (n == 0 || (n < 0 && errno != EINTR)) {
      break;
    }
    if (MonotonicNanos() > deadline) {
      ::kill(-child->pid(), SIGKILL);
      (void)child->Wait();
      return Fail(Errc::kDeadlineExceeded, argv[0] + " did not finish in time");
    }
  }
  auto ws = child->Wait();
  if (!ws) return tl::unexpected(ws.error());
  if (!WIFEXITED(*ws) || WEXITSTATUS(*ws) != 0)
    return Fail(Errc::kInternal, argv[0] + " failed (exit " +
                                     std::to_string(WIFEXITED(*ws) ? WEXITSTATUS(*ws) : -1) +
                                     "); see the build log");
  return Ok();
}

// debootstrap into `rootfs` (a fresh directory), in a private mount namespace so that the
// /proc and /sys it mounts inside go away with it.
Status Debootstrap(Build& b, const std::string& rootfs) {
  auto mirror = HostDebianMirror();
  if (!mirror) return tl::unexpected(mirror.error());
  b.log->Line("debootstrap --variant=minbase bookworm (the host's Debian mirror)");
  SPACE_TRY(RunLogged(b,
                      {"unshare", "--mount", "--propagation", "private", "debootstrap",
                       "--variant=minbase", "--include=ca-certificates", "bookworm", rootfs,
                       *mirror},
                      kDebootstrapTimeoutMs));
  // apt inside uses the host's Debian sources (bookworm, -updates and security).
  std::string sources;
  if (auto t = sys::ReadFile("/etc/apt/sources.list.d/debian.sources")) sources = *t;
  if (!sources.empty()) {
    SPACE_TRY(sys::WriteFileAtomic(rootfs + "/etc/apt/sources.list.d/debian.sources", sources));
    (void)::unlink((rootfs + "/etc/apt/sources.list").c_str());
  } else if (auto t = sys::ReadFile("/etc/apt/sources.list"); t && !t->empty()) {
    SPACE_TRY(sys::WriteFileAtomic(rootfs + "/etc/apt/sources.list", *t));
  }
  // A resolv.conf of its own is given to every sandbox; leave no host one behind.
  (void)::unlink((rootfs + "/etc/resolv.conf").c_str());
  (void)sys::RemoveAll(rootfs + "/var/cache/apt/archives");
  (void)sys::MkdirAll(rootfs + "/var/cache/apt/archives/partial", 0755);
  (void)sys::RemoveAll(rootfs + "/var/lib/apt/lists");
  (void)sys::MkdirAll(rootfs + "/var/lib/apt/lists/partial", 0755);
  return Ok();
}

// ------------------------------------------------------------------ the shared cache

std::string CachePath(const Config& c, const Builtin& t, const char* ext) {
  return c.template_cache_dir + "/" + t.name + "-" + t.tag + "-" + t.key.substr(0, 24) + ext;
}

// Saves a built layer with its config in the shared cache (atomically: tarball, then its
// description naming the tarball's sha256).
Status ExportLayerToCache(Build& b, const Builtin& t, const std::string& digest, const Json& config) {
  Platform::Impl& impl = *b.impl;
  const Config& c = impl.config;
  if (c.template_cache_dir.empty()) return Ok();
  auto layer = impl.storage->LayerPath(Hex(digest));
  if (!layer) return tl::unexpected(layer.error());
  SPACE_TRY(sys::MkdirAll(c.template_cache_dir, 0755));
  const std::string tar = CachePath(c, t, ".tar.zst");
  const std::string tmp = tar + ".tmp-" + NewId("x");
  b.log->Line("saving " + t.Ref() + " to the template cache " + c.template_cache_dir);
  if (auto st = ExportTree(*layer, tmp, c.uid_shift); !st) {
    (void)::unlink(tmp.c_str());
    return tl::unexpected(std::move(st.error()).Wrap("export " + t.Ref() + " to the template cache"));
  }
  auto sum = FileSha256(tmp);
  if (!sum) return tl::unexpected(sum.error());
  if (::rename(tmp.c_str(), tar.c_str()) != 0) return ErrnoFail("rename " + tar);
  Json meta = {{"recipe", kRecipeVersion}, {"name", t.name},   {"tag", t.tag},
               {"key", t.key},             {"digest", digest}, {"config", config},
               {"sha256", *sum}};
  SPACE_TRY(sys::WriteFileAtomic(CachePath(c, t, ".json"), meta.dump(2) + "\n"));
  struct stat st;
  if (::stat(tar.c_str(), &st) == 0)
    b.log->Line("  cached " + std::to_string(st.st_size >> 20) + " MiB");
  return Ok();
}

// Imports a cached build; returns {digest, config} or kNotFound when the cache has none
// that is intact.
Result<std::pair<std::string, Json>> ImportFromCache(Build& b, const Builtin& t) {
  Platform::Impl& impl = *b.impl;
  const Config& c = impl.config;
  if (c.template_cache_dir.empty()) return Fail(Errc::kNotFound, "no template cache");
  auto text = sys::ReadFile(CachePath(c, t, ".json"));
  if (!text) return Fail(Errc::kNotFound, "not cached");
  auto meta = ParseJson(*text);
  if (!meta || JsonStringOr(*meta, "key", "") != t.key) return Fail(Errc::kNotFound, "not cached");
  const std::string digest = JsonStringOr(*meta, "digest", "");
  const Json* cfg = JsonField(*meta, "config");
  if (!StartsWith(digest, "sha256:") || digest.size() != 71 || !cfg || !cfg->is_object())
    return Fail(Errc::kNotFound, "cache entry unreadable");
  const std::string tar = CachePath(c, t, ".tar.zst");
  auto sum = FileSha256(tar);
  if (!sum || *sum != JsonStringOr(*meta, "sha256", "")) {
    b.log->Line("the cached " + t.Ref() + " is damaged; building it again");
    return Fail(Errc::kNotFound, "cache entry damaged");
  }
  if (impl.storage->HasLayer(Hex(digest))) return std::make_pair(digest, *cfg);
  b.log->Line("importing " + t.Ref() + " from the template cache");
  auto tmp = sys::TempDir::Create(c.data_dir + "/tmp", "builtin-");
  if (!tmp) return tl::unexpected(tmp.error());
  SPACE_TRY_WRAP(UnpackTree(tar, tmp->path()), "extract " + tar);
  auto imp = impl.storage->ImportLayer(Hex(digest), tmp->path(), c.uid_shift);
  if (!imp && !impl.storage->HasLayer(Hex(digest)))
    return tl::unexpected(std::move(imp.error()).Wrap("import " + t.Ref()));
  return std::make_pair(digest, *cfg);
}

// Whether the cache holds an entry for this recipe (not checked for damage: see above).
bool Cached(const Config& c, const Builtin& t) {
  if (c.template_cache_dir.empty()) return false;
  auto text = sys::ReadFile(CachePath(c, t, ".json"));
  if (!text) return false;
  auto meta = ParseJson(*text);
  struct stat st;
  return meta && JsonStringOr(*meta, "key", "") == t.key &&
         ::stat(CachePath(c, t, ".tar.zst").c_str(), &st) == 0;
}

// ------------------------------------------------------------------ the registry

Result<Builtin> LoadBuiltin(const Config& c, const std::string& name, const std::string& tag,
                            int depth);

Result<std::vector<std::string>> SpacefileNames(const Config& c) {
  std::vector<std::string> out;
  if (c.builtin_templates_dir.empty()) return out;
  auto names = ListDir(c.builtin_templates_dir);
  if (!names) return out;
  for (const auto& n : *names) {
    struct stat st;
    if (::stat((c.builtin_templates_dir + "/" + n + "/Spacefile").c_str(), &st) == 0) out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Result<Builtin> LoadBuiltin(const Config& c, const std::string& name, const std::string& tag,
                            int depth) {
  if (depth > 8) return Fail(Errc::kInvalidArgument, "built-in templates FROM each other in a loop");
  Builtin t;
  t.name = name;
  t.tag = tag;
  std::string recipe;
  AddField(&recipe, kRecipeVersion);
  if (name == "debian" && tag == "bookworm") {
    t.debootstrap = true;
    AddField(&recipe, "debootstrap minbase bookworm +ca-certificates");
    t.key = Sha256Hex(recipe);
    return t;
  }
  if (tag != "latest" || name.empty() || name.find('/') != std::string::npos || name[0] == '.')
    return Fail(Errc::kNotFound, "no built-in template " + name + ":" + tag);
  auto spec = c.builtin_templates_dir.empty()
                  ? Result<std::string>(Fail(Errc::kNotFound, ""))
                  : sys::ReadFile(c.builtin_templates_dir + "/" + name + "/Spacefile");
  if (!spec) return Fail(Errc::kNotFound, "no built-in template " + name + ":" + tag);
  t.dir = c.builtin_templates_dir + "/" + name;
  t.spec = std::move(*spec);
  uint64_t total = 0;
  SPACE_TRY(ReadContext(t.dir, "", &t.context, &total));
  auto parsed = tmpl::ParseSpec(t.spec);
  if (!parsed)
    return tl::unexpected(std::move(parsed.error()).Wrap("built-in template " + name + " Spacefile"));
  AddField(&recipe, "spacefile");
  AddField(&recipe, t.spec);
  for (const auto& [p, data] : t.context) {
    AddField(&recipe, p);
    AddField(&recipe, Sha256Hex(data));
  }
  if (parsed->from.kind == tmpl::FromRef::Kind::kNameTag) {
    t.from_name = parsed->from.name;
    t.from_tag = parsed->from.tag;
    if (t.from_name == "base") {
      AddField(&recipe, "FROM base");
    } else {
      auto base = LoadBuiltin(c, t.from_name, t.from_tag, depth + 1);
      if (!base)
        return tl::unexpected(std::move(base.error()).Wrap("built-in template " + name + " FROM"));
      AddField(&recipe, base->key);
    }
  } else {
    AddField(&recipe, parsed->from.ToString());
  }
  t.key = Sha256Hex(recipe);
  return t;
}

// The chain to build: `t` last, what it is FROM (recursively) first.
Result<std::vector<Builtin>> Chain(const Config& c, Builtin t) {
  std::vector<Builtin> chain;
  chain.push_back(std::move(t));
  while (!chain.back().from_name.empty() && chain.back().from_name != "base") {
    auto b = LoadBuiltin(c, chain.back().from_name, chain.back().from_tag, 0);
    if (!b) return tl::unexpected(b.error());
    chain.push_back(std::move(*b));
  }
  std::reverse(chain.begin(), chain.end());
  return chain;
}

bool UpToDate(Platform::Impl& impl, const Builtin& t) {
  auto rec = impl.store->GetTemplate(t.name, t.tag);
  return rec && JsonStringOr(rec->config, "builtin_key", "") == t.key &&
         impl.storage->HasLayer(Hex(rec->digest));
}

Status BuildOne(Build& b, const Builtin& t) {
  Platform::Impl& impl = *b.impl;
  const int64_t t0 = MonotonicNanos();
  if (UpToDate(impl, t)) {
    b.log->Line(t.Ref() + ": up to date");
    return Ok();
  }
  std::string digest;
  Json config;
  if (auto cached = ImportFromCache(b, t)) {
    digest = cached->first;
    config = cached->second;
  } else if (cached.error().code != Errc::kNotFound) {
    return tl::unexpected(cached.error());
  } else if (t.debootstrap) {
    b.log->Line("building " + t.Ref());
    auto tmp = sys::TempDir::Create(impl.config.data_dir + "/tmp", "debootstrap-");
    if (!tmp) return tl::unexpected(tmp.error());
    const std::string rootfs = tmp->path() + "/rootfs";
    SPACE_TRY(sys::MkdirAll(rootfs, 0755));
    SPACE_TRY(Debootstrap(b, rootfs));
    auto d = TreeDigest(rootfs);
    if (!d) return tl::unexpected(d.error());
    digest = *d;
    if (!impl.storage->HasLayer(Hex(digest))) {
      auto st = impl.storage->ImportLayer(Hex(digest), rootfs, impl.config.uid_shift);
      if (!st && !impl.storage->HasLayer(Hex(digest))) return tl::unexpected(st.error());
    }
    config = {{"env", Json::array({std::string("PATH=") + kDefaultPath, "LANG=C.UTF-8"})},
              {"workdir", "/root"},
              {"user", "root"}};
    SPACE_TRY(ExportLayerToCache(b, t, digest, config));
  } else {
    b.log->Line("building " + t.Ref() + " from " + t.dir + "/Spacefile");
    Build sub;
    sub.impl = b.impl;
    sub.op = b.op;
    sub.req.name = t.name;
    sub.req.tag = t.tag;
    sub.req.spec = t.spec;
    sub.req.context = t.context;
    sub.req.network = true;
    sub.log = std::move(b.log);  // the same log, given back below whatever happens
    auto r = BuildFromSpec(sub);
    b.log = std::move(sub.log);
    if (!r) return tl::unexpected(r.error());
    digest = (*r)["digest"].get<std::string>();
    config = (*r)["config"];
    SPACE_TRY(ExportLayerToCache(b, t, digest, config));
  }
  config["builtin_key"] = t.key;
  store::TemplateRecord rec;
  rec.name = t.name;
  rec.tag = t.tag;
  rec.digest = digest;
  rec.config = config;
  rec.created_ms = NowUnixMillis();
  SPACE_TRY(impl.store->PutTemplate(rec));
  b.log->Line(t.Ref() + ": " + digest + " in " + std::to_string((MonotonicNanos() - t0) / 1000000) +
              " ms");
  return Ok();
}

// Mirrors the build log's new lines into spaced's own log (spaced --prepare-template).
class LogEcho {
 public:
  explicit LogEcho(std::string path) : path_(std::move(path)) {}
  void Flush() {
    auto fd = sys::Open(path_, O_RDONLY);
    if (!fd) return;
    if (::lseek(fd->get(), static_cast<off_t>(done_), SEEK_SET) < 0) return;
    auto text = sys::ReadAll(fd->get());
    if (!text) return;
    size_t end = text->rfind('\n');
    if (end == std::string::npos) return;
    std::istringstream in(text->substr(0, end));
    std::string line;
    while (std::getline(in, line)) spdlog::info("template build: {}", line);
    done_ += end + 1;
  }

 private:
  std::string path_;
  uint64_t done_ = 0;
};

}  // namespace

std::vector<std::string> Platform::BuiltinTemplateNames() const {
  std::vector<std::string> out = {"debian:bookworm"};
  if (auto names = SpacefileNames(config_)) {
    for (const auto& n : *names) out.push_back(n + ":latest");
  }
  return out;
}

Result<store::OperationRecord> Platform::EnsureBuiltinTemplate(const std::string& ref, bool echo) {
  auto parsed = ParseTemplateRef(ref);
  if (!parsed) return tl::unexpected(parsed.error());
  auto t = LoadBuiltin(config_, parsed->first, parsed->second, 0);
  if (!t) return tl::unexpected(t.error());
  auto chain = Chain(config_, *t);
  if (!chain) return tl::unexpected(chain.error());
  Platform::Impl& impl = *impl_;
  std::lock_guard lock(impl.builtin_mu);
  if (auto it = impl.builtin_ops.find(t->Ref()); it != impl.builtin_ops.end()) {
    if (auto op = impl.store->GetOperation(it->second)) return op;
  }
  SPACE_TRY(impl.AdmitDisk("template build"));
  auto b = std::make_shared<Build>();
  b->impl = impl_.get();
  b->req.name = t->name;
  b->req.tag = t->tag;
  b->op.id = NewId("op");
  b->op.kind = "template_build";
  b->op.target = t->Ref();
  b->op.state = "pending";
  b->op.request = {{"name", t->name}, {"tag", t->tag}, {"source", "builtin"}, {"builtin", t->Ref()}};
  b->op.created_ms = b->op.updated_ms = NowUnixMillis();
  SPACE_TRY(sys::MkdirAll(config_.data_dir + "/logs/templates", 0700));
  auto log = BuildLog::Open(LogPath(config_, b->op.id));
  if (!log) return tl::unexpected(log.error());
  b->log = std::move(*log);
  SPACE_TRY(impl.store->PutOperation(b->op));
  impl.builtin_ops[t->Ref()] = b->op.id;
  std::vector<Builtin> steps = std::move(*chain);
  impl.Enqueue([b, steps, echo, ref = t->Ref()] {
    Platform::Impl& impl = *b->impl;
    // One built-in build at a time (they share the base and the cache).
    std::lock_guard run(impl.builtin_run_mu);
    b->op.state = "running";
    b->steps = static_cast<int>(steps.size());
    b->log->Line("build built-in " + ref + " (operation " + b->op.id + ")");
    LogEcho echo_log(LogPath(impl.config, b->op.id));
    std::atomic<bool> done{false};
    std::thread echoer;
    if (echo) {
      echoer = std::thread([&] {
        while (!done.load()) {
          echo_log.Flush();
          std::this_thread::sleep_for(std::chrono::milliseconds(500));
        }
      });
    }
    const int64_t t0 = MonotonicNanos();
    Status st = Ok();
    // Only what is needed: from the last template of the chain that is stored or cached.
    size_t first = 0;
    for (size_t i = steps.size(); i-- > 0;) {
      if (UpToDate(impl, steps[i]) || Cached(impl.config, steps[i])) {
        first = i;
        break;
      }
    }
    for (size_t i = first; i < steps.size() && st; ++i) {
      b->op.result = {{"step", static_cast<int>(i)}, {"steps", b->steps},
                      {"template", steps[i].Ref()}, {"log_tail", b->log->Tail()}};
      impl.SaveOperation(b->op);
      st = BuildOne(*b, steps[i]);
      if (!st) st = tl::unexpected(std::move(st.error()).Wrap(steps[i].Ref()));
    }
    Json result = Json::object();
    if (st) {
      auto rec = impl.store->GetTemplate(b->req.name, b->req.tag);
      b->log->Line("built " + ref + " in " + std::to_string((MonotonicNanos() - t0) / 1000000) + " ms");
      result = {{"template", ref}, {"digest", rec ? rec->digest : ""}, {"steps", b->steps},
                {"log_tail", b->log->Tail()}};
    } else {
      b->log->Line("error: " + st.error().message);
    }
    done = true;
    if (echoer.joinable()) echoer.join();
    if (echo) echo_log.Flush();
    {
      std::lock_guard lock(impl.builtin_mu);
      impl.builtin_ops.erase(ref);
    }
    impl.FinishOperation(b->op, st, result);
  });
  return b->op;
}

Error Platform::Impl::MissingTemplate(const std::string& name, const std::string& tag) {
  Error not_found(Errc::kNotFound, 0, "unknown template " + name + ":" + tag);
  if (!LoadBuiltin(config, name, tag, 0)) return not_found;
  auto op = self->EnsureBuiltinTemplate(name + ":" + tag, false);
  if (!op) return op.error();
  return Error(Errc::kUnavailable, 0,
               "template " + name + ":" + tag + " is a built-in that is being built (operation " +
                   op->id + ", its log at GET /v1/templates/builds/" + op->id +
                   "/log); retry when it has succeeded");
}

}  // namespace space::core
