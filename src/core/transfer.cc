// Templates and snapshots between a cluster's nodes (docs/cluster.md): a node that lacks
// a template a create names (or the snapshot a restore names) pulls it from a node that
// has it. This side exports one as a tarball and imports one; the pulling itself is the
// cluster's (Config::fetch_template, fetch_snapshot).
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

// `tree` as a zstd tarball under DATA/tmp (the caller removes it), with its sha256 and size.
Result<Platform::ArchiveFile> WriteArchive(const std::string& tree, const std::string& data_dir, uint32_t shift) {
  SPACE_TRY(sys::MkdirAll(data_dir + "/tmp", 0700));
  Platform::ArchiveFile out;
  out.path = data_dir + "/tmp/export-" + NewId("x") + ".tar.zst";
  if (auto st = ExportTree(tree, out.path, shift); !st) {
    (void)::unlink(out.path.c_str());
    return tl::unexpected(st.error());
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
  auto file = WriteArchive(*layer, config_.data_dir, config_.uid_shift);
  if (!file) return tl::unexpected(std::move(file.error()).Wrap("export template " + ref));
  TemplateArchive out;
  static_cast<ArchiveFile&>(out) = std::move(*file);
  out.record = *rec;
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

Result<Platform::SnapshotArchive> Platform::ExportSnapshot(const std::string& id) {
  auto rec = impl_->store->GetSnapshot(id);
  if (!rec) {
    if (rec.error().code == Errc::kNotFound) return Fail(Errc::kNotFound, "unknown snapshot " + id);
    return tl::unexpected(rec.error());
  }
  if (rec->state != "ready") return Fail(Errc::kConflict, "snapshot " + id + " is " + rec->state);
  if (rec->kind != "filesystem")
    return Fail(Errc::kConflict, "snapshot " + id + " is a full one (memory and devices): it restores only on "
                                           "the node that took it");
  // The driver hands out layers, not snapshots, as trees: a layer made from the snapshot,
  // for as long as the export takes.
  const std::string layer = "ship" + NewId("x").substr(2);
  SPACE_TRY_WRAP(impl_->storage->ImportLayerFromSnapshot(layer, id), "export snapshot " + id);
  struct DropLayer {
    storage::Driver& d;
    std::string layer;
    ~DropLayer() { (void)d.DeleteLayer(layer); }
  } drop{*impl_->storage, layer};
  auto path = impl_->storage->LayerPath(layer);
  if (!path) return tl::unexpected(path.error());
  // A snapshot's inodes are shifted already (as a root's): stored unshifted, like a layer.
  auto file = WriteArchive(*path, config_.data_dir, config_.uid_shift);
  if (!file) return tl::unexpected(std::move(file.error()).Wrap("export snapshot " + id));
  SnapshotArchive out;
  static_cast<ArchiveFile&>(out) = std::move(*file);
  out.record = *rec;
  return out;
}

Status Platform::ImportSnapshot(const store::SnapshotRecord& record, const std::string& archive_path,
                                const std::string& sha256) {
  if (record.kind != "filesystem" || record.state != "ready")
    return Fail(Errc::kInvalidArgument, "only a ready filesystem snapshot can be imported");
  if (auto here = impl_->store->GetSnapshot(record.id); here) return Ok();
  auto sum = FileSha256(archive_path);
  if (!sum) return tl::unexpected(sum.error());
  if (*sum != sha256)
    return Fail(Errc::kInvalidArgument, "the archive of snapshot " + record.id + " is damaged (sha256 " + *sum + ")");
  auto tmp = sys::TempDir::Create(config_.data_dir + "/tmp", "pulled-");
  if (!tmp) return tl::unexpected(tmp.error());
  SPACE_TRY_WRAP(UnpackTree(archive_path, tmp->path()), "unpack snapshot " + record.id);
  // The driver makes snapshots of roots only: a layer of the tree, a root on it, and the
  // snapshot of that root; the layer and the root go again.
  const std::string layer = "ship" + NewId("x").substr(2);
  SPACE_TRY_WRAP(impl_->storage->ImportLayer(layer, tmp->path(), config_.uid_shift), "import snapshot " + record.id);
  struct Drop {
    storage::Driver& d;
    std::string layer, root;
    ~Drop() {
      if (!root.empty()) (void)d.DeleteRoot(root);
      (void)d.DeleteLayer(layer);
    }
  } drop{*impl_->storage, layer, ""};
  const std::string root = NewId("sb");
  auto made = impl_->storage->CreateRoot(root, layer, 0);
  if (!made) return tl::unexpected(std::move(made.error()).Wrap("import snapshot " + record.id));
  drop.root = root;
  SPACE_TRY_WRAP(impl_->storage->SnapshotRoot(root, record.id), "import snapshot " + record.id);
  store::SnapshotRecord rec = record;
  if (auto st = impl_->store->PutSnapshot(rec); !st) {
    (void)impl_->storage->DeleteSnapshot(record.id);
    return st;
  }
  return Ok();
}

Status Platform::Impl::FetchMissingTemplate(const CreateSandboxRequest& req) {
  if (!req.snapshot_id.empty()) {
    if (!config.fetch_snapshot) return Ok();
    auto have = store->GetSnapshot(req.snapshot_id);
    if (have || have.error().code != Errc::kNotFound) return Ok();
    auto st = config.fetch_snapshot(req.snapshot_id);
    if (!st && st.error().code == Errc::kNotFound) return Ok();
    return st;
  }
  if (!config.fetch_template) return Ok();
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
