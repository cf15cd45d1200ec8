// Template builds: a Dockerfile-subset spec executed step by step (each RUN in a throwaway
// build sandbox whose root becomes the step's layer), or an import of a tarball, an OCI
// archive or a host directory. Each build is an operation; its log is a file under
// DATA/logs/templates/.
//
// Build sandboxes are not Sandbox records: they are a storage root plus a runtime instance
// named "bld-...", driven through a private AgentSession, and always destroyed before the
// step ends. After a crash, Recover() removes them as orphans (no sandbox row names them).
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

namespace space::core {

using namespace build;

namespace {

Result<Json> BuildFromImport(Build& b) {
  Platform::Impl& impl = *b.impl;
  b.steps = 1;
  b.Progress(0);
  const std::string work = impl.config.data_dir + "/tmp/" + b.op.id;
  (void)sys::RemoveAll(work);
  struct Rm {
    std::string p;
    ~Rm() { (void)sys::RemoveAll(p); }
  } rm{work};
  const std::string rootfs = work + "/rootfs";
  SPACE_TRY(sys::MkdirAll(rootfs, 0755));
  ImageConfig cfg;
  cfg.SetEnv(std::string("PATH=") + kDefaultPath);
  std::string dir = rootfs;
  tmpl::ExtractOptions eo;
  eo.skip_devices = true;
  if (!b.req.tarball_path.empty()) {
    b.log->Line("extracting " + b.req.tarball_path);
    auto st = tmpl::ExtractTar(b.req.tarball_path, rootfs, eo);
    if (!st) return tl::unexpected(std::move(st.error()).Wrap("extract tarball"));
    for (const auto& w : st->warnings) b.log->Line("warning: " + w);
    b.log->Line(std::to_string(st->entries) + " entries, " + std::to_string(st->bytes) + " bytes");
  } else if (!b.req.oci_archive_path.empty()) {
    b.log->Line("reading OCI archive " + b.req.oci_archive_path);
    auto img = tmpl::ReadOciArchive(b.req.oci_archive_path, work + "/oci");
    if (!img) return tl::unexpected(std::move(img.error()).Wrap("read OCI archive"));
    auto st = tmpl::UnpackOciImage(*img, rootfs, eo);
    if (!st) return tl::unexpected(std::move(st.error()).Wrap("unpack OCI image"));
    for (const auto& w : st->warnings) b.log->Line("warning: " + w);
    b.log->Line(std::to_string(img->layers.size()) + " layers, " + std::to_string(st->entries) +
                " entries");
    (void)sys::RemoveAll(work + "/oci");
    if (!img->config.env.empty()) {
      cfg.env.clear();
      for (const auto& kv : img->config.env) cfg.SetEnv(kv);
    }
    if (!img->config.working_dir.empty()) cfg.workdir = img->config.working_dir;
    if (!img->config.user.empty()) cfg.user = img->config.user;
    if (!img->config.cmd.empty() || !img->config.entrypoint.empty())
      b.log->Line("warning: the image's CMD/ENTRYPOINT are ignored (templates have no default command)");
  } else {
    dir = b.req.directory;
    b.log->Line("importing directory " + dir);
  }
  auto digest = TreeDigest(dir);
  if (!digest) return tl::unexpected(std::move(digest.error()).Wrap("digest tree"));
  if (impl.storage->HasLayer(Hex(*digest))) {
    b.log->Line("layer " + *digest + " already stored");
  } else {
    auto st = impl.storage->ImportLayer(Hex(*digest), dir, impl.config.uid_shift);
    if (!st && !impl.storage->HasLayer(Hex(*digest)))
      return tl::unexpected(std::move(st.error()).Wrap("import layer"));
  }
  b.Progress(1);
  return Json{{"digest", *digest}, {"config", cfg.ToJson()}};
}

void RunBuild(std::shared_ptr<Build> b) {
  Platform::Impl& impl = *b->impl;
  b->op.state = "running";
  b->log->Line("build " + b->op.target + " (operation " + b->op.id + ")");
  const int64_t t0 = MonotonicNanos();
  auto r = b->req.spec.empty() ? BuildFromImport(*b) : BuildFromSpec(*b);
  Status st = r ? Ok() : Status(tl::unexpected(r.error()));
  Json result = Json::object();
  if (r) {
    store::TemplateRecord t;
    t.name = b->req.name;
    t.tag = b->req.tag;
    t.digest = (*r)["digest"].get<std::string>();
    t.config = (*r)["config"];
    t.created_ms = NowUnixMillis();
    st = impl.store->PutTemplate(t);
    if (st) {
      b->log->Line("built " + b->op.target + " " + t.digest + " in " +
                   std::to_string((MonotonicNanos() - t0) / 1000000) + " ms");
      result = {{"template", b->op.target}, {"digest", t.digest}, {"steps", b->steps},
                {"log_tail", b->log->Tail()}};
    }
  }
  if (!st) b->log->Line("error: " + st.error().message);
  impl.FinishOperation(b->op, st, result);
}

Status CheckHostPath(const std::string& p, const char* what, bool want_dir) {
  if (p.empty() || p[0] != '/')
    return Fail(Errc::kInvalidArgument, std::string(what) + " must be an absolute host path");
  if (p.find('\0') != std::string::npos)
    return Fail(Errc::kInvalidArgument, std::string(what) + " contains a NUL byte");
  struct stat st;
  if (::stat(p.c_str(), &st) != 0) return Fail(Errc::kNotFound, std::string(what) + " " + p + " does not exist");
  if (want_dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))
    return Fail(Errc::kInvalidArgument, std::string(what) + " " + p + " is not a " +
                                            (want_dir ? "directory" : "regular file"));
  return Ok();
}

}  // namespace

Result<store::OperationRecord> Platform::BuildTemplate(const TemplateBuildRequest& in) {
  TemplateBuildRequest req = in;
  if (req.tag.empty()) req.tag = "latest";
  if (req.name.empty()) return Fail(Errc::kInvalidArgument, "name is required");
  SPACE_TRY(impl_->AdmitDisk("template build"));
  if (req.name.find(':') != std::string::npos || req.tag.find(':') != std::string::npos)
    return Fail(Errc::kInvalidArgument, "name and tag must not contain ':'");
  auto ref = ParseTemplateRef(req.name + ":" + req.tag);
  if (!ref) return tl::unexpected(ref.error());
  int sources = !req.spec.empty() + !req.tarball_path.empty() + !req.oci_archive_path.empty() +
                !req.directory.empty();
  if (sources != 1)
    return Fail(Errc::kInvalidArgument,
                "give exactly one of spec, tarball_path, oci_archive_path or directory");
  std::string source;
  if (!req.spec.empty()) {
    source = "spec";
    uint64_t total = 0;
    for (const auto& [p, data] : req.context) {
      if (p.empty() || p[0] == '/' || p.find('\0') != std::string::npos ||
          ("/" + p + "/").find("/../") != std::string::npos ||
          ("/" + p + "/").find("/./") != std::string::npos || p.find("//") != std::string::npos ||
          p.back() == '/')
        return Fail(Errc::kInvalidArgument, "bad context path \"" + p + "\"");
      total += data.size();
    }
    if (total > kMaxBuildContextBytes)
      return Fail(Errc::kTooLarge, "build context larger than 16 MiB");
    auto parsed = tmpl::ParseSpec(req.spec, ParseOptionsFor(req, Json::object()));
    if (!parsed) return tl::unexpected(parsed.error());
    // FROM must exist now (404), not after the operation starts.
    if (parsed->from.kind == tmpl::FromRef::Kind::kNameTag) {
      auto t = impl_->store->GetTemplate(parsed->from.name, parsed->from.tag);
      if (!t) {
        if (t.error().code == Errc::kNotFound)
          return Fail(Errc::kNotFound, "FROM: unknown template " + parsed->from.ToString());
        return tl::unexpected(t.error());
      }
    } else if (parsed->from.kind == tmpl::FromRef::Kind::kDigest &&
               !impl_->storage->HasLayer(Hex(parsed->from.digest))) {
      return Fail(Errc::kNotFound, "FROM: no layer " + parsed->from.digest);
    }
    // COPY sources must be in the context.
    for (const auto& step : parsed->steps) {
      if (step.kind != tmpl::StepKind::kCopy) continue;
      if (auto d = CopyDigest(req.context, step); !d) return tl::unexpected(d.error());
    }
  } else if (!req.tarball_path.empty()) {
    source = "tarball";
    SPACE_TRY(CheckHostPath(req.tarball_path, "tarball_path", false));
  } else if (!req.oci_archive_path.empty()) {
    source = "oci_archive";
    SPACE_TRY(CheckHostPath(req.oci_archive_path, "oci_archive_path", false));
  } else {
    source = "directory";
    SPACE_TRY(CheckHostPath(req.directory, "directory", true));
  }
  if (req.spec.empty() && (!req.context.empty() || !req.build_args.empty()))
    return Fail(Errc::kInvalidArgument, "context and build_args go with spec only");

  auto b = std::make_shared<Build>();
  b->impl = impl_.get();
  b->req = std::move(req);
  b->op.id = NewId("op");
  b->op.kind = "template_build";
  b->op.target = b->req.name + ":" + b->req.tag;
  b->op.state = "pending";
  b->op.request = {{"name", b->req.name}, {"tag", b->req.tag}, {"source", source}};
  if (source == "spec") {
    b->op.request["spec"] = b->req.spec;
  } else if (source == "tarball") {
    b->op.request["tarball_path"] = b->req.tarball_path;
  } else if (source == "oci_archive") {
    b->op.request["oci_archive_path"] = b->req.oci_archive_path;
  } else {
    b->op.request["directory"] = b->req.directory;
  }
  b->op.created_ms = b->op.updated_ms = NowUnixMillis();
  SPACE_TRY(sys::MkdirAll(config_.data_dir + "/logs/templates", 0700));
  auto log = BuildLog::Open(LogPath(config_, b->op.id));
  if (!log) return tl::unexpected(log.error());
  b->log = std::move(*log);
  SPACE_TRY(impl_->store->PutOperation(b->op));
  impl_->Enqueue([b] { RunBuild(b); });
  return b->op;
}

Result<std::string> Platform::TemplateBuildLog(const std::string& op_id) {
  if (!IsValidId(op_id, "op")) return Fail(Errc::kNotFound, "no template build " + op_id);
  auto op = impl_->store->GetOperation(op_id);
  if (!op) return tl::unexpected(op.error());
  if (op->kind != "template_build") return Fail(Errc::kNotFound, op_id + " is not a template build");
  auto text = sys::ReadFile(LogPath(config_, op_id));
  if (!text) {
    if (text.error().code == Errc::kNotFound)
      return Fail(Errc::kNotFound, "the log of " + op_id + " is gone");
    return tl::unexpected(text.error());
  }
  return text;
}

}  // namespace space::core
