// Templates between a cluster's nodes (docs/cluster.md): a node that lacks a template a
// create names pulls it, by digest, from a node that has it. This side exports a template
// as a tarball and imports one; the pulling itself is the cluster's (Config::fetch_template).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "core/internal.h"
#include "core/template_archive.h"
#include "core/templates.h"
#include "sys/sys.h"

namespace space::core {

namespace {

bool IsDigestRef(const std::string& ref) {
  return StartsWith(ref, "sha256:") && ref.size() == 7 + 64 &&
         ref.find_first_not_of("0123456789abcdef", 7) == std::string::npos;
}

}  // namespace

Result<Platform::TemplateArchive> Platform::ExportTemplate(const std::string& ref) {
  Result<store::TemplateRecord> rec = Fail(Errc::kNotFound, "");
  if (StartsWith(ref, "sha256:")) {
    if (!IsDigestRef(ref)) return Fail(Errc::kInvalidArgument, "invalid template digest \"" + ref + "\"");
    rec = impl_->store->GetTemplateByDigest(ref);
  } else {
    auto parsed = ParseTemplateRef(ref);
    if (!parsed) return tl::unexpected(parsed.error());
    rec = impl_->store->GetTemplate(parsed->first, parsed->second);
  }
  if (!rec) {
    if (rec.error().code == Errc::kNotFound) return Fail(Errc::kNotFound, "unknown template " + ref);
    return tl::unexpected(rec.error());
  }
  auto layer = impl_->storage->LayerPath(DigestHex(rec->digest));
  if (!layer) return tl::unexpected(std::move(layer.error()).Wrap("template " + ref));
  TemplateArchive out;
  out.record = *rec;
  SPACE_TRY(sys::MkdirAll(config_.data_dir + "/tmp", 0700));
  out.path = config_.data_dir + "/tmp/export-" + NewId("t") + ".tar.zst";
  if (auto st = ExportTree(*layer, out.path, config_.uid_shift); !st) {
    (void)::unlink(out.path.c_str());
    return tl::unexpected(std::move(st.error()).Wrap("export template " + ref));
  }
  auto sum = FileSha256(out.path);
  struct stat st;
  if (!sum || ::stat(out.path.c_str(), &st) != 0) {
    (void)::unlink(out.path.c_str());
    return sum ? ErrnoFail("stat " + out.path) : tl::unexpected(sum.error());
  }
  out.sha256 = *sum;
  out.size = st.st_size;
  return out;
}

Status Platform::ImportTemplate(const store::TemplateRecord& record, const std::string& archive_path,
                                const std::string& sha256) {
  if (!IsDigestRef(record.digest)) return Fail(Errc::kInvalidArgument, "invalid template digest \"" + record.digest + "\"");
  SPACE_TRY(ParseTemplateRef(record.name + ":" + record.tag));
  auto here = impl_->store->GetTemplate(record.name, record.tag);
  if (here && here->digest != record.digest) {
    return Fail(Errc::kConflict, "template " + record.name + ":" + record.tag + " here is another build (" +
                                     here->digest + ")");
  }
  if (!here && here.error().code != Errc::kNotFound) return tl::unexpected(here.error());
  const std::string hex = DigestHex(record.digest);
  if (!impl_->storage->HasLayer(hex)) {
    auto sum = FileSha256(archive_path);
    if (!sum) return tl::unexpected(sum.error());
    if (*sum != sha256) {
      return Fail(Errc::kInvalidArgument, "the archive of template " + record.name + ":" + record.tag +
                                              " is damaged (sha256 " + *sum + ", expected " + sha256 + ")");
    }
    auto tmp = sys::TempDir::Create(config_.data_dir + "/tmp", "pulled-");
    if (!tmp) return tl::unexpected(tmp.error());
    SPACE_TRY_WRAP(UnpackTree(archive_path, tmp->path()), "unpack template " + record.name + ":" + record.tag);
    auto imp = impl_->storage->ImportLayer(hex, tmp->path(), config_.uid_shift);
    if (!imp && !impl_->storage->HasLayer(hex))
      return tl::unexpected(std::move(imp.error()).Wrap("import template " + record.name + ":" + record.tag));
  }
  if (here) return Ok();
  store::TemplateRecord rec = record;
  if (!rec.config.is_object()) rec.config = Json::object();
  return impl_->store->PutTemplate(rec);
}

Status Platform::Impl::FetchMissingTemplate(const CreateSandboxRequest& req) {
  if (!config.fetch_template || !req.snapshot_id.empty()) return Ok();
  const std::string ref = req.template_ref.empty() ? config.default_template : req.template_ref;
  if (StartsWith(ref, "sha256:")) {
    if (!IsDigestRef(ref)) return Ok();  // the create says what is wrong with it
    auto have = store->GetTemplateByDigest(ref);
    if (have || have.error().code != Errc::kNotFound) return Ok();
  } else {
    auto parsed = ParseTemplateRef(ref);
    if (!parsed) return Ok();
    auto have = store->GetTemplate(parsed->first, parsed->second);
    if (have || have.error().code != Errc::kNotFound) return Ok();
    // Built-ins are made here, from their recipe or the shared cache.
    const auto builtins = self->BuiltinTemplateNames();
    const std::string full = parsed->first + ":" + parsed->second;
    if (full == "base:latest" || std::find(builtins.begin(), builtins.end(), full) != builtins.end())
      return Ok();
  }
  auto st = config.fetch_template(ref);
  if (!st && st.error().code == Errc::kNotFound) return Ok();
  return st;
}

}  // namespace space::core
