// Reading OCI image layouts and `docker save` archives (see template.h for the contract).
//
// The outer archive is first extracted with ExtractTar (so it gets the same hostile-input
// checks), then every file the image uses is opened with openat2(RESOLVE_IN_ROOT) below the
// work directory: classic docker-save archives deduplicate layers with symlinks, which must
// resolve inside the archive and nowhere else.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "common/json.h"
#include "template/internal.h"
#include "template/template.h"

namespace space::tmpl {

namespace {

using internal::Quote;
using sys::UniqueFd;

constexpr int kMaxIndexDepth = 4;

const char* const kManifestTypes[] = {
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
};
const char* const kIndexTypes[] = {
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
};
const char* const kLayerTypes[] = {
    "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.oci.image.layer.v1.tar+zstd",
    "application/vnd.oci.image.layer.nondistributable.v1.tar",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd",
    "application/vnd.docker.image.rootfs.diff.tar",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
    "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
};

template <size_t N>
bool OneOf(const std::string& s, const char* const (&list)[N]) {
  for (const char* t : list) {
    if (s == t) return true;
  }
  return false;
}

tl::unexpected<Error> Bad(const std::string& msg) { return Fail(Errc::kInvalidArgument, msg); }

// A file below the work dir, opened safely, with its size.
struct Opened {
  UniqueFd fd;
  int64_t size = 0;
  std::string real_path;  // the kernel's path for it: below the work dir, symlink-free
};

class Reader {
 public:
  Reader(const std::string& work_dir, const OciReadOptions& opts)
      : work_dir_(work_dir), opts_(opts) {}

  Result<OciImage> Run(const std::string& archive_path) {
    SPACE_TRY(sys::MkdirAll(work_dir_, 0700));
    SPACE_TRY(CheckEmpty());
    ExtractOptions outer = opts_.outer;
    outer.whiteouts = false;
    outer.skip_devices = false;
    outer.preserve_owner = false;
    auto x = ExtractTar(archive_path, work_dir_, outer);
    if (!x) return tl::unexpected(x.error());
    auto root = sys::Open(work_dir_, O_RDONLY | O_DIRECTORY);
    if (!root) return tl::unexpected(root.error());
    root_ = std::move(*root);
    auto real = internal::FdPath(root_.get());
    if (!real) return tl::unexpected(real.error());
    real_root_ = *real;

    bool has_index = Exists("index.json");
    bool has_manifest = Exists("manifest.json");
    if (has_index) return ReadOciLayout();
    if (has_manifest) return ReadDockerSave();
    return Bad("not an OCI image layout or docker save archive (no index.json or manifest.json)");
  }

 private:
  Status CheckEmpty() {
    DIR* d = ::opendir(work_dir_.c_str());
    if (!d) return ErrnoFail("opendir " + work_dir_);
    bool empty = true;
    while (dirent* e = ::readdir(d)) {
      if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) empty = false;
    }
    ::closedir(d);
    if (!empty) return Bad("work directory " + work_dir_ + " is not empty");
    return Ok();
  }

  bool Exists(const std::string& rel) {
    auto fd = internal::OpenInRoot(root_.get(), rel, O_RDONLY);
    return fd.has_value();
  }

  // Opens a regular file below the work dir. `rel` must already be validated relative.
  Result<Opened> OpenFile(const std::string& rel) {
    auto fd = internal::OpenInRoot(root_.get(), rel, O_RDONLY);
    if (!fd) {
      if (fd.error().sys_errno == ENOENT) {
        return Fail(Errc::kInvalidArgument, Quote(rel) + " is missing from the archive");
      }
      return tl::unexpected(fd.error());
    }
    struct stat sb;
    if (::fstat(fd->get(), &sb) != 0) return ErrnoFail("stat " + rel);
    if (!S_ISREG(sb.st_mode)) return Bad(Quote(rel) + " is not a regular file");
    auto real = internal::FdPath(fd->get());
    if (!real) return tl::unexpected(real.error());
    // RESOLVE_IN_ROOT already guarantees this; checked again because the path is handed to
    // ExtractTar later, which opens it by name.
    if (!StartsWith(*real, real_root_ + "/"))
      return Bad(Quote(rel) + " resolves outside the archive");
    return Opened{std::move(*fd), sb.st_size, *real};
  }

  Result<std::string> ReadSmall(const std::string& rel, int64_t* size_out = nullptr) {
    auto f = OpenFile(rel);
    if (!f) return tl::unexpected(f.error());
    if (f->size > kMaxOciJsonBytes) {
      return Fail(Errc::kTooLarge, Quote(rel) + " is " + std::to_string(f->size) +
                                       " bytes; JSON documents are limited to " +
                                       std::to_string(kMaxOciJsonBytes));
    }
    auto text = sys::ReadAll(f->fd.get());
    if (!text) return tl::unexpected(std::move(text.error()).Wrap(rel));
    if (static_cast<int64_t>(text->size()) > kMaxOciJsonBytes)
      return Fail(Errc::kTooLarge, Quote(rel) + " grew while being read");
    if (size_out) *size_out = static_cast<int64_t>(text->size());
    return text;
  }

  static Result<Json> ParseJsonDoc(const std::string& text, const std::string& what) {
    auto j = ParseJson(text);
    if (!j) return Bad(what + " is not valid JSON");
    return std::move(*j);
  }

  struct Descriptor {
    std::string media_type, digest;
    int64_t size = 0;
    const Json* platform = nullptr;
    const Json* annotations = nullptr;
  };

  static Result<Descriptor> ParseDescriptor(const Json& j, const std::string& what) {
    if (!j.is_object()) return Bad(what + ": descriptor is not an object");
    Descriptor d;
    d.media_type = JsonStringOr(j, "mediaType", "");
    auto digest = JsonString(j, "digest");
    if (!digest) return Bad(what + ": descriptor has no digest");
    if (!internal::IsSha256Digest(*digest)) {
      return Bad(what + ": unsupported or malformed digest " + Quote(*digest) +
                 " (want sha256:<64 lowercase hex>)");
    }
    d.digest = *digest;
    auto size = JsonInt(j, "size");
    if (!size || *size < 0) return Bad(what + ": descriptor has no valid size");
    d.size = *size;
    if (const Json* urls = JsonField(j, "urls"); urls && !(urls->is_array() && urls->empty()))
      return Bad(what + " " + d.digest + ": external layer URLs are not supported");
    d.platform = JsonField(j, "platform");
    d.annotations = JsonField(j, "annotations");
    return d;
  }

  static std::string BlobPath(const std::string& digest) {
    return "blobs/sha256/" + digest.substr(7);  // digest validated: no '/' or ".." possible
  }

  // Reads a JSON blob, checking its size and digest.
  Result<Json> ReadJsonBlob(const Descriptor& d, const std::string& what) {
    if (d.size > kMaxOciJsonBytes)
      return Fail(Errc::kTooLarge, what + " " + d.digest + " is larger than 4 MiB");
    int64_t size = 0;
    auto text = ReadSmall(BlobPath(d.digest), &size);
    if (!text) return tl::unexpected(std::move(text.error()).Wrap(what));
    if (size != d.size) {
      return Bad(what + " " + d.digest + ": size " + std::to_string(size) + " != declared " +
                 std::to_string(d.size));
    }
    std::string got = Sha256Bytes(*text);
    if (got != d.digest)
      return Bad(what + " " + d.digest + ": digest mismatch (content is " + got + ")");
    return ParseJsonDoc(*text, what + " " + d.digest);
  }

  // Hashes a layer file; returns its verified real path.
  Result<Opened> VerifyFile(const std::string& rel, const std::string& digest, int64_t size,
                            const std::string& what) {
    auto f = OpenFile(rel);
    if (!f) return tl::unexpected(std::move(f.error()).Wrap(what));
    if (size >= 0 && f->size != size) {
      return Bad(what + " " + digest + ": size " + std::to_string(f->size) + " != declared " +
                 std::to_string(size));
    }
    auto h = internal::Sha256Fd(f->fd.get());
    if (!h) return tl::unexpected(std::move(h.error()).Wrap(what));
    if (h->first != digest)
      return Bad(what + " " + digest + ": digest mismatch (content is " + h->first + ")");
    return f;
  }

  static Result<std::vector<std::string>> StringList(const Json& obj, const char* key,
                                                     const std::string& what) {
    std::vector<std::string> out;
    const Json* f = JsonField(obj, key);
    if (!f) return out;
    if (!f->is_array()) return Bad(what + ": " + key + " is not a list");
    for (const auto& e : *f) {
      if (!e.is_string()) return Bad(what + ": " + key + " holds a non-string");
      out.push_back(e.get<std::string>());
    }
    return out;
  }

  Result<Json> ParseConfig(const std::string& text, const std::string& digest, OciImage* img) {
    auto j = ParseJsonDoc(text, "config " + digest);
    if (!j) return tl::unexpected(j.error());
    if (!j->is_object()) return Bad("config " + digest + " is not an object");
    OciImageConfig& c = img->config;
    c.os = JsonStringOr(*j, "os", "");
    c.architecture = JsonStringOr(*j, "architecture", "");
    if (const Json* cfg = JsonField(*j, "config")) {
      if (!cfg->is_object()) return Bad("config " + digest + ": \"config\" is not an object");
      std::string what = "config " + digest;
      auto env = StringList(*cfg, "Env", what);
      auto cmd = StringList(*cfg, "Cmd", what);
      auto ep = StringList(*cfg, "Entrypoint", what);
      if (!env) return tl::unexpected(env.error());
      if (!cmd) return tl::unexpected(cmd.error());
      if (!ep) return tl::unexpected(ep.error());
      c.env = std::move(*env);
      c.cmd = std::move(*cmd);
      c.entrypoint = std::move(*ep);
      for (const char* key : {"WorkingDir", "User"}) {
        const Json* f = JsonField(*cfg, key);
        if (f && !f->is_string()) return Bad(what + ": " + key + " is not a string");
      }
      c.working_dir = JsonStringOr(*cfg, "WorkingDir", "");
      c.user = JsonStringOr(*cfg, "User", "");
    }
    if ((!c.os.empty() && c.os != opts_.os) ||
        (!c.architecture.empty() && c.architecture != opts_.architecture)) {
      return Bad("image is for " + c.os + "/" + c.architecture + ", want " + opts_.os + "/" +
                 opts_.architecture);
    }
    return std::move(*j);
  }

  static Result<std::vector<std::string>> DiffIds(const Json& config, const std::string& what) {
    const Json* rootfs = JsonField(config, "rootfs");
    if (!rootfs || !rootfs->is_object()) return Bad(what + ": config has no rootfs");
    auto ids = StringList(*rootfs, "diff_ids", what);
    if (!ids) return tl::unexpected(ids.error());
    for (const auto& id : *ids) {
      if (!internal::IsSha256Digest(id)) return Bad(what + ": malformed diff_id " + Quote(id));
    }
    return ids;
  }

  std::string PlatformOf(const Descriptor& d) {
    if (!d.platform || !d.platform->is_object()) return "unspecified";
    return JsonStringOr(*d.platform, "os", "?") + "/" +
           JsonStringOr(*d.platform, "architecture", "?");
  }

  // Picks one manifest from an index, following nested indexes.
  Result<Descriptor> Choose(const Json& index, const std::string& what, int depth) {
    if (depth > kMaxIndexDepth) return Bad(what + ": indexes nested too deeply");
    if (!index.is_object()) return Bad(what + " is not an object");
    const Json* manifests = JsonField(index, "manifests");
    if (!manifests || !manifests->is_array()) return Bad(what + " has no manifests list");
    std::vector<Descriptor> candidates;
    for (const auto& m : *manifests) {
      auto d = ParseDescriptor(m, what);
      if (!d) return tl::unexpected(d.error());
      if (!OneOf(d->media_type, kManifestTypes) && !OneOf(d->media_type, kIndexTypes)) continue;
      // BuildKit attaches attestations as extra "unknown/unknown" manifests.
      if (d->annotations && d->annotations->is_object() &&
          JsonStringOr(*d->annotations, "vnd.docker.reference.type", "") == "attestation-manifest")
        continue;
      candidates.push_back(*d);
    }
    if (candidates.empty()) return Bad(what + " lists no image manifest");
    const Descriptor* chosen = nullptr;
    for (const auto& c : candidates) {
      if (c.platform && c.platform->is_object() &&
          JsonStringOr(*c.platform, "os", "") == opts_.os &&
          JsonStringOr(*c.platform, "architecture", "") == opts_.architecture) {
        chosen = &c;
        break;
      }
    }
    if (!chosen && candidates.size() == 1 && !candidates[0].platform) chosen = &candidates[0];
    if (!chosen) {
      std::string have;
      for (const auto& c : candidates) have += (have.empty() ? "" : ", ") + PlatformOf(c);
      return Bad(what + ": no manifest for " + opts_.os + "/" + opts_.architecture + " (has " +
                 have + ")");
    }
    Descriptor d = *chosen;
    if (d.annotations && d.annotations->is_object()) {
      for (const char* key : {"io.containerd.image.name", "org.opencontainers.image.ref.name"}) {
        if (auto v = JsonString(*d.annotations, key)) tags_.push_back(*v);
      }
    }
    if (OneOf(d.media_type, kIndexTypes)) {
      auto nested = ReadJsonBlob(d, "index");
      if (!nested) return tl::unexpected(nested.error());
      return Choose(*nested, "index " + d.digest, depth + 1);
    }
    return d;
  }

  Result<OciImage> ReadOciLayout() {
    if (Exists("oci-layout")) {
      auto text = ReadSmall("oci-layout");
      if (!text) return tl::unexpected(text.error());
      auto j = ParseJsonDoc(*text, "oci-layout");
      if (!j) return tl::unexpected(j.error());
      if (!JsonString(*j, "imageLayoutVersion")) return Bad("oci-layout has no imageLayoutVersion");
    }
    auto text = ReadSmall("index.json");
    if (!text) return tl::unexpected(text.error());
    auto index = ParseJsonDoc(*text, "index.json");
    if (!index) return tl::unexpected(index.error());
    auto md = Choose(*index, "index.json", 0);
    if (!md) return tl::unexpected(md.error());
    auto manifest = ReadJsonBlob(*md, "manifest");
    if (!manifest) return tl::unexpected(manifest.error());
    std::string what = "manifest " + md->digest;
    if (!manifest->is_object()) return Bad(what + " is not an object");
    if (JsonIntOr(*manifest, "schemaVersion", 0) != 2)
      return Bad(what + ": schemaVersion is not 2");
    std::string mt = JsonStringOr(*manifest, "mediaType", md->media_type);
    if (!OneOf(mt, kManifestTypes)) return Bad(what + ": unexpected media type " + Quote(mt));

    OciImage img;
    img.layout = OciImage::Layout::kOci;
    img.manifest_digest = md->digest;
    const Json* cfg = JsonField(*manifest, "config");
    if (!cfg) return Bad(what + " has no config");
    auto cd = ParseDescriptor(*cfg, what + " config");
    if (!cd) return tl::unexpected(cd.error());
    if (cd->size > kMaxOciJsonBytes) return Fail(Errc::kTooLarge, what + ": config over 4 MiB");
    auto ctext = ReadSmall(BlobPath(cd->digest));
    if (!ctext) return tl::unexpected(std::move(ctext.error()).Wrap("config"));
    if (static_cast<int64_t>(ctext->size()) != cd->size)
      return Bad("config " + cd->digest + ": size does not match its descriptor");
    if (Sha256Bytes(*ctext) != cd->digest) return Bad("config " + cd->digest + ": digest mismatch");
    img.config_digest = cd->digest;
    auto config = ParseConfig(*ctext, cd->digest, &img);
    if (!config) return tl::unexpected(config.error());
    auto diff_ids = DiffIds(*config, "config " + cd->digest);
    if (!diff_ids) return tl::unexpected(diff_ids.error());

    const Json* layers = JsonField(*manifest, "layers");
    if (!layers || !layers->is_array()) return Bad(what + " has no layers list");
    if (layers->size() != diff_ids->size()) {
      return Bad(what + " has " + std::to_string(layers->size()) + " layers but its config lists " +
                 std::to_string(diff_ids->size()) + " diff_ids");
    }
    for (size_t i = 0; i < layers->size(); ++i) {
      std::string lw = "layer " + std::to_string(i);
      auto ld = ParseDescriptor((*layers)[i], lw);
      if (!ld) return tl::unexpected(ld.error());
      if (!OneOf(ld->media_type, kLayerTypes))
        return Bad(lw + " " + ld->digest + ": unsupported media type " + Quote(ld->media_type));
      auto f = VerifyFile(BlobPath(ld->digest), ld->digest, ld->size, lw);
      if (!f) return tl::unexpected(f.error());
      img.layers.push_back(OciLayer{f->real_path, ld->digest, ld->media_type, ld->size});
    }
    img.repo_tags = tags_;
    return img;
  }

  Result<OciImage> ReadDockerSave() {
    auto text = ReadSmall("manifest.json");
    if (!text) return tl::unexpected(text.error());
    auto j = ParseJsonDoc(*text, "manifest.json");
    if (!j) return tl::unexpected(j.error());
    if (!j->is_array() || j->empty()) return Bad("manifest.json is not a non-empty list");
    if (j->size() != 1) {
      return Bad("manifest.json holds " + std::to_string(j->size()) +
                 " images; save exactly one image per archive");
    }
    const Json& m = (*j)[0];
    if (!m.is_object()) return Bad("manifest.json entry is not an object");
    auto config_path = JsonString(m, "Config");
    if (!config_path) return Bad("manifest.json has no Config");
    auto cp = internal::SplitRelPath(*config_path, "manifest.json Config " + Quote(*config_path));
    if (!cp) return tl::unexpected(cp.error());
    if (cp->empty()) return Bad("manifest.json Config is empty");
    std::string crel = internal::JoinPath(*cp, cp->size());
    auto ctext = ReadSmall(crel);
    if (!ctext) return tl::unexpected(std::move(ctext.error()).Wrap("config"));
    std::string cdigest = Sha256Bytes(*ctext);
    // Docker names the config after its digest: "<hex>.json" (classic) or
    // "blobs/sha256/<hex>" (Docker 25+). Verify when the name is a digest.
    if (auto named = DigestFromName(*cp); !named.empty() && named != cdigest)
      return Bad("config " + Quote(crel) + ": digest mismatch (content is " + cdigest + ")");

    OciImage img;
    img.layout = OciImage::Layout::kDockerSave;
    img.config_digest = cdigest;
    auto config = ParseConfig(*ctext, cdigest, &img);
    if (!config) return tl::unexpected(config.error());
    auto diff_ids = DiffIds(*config, "config " + cdigest);
    if (!diff_ids) return tl::unexpected(diff_ids.error());
    auto layer_paths = StringList(m, "Layers", "manifest.json");
    if (!layer_paths) return tl::unexpected(layer_paths.error());
    if (layer_paths->size() != diff_ids->size()) {
      return Bad("manifest.json lists " + std::to_string(layer_paths->size()) +
                 " layers but the config lists " + std::to_string(diff_ids->size()) + " diff_ids");
    }
    for (size_t i = 0; i < layer_paths->size(); ++i) {
      const std::string& p = (*layer_paths)[i];
      std::string lw = "layer " + std::to_string(i) + " " + Quote(p);
      auto lp = internal::SplitRelPath(p, lw);
      if (!lp) return tl::unexpected(lp.error());
      if (lp->empty()) return Bad(lw + ": empty path");
      // docker save stores layers uncompressed, so each file hashes to its diff_id.
      const std::string& want = (*diff_ids)[i];
      if (auto named = DigestFromName(*lp); !named.empty() && named != want)
        return Bad(lw + ": file name says " + named + " but the config's diff_id is " + want);
      auto f = VerifyFile(internal::JoinPath(*lp, lp->size()), want, -1, lw);
      if (!f) return tl::unexpected(f.error());
      img.layers.push_back(OciLayer{f->real_path, want, "", f->size});
    }
    auto tags = StringList(m, "RepoTags", "manifest.json");
    if (tags) img.repo_tags = std::move(*tags);
    return img;
  }

  // "sha256:<hex>" when a path names a blob by digest: blobs/sha256/<hex> or <hex>.json.
  static std::string DigestFromName(const std::vector<std::string>& comps) {
    if (comps.empty()) return "";
    std::string base = comps.back();
    if (base.size() == 64 + 5 && base.compare(64, 5, ".json") == 0) base.resize(64);
    bool blob = comps.size() == 3 && comps[0] == "blobs" && comps[1] == "sha256";
    if (base.size() != 64) return "";
    std::string d = "sha256:" + base;
    if (!internal::IsSha256Digest(d)) return "";
    if (blob || comps.size() == 1) return d;
    return "";
  }

  std::string work_dir_;
  const OciReadOptions& opts_;
  UniqueFd root_;
  std::string real_root_;
  std::vector<std::string> tags_;
};

}  // namespace

Result<OciImage> ReadOciArchive(const std::string& archive_path, const std::string& work_dir,
                                const OciReadOptions& opts) {
  Reader r(work_dir, opts);
  auto img = r.Run(archive_path);
  if (!img) return tl::unexpected(std::move(img.error()).Wrap("image archive " + archive_path));
  return img;
}

Result<ExtractStats> UnpackOciImage(const OciImage& image, const std::string& dest_dir,
                                    const ExtractOptions& opts) {
  ExtractStats total;
  for (size_t i = 0; i < image.layers.size(); ++i) {
    const OciLayer& l = image.layers[i];
    ExtractOptions o = opts;
    o.whiteouts = true;
    o.max_bytes = opts.max_bytes - total.bytes;
    o.max_entries = opts.max_entries - total.entries;
    auto r = ExtractTar(l.path, dest_dir, o);
    if (!r) {
      return tl::unexpected(
          std::move(r.error()).Wrap("layer " + std::to_string(i) + " (" + l.digest + ")"));
    }
    total.bytes += r->bytes;
    total.entries += r->entries;
    for (auto& w : r->warnings)
      total.warnings.push_back("layer " + std::to_string(i) + ": " + std::move(w));
  }
  return total;
}

}  // namespace space::tmpl
