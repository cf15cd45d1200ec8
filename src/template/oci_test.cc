#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "sys/sys.h"
#include "template/template.h"
#include "template/test_archive.h"

namespace space::tmpl {
namespace {

using Json = nlohmann::json;
using testing::Compression;
using testing::Dir;
using testing::File;
using testing::Sha256Hex;
using testing::Symlink;
using testing::TarBytes;
using testing::TarEntry;

constexpr const char* kManifestType = "application/vnd.oci.image.manifest.v1+json";
constexpr const char* kIndexType = "application/vnd.oci.image.index.v1+json";

std::set<std::string> List(const std::string& dir) {
  std::set<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") out.insert(n);
  }
  ::closedir(d);
  return out;
}

std::string Read(const std::string& path) {
  auto r = sys::ReadFile(path);
  return r ? *r : "<missing>";
}

// The three layers every image in these tests carries, and the tree they make together.
std::vector<TarEntry> Layer1() {
  return {File("etc/hello", "hello v1"),
          File("bin/tool", "#!/bin/sh\n", 0755),
          File("dir/a", "a"),
          File("dir/b", "b"),
          Dir("opq"),
          File("opq/old", "old")};
}
std::vector<TarEntry> Layer2() {
  return {File("dir/.wh.a", ""), File("opq/.wh..wh..opq", ""), File("opq/new", "new"),
          File("etc/added", "added")};
}
std::vector<TarEntry> Layer3() { return {File("etc/hello", "hello v3")}; }

void ExpectImageTree(const std::string& root) {
  EXPECT_EQ(List(root), (std::set<std::string>{"etc", "bin", "dir", "opq"}));
  EXPECT_EQ(Read(root + "/etc/hello"), "hello v3");
  EXPECT_EQ(Read(root + "/etc/added"), "added");
  EXPECT_EQ(List(root + "/dir"), std::set<std::string>{"b"});
  EXPECT_EQ(List(root + "/opq"), std::set<std::string>{"new"});
  struct stat sb;
  ASSERT_EQ(::stat((root + "/bin/tool").c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0755u);
}

Json ConfigJson(const std::vector<std::string>& diff_ids, const std::string& arch = "amd64") {
  return Json{{"architecture", arch},
              {"os", "linux"},
              {"config",
               {{"Env", {"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"}},
                {"WorkingDir", "/work"},
                {"User", "1000:1000"},
                {"Cmd", {"sh", "-l"}},
                {"Entrypoint", nullptr}}},
              {"rootfs", {{"type", "layers"}, {"diff_ids", diff_ids}}}};
}

Json Desc(const std::string& media_type, const std::string& digest, size_t size) {
  return Json{{"mediaType", media_type}, {"digest", digest}, {"size", size}};
}

// An OCI image layout being assembled in memory: path -> bytes, then tarred.
struct Layout {
  std::map<std::string, std::string> files;
  std::vector<TarEntry> links;

  std::string AddBlob(const std::string& data) {
    std::string hex = Sha256Hex(data);
    files["blobs/sha256/" + hex] = data;
    return "sha256:" + hex;
  }
  Json AddJsonBlob(const Json& j, const std::string& media_type) {
    std::string text = j.dump();
    return Desc(media_type, AddBlob(text), text.size());
  }
  std::string Archive() const {
    std::vector<TarEntry> entries;
    for (const auto& [path, data] : files) entries.push_back(File(path, data));
    for (const auto& l : links) entries.push_back(l);
    return TarBytes(entries);
  }
};

// A complete linux/amd64 image: three layers (gzip, zstd, plain). Returns the manifest
// descriptor (without platform); layer descriptors are left in *layers for tampering.
Json AddImage(Layout* l, const std::string& arch = "amd64", std::vector<Json>* layers = nullptr) {
  struct L {
    std::vector<TarEntry> entries;
    Compression c;
    const char* type;
  };
  std::vector<L> ls = {
      {Layer1(), Compression::kGzip, "application/vnd.oci.image.layer.v1.tar+gzip"},
      {Layer2(), Compression::kZstd, "application/vnd.oci.image.layer.v1.tar+zstd"},
      {Layer3(), Compression::kNone, "application/vnd.oci.image.layer.v1.tar"}};
  std::vector<std::string> diff_ids;
  Json layer_descs = Json::array();
  for (const auto& x : ls) {
    diff_ids.push_back("sha256:" + Sha256Hex(TarBytes(x.entries)));
    std::string blob = TarBytes(x.entries, x.c);
    layer_descs.push_back(Desc(x.type, l->AddBlob(blob), blob.size()));
  }
  if (layers) layers->assign(layer_descs.begin(), layer_descs.end());
  Json config =
      l->AddJsonBlob(ConfigJson(diff_ids, arch), "application/vnd.oci.image.config.v1+json");
  Json manifest = {{"schemaVersion", 2},
                   {"mediaType", kManifestType},
                   {"config", config},
                   {"layers", layer_descs}};
  return l->AddJsonBlob(manifest, kManifestType);
}

Json Platform(const std::string& arch) { return Json{{"os", "linux"}, {"architecture", arch}}; }

class OciTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = sys::TempDir::Create("/tmp", "space-oci-");
    ASSERT_TRUE(t);
    tmp_ = std::move(*t);
    archive_ = tmp_.path() + "/image.tar";
    work_ = tmp_.path() + "/work";
    dest_ = tmp_.path() + "/rootfs";
    ASSERT_EQ(::mkdir(dest_.c_str(), 0755), 0);
  }

  Result<OciImage> Read(const Layout& l, const OciReadOptions& o = {}) {
    testing::WriteFileOrDie(archive_, l.Archive());
    return ReadOciArchive(archive_, work_, o);
  }
  void ExpectRejected(const Layout& l, const std::string& needle,
                      Errc code = Errc::kInvalidArgument) {
    auto r = Read(l);
    ASSERT_FALSE(r) << "accepted an image that should be refused (" << needle << ")";
    EXPECT_EQ(r.error().code, code) << r.error().message;
    EXPECT_NE(r.error().message.find(needle), std::string::npos) << r.error().message;
  }

  sys::TempDir tmp_;
  std::string archive_, work_, dest_;
};

TEST_F(OciTest, OciLayoutPicksAmd64AndUnpacksWithWhiteouts) {
  Layout l;
  Json arm = AddImage(&l, "arm64");
  arm["platform"] = Platform("arm64");
  Json amd = AddImage(&l);
  amd["platform"] = Platform("amd64");
  amd["annotations"] = {{"org.opencontainers.image.ref.name", "demo:1"}};
  l.files["index.json"] = Json{{"schemaVersion", 2}, {"manifests", {arm, amd}}}.dump();
  l.files["oci-layout"] = R"({"imageLayoutVersion": "1.0.0"})";
  auto img = Read(l);
  ASSERT_TRUE(img) << img.error().message;
  EXPECT_EQ(img->layout, OciImage::Layout::kOci);
  EXPECT_EQ(img->manifest_digest, amd["digest"]);
  ASSERT_EQ(img->layers.size(), 3u);
  EXPECT_EQ(img->layers[1].media_type, "application/vnd.oci.image.layer.v1.tar+zstd");
  EXPECT_EQ(img->layers[0].path.rfind(work_ + "/blobs/sha256/", 0), 0u) << img->layers[0].path;
  EXPECT_EQ(img->config.env,
            (std::vector<std::string>{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"}));
  EXPECT_EQ(img->config.working_dir, "/work");
  EXPECT_EQ(img->config.user, "1000:1000");
  EXPECT_EQ(img->config.cmd, (std::vector<std::string>{"sh", "-l"}));
  EXPECT_TRUE(img->config.entrypoint.empty());
  EXPECT_EQ(img->config.architecture, "amd64");
  EXPECT_EQ(img->repo_tags, std::vector<std::string>{"demo:1"});
  auto r = UnpackOciImage(*img, dest_);
  ASSERT_TRUE(r) << r.error().message;
  ExpectImageTree(dest_);
}

TEST_F(OciTest, NestedIndexAndSingleManifestWithoutPlatform) {
  Layout l;
  Json amd = AddImage(&l);
  amd["platform"] = Platform("amd64");
  Json nested = l.AddJsonBlob(Json{{"schemaVersion", 2}, {"manifests", {amd}}}, kIndexType);
  l.files["index.json"] = Json{{"schemaVersion", 2}, {"manifests", {nested}}}.dump();
  auto img = Read(l);
  ASSERT_TRUE(img) << img.error().message;
  ASSERT_TRUE(UnpackOciImage(*img, dest_));
  ExpectImageTree(dest_);
}

TEST_F(OciTest, OnlyOtherPlatformsIsAnError) {
  Layout l;
  Json arm = AddImage(&l, "arm64");
  arm["platform"] = Platform("arm64");
  l.files["index.json"] = Json{{"schemaVersion", 2}, {"manifests", {arm}}}.dump();
  ExpectRejected(l, "no manifest for linux/amd64 (has linux/arm64)");
  // The only manifest, without a platform, but its config says arm64.
  Layout l2;
  Json only = AddImage(&l2, "arm64");
  l2.files["index.json"] = Json{{"schemaVersion", 2}, {"manifests", {only}}}.dump();
  ASSERT_TRUE(sys::RemoveAll(work_));
  ExpectRejected(l2, "image is for linux/arm64, want linux/amd64");
}

TEST_F(OciTest, CorruptedLayerBlobIsRejected) {
  Layout l;
  std::vector<Json> layers;
  Json m = AddImage(&l, "amd64", &layers);
  l.files["index.json"] = Json{{"schemaVersion", 2}, {"manifests", {m}}}.dump();
  std::string path = "blobs/sha256/" + layers[1]["digest"].get<std::string>().substr(7);
  l.files[path][l.files[path].size() / 2] ^= 0x01;
  ExpectRejected(l, "layer 1 " + layers[1]["digest"].get<std::string>() + ": digest mismatch");
  ASSERT_TRUE(sys::RemoveAll(work_));
  l.files[path] += "x";  // and now the size is wrong too
  ExpectRejected(l, "size");
}

TEST_F(OciTest, CorruptedManifestOrConfigIsRejected) {
  Layout l;
  Json m = AddImage(&l);
  l.files["index.json"] = Json{{"schemaVersion", 2}, {"manifests", {m}}}.dump();
  std::string path = "blobs/sha256/" + m["digest"].get<std::string>().substr(7);
  std::string good = l.files[path];
  l.files[path][10] = l.files[path][10] == 'x' ? 'y' : 'x';
  ExpectRejected(l, "digest mismatch");
  l.files[path] = good;
  // Missing blob.
  ASSERT_TRUE(sys::RemoveAll(work_));
  l.files.erase(path);
  ExpectRejected(l, "is missing from the archive");
}

TEST_F(OciTest, MalformedOrHostileIndexIsRejected) {
  Layout l;
  Json m = AddImage(&l);
  l.files["index.json"] = "{\"manifests\": [";
  ExpectRejected(l, "index.json is not valid JSON");
  ASSERT_TRUE(sys::RemoveAll(work_));
  l.files["index.json"] = std::string(kMaxOciJsonBytes + 1, ' ');
  ExpectRejected(l, "JSON documents are limited", Errc::kTooLarge);
  ASSERT_TRUE(sys::RemoveAll(work_));
  Json bad = m;
  bad["digest"] = "sha256:../../../../etc/passwd";
  l.files["index.json"] = Json{{"schemaVersion", 2}, {"manifests", {bad}}}.dump();
  ExpectRejected(l, "malformed digest");
  ASSERT_TRUE(sys::RemoveAll(work_));
  bad["digest"] = "sha512:" + std::string(128, 'a');
  l.files["index.json"] = Json{{"schemaVersion", 2}, {"manifests", {bad}}}.dump();
  ExpectRejected(l, "unsupported or malformed digest");
  ASSERT_TRUE(sys::RemoveAll(work_));
  l.files["index.json"] = Json{{"schemaVersion", 2}, {"manifests", {m, m}}}.dump();
  // Two manifests without platforms: ambiguous.
  ExpectRejected(l, "no manifest for linux/amd64");
  ASSERT_TRUE(sys::RemoveAll(work_));
  l.files.erase("index.json");
  ExpectRejected(l, "not an OCI image layout or docker save archive");
}

TEST_F(OciTest, ForeignAndUnknownLayersAreRejected) {
  for (int variant = 0; variant < 2; ++variant) {
    Layout l;
    std::vector<Json> layers;
    Json m = AddImage(&l, "amd64", &layers);
    // Rebuild the manifest with a tampered layer list.
    std::string mpath = "blobs/sha256/" + m["digest"].get<std::string>().substr(7);
    Json manifest = Json::parse(l.files[mpath]);
    if (variant == 0) {
      manifest["layers"][0]["urls"] = {"https://example.invalid/layer"};
    } else {
      manifest["layers"][0]["mediaType"] = "application/vnd.oci.image.layer.v1.tar+gzip+encrypted";
    }
    Json m2 = l.AddJsonBlob(manifest, kManifestType);
    l.files["index.json"] = Json{{"schemaVersion", 2}, {"manifests", {m2}}}.dump();
    ASSERT_TRUE(sys::RemoveAll(work_));
    ExpectRejected(l, variant == 0 ? "external layer URLs" : "unsupported media type");
  }
}

TEST_F(OciTest, HostileOuterArchiveAndDirtyWorkDir) {
  Layout l;
  l.links.push_back(File("../escape", "x"));
  ExpectRejected(l, "\"..\" path component");
  ASSERT_TRUE(sys::MkdirAll(work_ + "/leftover"));
  Layout ok;
  ok.files["index.json"] = "{}";
  ExpectRejected(ok, "is not empty");
}

TEST_F(OciTest, LimitsApplyAcrossAllLayers) {
  Layout l;
  Json m = AddImage(&l);
  l.files["index.json"] = Json{{"schemaVersion", 2}, {"manifests", {m}}}.dump();
  auto img = Read(l);
  ASSERT_TRUE(img) << img.error().message;
  ExtractOptions o;
  o.max_entries = 10;  // 6 + 4 entries fit, the third layer's one does not
  auto r = UnpackOciImage(*img, dest_, o);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::kTooLarge);
  EXPECT_NE(r.error().message.find("layer 2 ("), std::string::npos) << r.error().message;
}

// The classic `docker save` layout: manifest.json, <config digest>.json, <id>/layer.tar,
// with a layer shared through a symlink as Docker writes it.
struct DockerSave {
  Layout l;
  std::string config_name;
  DockerSave() {
    std::string t1 = TarBytes(Layer1()), t2 = TarBytes(Layer2()), t3 = TarBytes(Layer3());
    std::vector<std::string> diff_ids = {"sha256:" + Sha256Hex(t1), "sha256:" + Sha256Hex(t2),
                                         "sha256:" + Sha256Hex(t3)};
    std::string config = ConfigJson(diff_ids).dump();
    config_name = Sha256Hex(config) + ".json";
    l.files[config_name] = config;
    l.files["aaa/layer.tar"] = t1;
    l.files["bbb/layer.tar"] = t2;
    l.files["shared/ccc.tar"] = t3;
    l.links.push_back(Dir("ccc"));
    l.links.push_back(Symlink("ccc/layer.tar", "../shared/ccc.tar"));
    l.files["repositories"] = R"({"demo":{"1":"x"}})";
    SetLayers({"aaa/layer.tar", "bbb/layer.tar", "ccc/layer.tar"});
  }
  void SetLayers(const std::vector<std::string>& layers) {
    l.files["manifest.json"] =
        Json::array({{{"Config", config_name}, {"RepoTags", {"demo:1"}}, {"Layers", layers}}})
            .dump();
  }
};

TEST_F(OciTest, DockerSaveLayoutUnpacks) {
  DockerSave d;
  auto img = Read(d.l);
  ASSERT_TRUE(img) << img.error().message;
  EXPECT_EQ(img->layout, OciImage::Layout::kDockerSave);
  EXPECT_EQ(img->config_digest, "sha256:" + d.config_name.substr(0, 64));
  EXPECT_EQ(img->repo_tags, std::vector<std::string>{"demo:1"});
  EXPECT_EQ(img->config.working_dir, "/work");
  ASSERT_EQ(img->layers.size(), 3u);
  // The symlinked layer is handed on by its real, symlink-free path.
  EXPECT_EQ(img->layers[2].path, work_ + "/shared/ccc.tar");
  auto r = UnpackOciImage(*img, dest_);
  ASSERT_TRUE(r) << r.error().message;
  ExpectImageTree(dest_);
}

TEST_F(OciTest, DockerSaveWithOciIndexPrefersTheIndex) {
  // Docker 25+ writes both; the OCI index (with digests for everything) wins.
  DockerSave d;
  Json m = AddImage(&d.l);
  d.l.files["index.json"] = Json{{"schemaVersion", 2}, {"manifests", {m}}}.dump();
  d.l.files["oci-layout"] = R"({"imageLayoutVersion": "1.0.0"})";
  auto img = Read(d.l);
  ASSERT_TRUE(img) << img.error().message;
  EXPECT_EQ(img->layout, OciImage::Layout::kOci);
  ASSERT_TRUE(UnpackOciImage(*img, dest_));
  ExpectImageTree(dest_);
}

TEST_F(OciTest, DockerSaveHostileOrCorrupt) {
  {
    DockerSave d;
    d.l.files["bbb/layer.tar"][700] ^= 0x20;
    ExpectRejected(d.l, "digest mismatch");
  }
  {
    ASSERT_TRUE(sys::RemoveAll(work_));
    DockerSave d;
    d.l.files[d.config_name] += " ";  // the name no longer matches the content
    ExpectRejected(d.l, "config \"" + d.config_name + "\": digest mismatch");
  }
  {
    ASSERT_TRUE(sys::RemoveAll(work_));
    DockerSave d;
    d.SetLayers({"aaa/layer.tar", "../bbb/layer.tar", "ccc/layer.tar"});
    ExpectRejected(d.l, "\"..\" path component");
  }
  {
    ASSERT_TRUE(sys::RemoveAll(work_));
    DockerSave d;
    d.SetLayers({"/etc/passwd", "bbb/layer.tar", "ccc/layer.tar"});
    ExpectRejected(d.l, "absolute path not allowed");
  }
  {
    // A symlink pointing out of the archive resolves inside it (RESOLVE_IN_ROOT) and so
    // finds nothing, instead of reading the host's file.
    ASSERT_TRUE(sys::RemoveAll(work_));
    DockerSave d;
    d.l.files.erase("aaa/layer.tar");
    d.l.links.push_back(Dir("aaa"));
    d.l.links.push_back(Symlink("aaa/layer.tar", "/etc/passwd"));
    ExpectRejected(d.l, "\"aaa/layer.tar\" is missing from the archive");
  }
  {
    ASSERT_TRUE(sys::RemoveAll(work_));
    DockerSave d;
    d.SetLayers({"aaa/layer.tar", "bbb/layer.tar"});
    ExpectRejected(d.l, "lists 2 layers but the config lists 3 diff_ids");
  }
  {
    ASSERT_TRUE(sys::RemoveAll(work_));
    DockerSave d;
    Json two = Json::parse(d.l.files["manifest.json"]);
    two.push_back(two[0]);
    d.l.files["manifest.json"] = two.dump();
    ExpectRejected(d.l, "holds 2 images");
  }
}

}  // namespace
}  // namespace space::tmpl
