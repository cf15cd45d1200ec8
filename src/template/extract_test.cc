#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "sys/sys.h"
#include "template/template.h"
#include "template/test_archive.h"

namespace space::tmpl {
namespace {

using testing::Compression;
using testing::Dir;
using testing::File;
using testing::Hardlink;
using testing::Symlink;
using testing::TarBytes;
using testing::TarEntry;

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

bool LExists(const std::string& path) {
  struct stat sb;
  return ::lstat(path.c_str(), &sb) == 0;
}

// Each test gets base/{dest, outside}; hostile archives aim at `outside` (by absolute path,
// "..", symlinks), and every test checks afterwards that nothing appeared there.
class ExtractTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t = sys::TempDir::Create("/tmp", "space-extract-");
    ASSERT_TRUE(t);
    tmp_ = std::move(*t);
    dest_ = tmp_.path() + "/dest";
    outside_ = tmp_.path() + "/outside";
    ASSERT_EQ(::mkdir(dest_.c_str(), 0755), 0);
    ASSERT_EQ(::mkdir(outside_.c_str(), 0755), 0);
    testing::WriteFileOrDie(outside_ + "/target", "original");
  }
  void TearDown() override {
    EXPECT_EQ(List(outside_), std::set<std::string>{"target"}) << "something escaped dest";
    EXPECT_EQ(Read(outside_ + "/target"), "original");
    auto top = List(tmp_.path());
    top.erase("a.tar");
    EXPECT_EQ(top, (std::set<std::string>{"dest", "outside"}));
  }

  Result<ExtractStats> Extract(const std::string& bytes, const ExtractOptions& o = {}) {
    testing::WriteFileOrDie(tmp_.path() + "/a.tar", bytes);
    return ExtractTar(tmp_.path() + "/a.tar", dest_, o);
  }
  Result<ExtractStats> Extract(const std::vector<TarEntry>& entries, const ExtractOptions& o = {}) {
    return Extract(TarBytes(entries), o);
  }
  void ExpectRejected(const std::vector<TarEntry>& entries, const std::string& needle,
                      Errc code = Errc::kInvalidArgument, const ExtractOptions& o = {}) {
    auto r = Extract(entries, o);
    ASSERT_FALSE(r) << "accepted an archive that should be refused (" << needle << ")";
    EXPECT_EQ(r.error().code, code) << r.error().message;
    EXPECT_NE(r.error().message.find(needle), std::string::npos) << r.error().message;
  }

  sys::TempDir tmp_;
  std::string dest_, outside_;
};

TEST_F(ExtractTest, PreservesTypesModesOwnersAndTimesForEveryCompression) {
  for (Compression c :
       {Compression::kNone, Compression::kGzip, Compression::kZstd, Compression::kXz}) {
    SCOPED_TRACE(static_cast<int>(c));
    ASSERT_TRUE(sys::RemoveAll(dest_));
    ASSERT_EQ(::mkdir(dest_.c_str(), 0755), 0);
    TarEntry owned = File("etc/owned", "o", 0640);
    owned.uid = 1234;
    owned.gid = 5678;
    owned.mtime = 1600000000;
    TarEntry fifo;
    fifo.type = TarEntry::Type::kFifo;
    fifo.path = "run/fifo";
    fifo.mode = 0620;
    TarEntry locked = Dir("locked", 0500);
    locked.mtime = 1500000000;
    std::vector<TarEntry> entries = {
        Dir("etc", 0755),
        File("etc/hello", "hello world\n"),
        owned,
        File("bin/tool", "#!/bin/sh\n", 04755),
        locked,
        File("locked/inside", "x", 0600),
        Symlink("etc/abs-link", "/etc/passwd"),
        Symlink("etc/rel-link", "hello"),
        Hardlink("etc/hello-again", "etc/hello"),
        fifo,
        File("deep/a/b/c/d.txt", "deep"),
        File("./dotted/./file", "d"),
    };
    auto r = Extract(TarBytes(entries, c));
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->entries, entries.size());
    EXPECT_EQ(Read(dest_ + "/etc/hello"), "hello world\n");
    struct stat sb;
    ASSERT_EQ(::stat((dest_ + "/etc/owned").c_str(), &sb), 0);
    EXPECT_EQ(sb.st_uid, 1234u);
    EXPECT_EQ(sb.st_gid, 5678u);
    EXPECT_EQ(sb.st_mode & 07777, 0640u);
    EXPECT_EQ(sb.st_mtime, 1600000000);
    ASSERT_EQ(::stat((dest_ + "/bin/tool").c_str(), &sb), 0);
    EXPECT_EQ(sb.st_mode & 07777, 04755u);  // setuid survives (chmod after chown)
    ASSERT_EQ(::stat((dest_ + "/locked").c_str(), &sb), 0);
    EXPECT_EQ(sb.st_mode & 07777, 0500u);
    EXPECT_EQ(sb.st_mtime, 1500000000);  // set after its content was written
    EXPECT_EQ(Read(dest_ + "/locked/inside"), "x");
    char buf[64] = {};
    ASSERT_GT(::readlink((dest_ + "/etc/abs-link").c_str(), buf, sizeof buf - 1), 0);
    EXPECT_STREQ(buf, "/etc/passwd");
    struct stat a, b;
    ASSERT_EQ(::stat((dest_ + "/etc/hello").c_str(), &a), 0);
    ASSERT_EQ(::stat((dest_ + "/etc/hello-again").c_str(), &b), 0);
    EXPECT_EQ(a.st_ino, b.st_ino);
    ASSERT_EQ(::lstat((dest_ + "/run/fifo").c_str(), &sb), 0);
    EXPECT_TRUE(S_ISFIFO(sb.st_mode));
    EXPECT_EQ(sb.st_mode & 07777, 0620u);
    EXPECT_EQ(Read(dest_ + "/deep/a/b/c/d.txt"), "deep");
    EXPECT_EQ(Read(dest_ + "/dotted/file"), "d");
  }
}

// Archives from the real GNU tar (GNU long names, sparse files, external compressors) extract
// to the same tree.
TEST_F(ExtractTest, GnuTarArchivesRoundTrip) {
  if (!sys::Exists("/usr/bin/tar")) GTEST_SKIP() << "GNU tar is not installed";
  auto src = sys::TempDir::Create("/tmp", "space-extract-src-");
  ASSERT_TRUE(src);
  std::string s = src->path();
  std::string long_dir = s + "/" + std::string(120, 'd');
  ASSERT_TRUE(sys::MkdirAll(long_dir + "/" + std::string(150, 'e')));
  std::string long_file = long_dir + "/" + std::string(150, 'e') + "/" + std::string(200, 'f');
  testing::WriteFileOrDie(long_file, "long");
  {
    // 8 MiB sparse file with data at both ends.
    auto fd = sys::Open(s + "/sparse", O_WRONLY | O_CREAT, 0600);
    ASSERT_TRUE(fd);
    ASSERT_EQ(::pwrite(fd->get(), "head", 4, 0), 4);
    ASSERT_EQ(::pwrite(fd->get(), "tail", 4, (8 << 20) - 4), 4);
  }
  ASSERT_EQ(::link((s + "/sparse").c_str(), (s + "/sparse-link").c_str()), 0);
  ASSERT_EQ(::symlink("sparse", (s + "/sym").c_str()), 0);
  const std::string utf8_name = "h\xc3\xa9llo", raw_name = "bad\xff";
  testing::WriteFileOrDie(s + "/" + utf8_name, "u");
  testing::WriteFileOrDie(s + "/" + raw_name, "r");
  ASSERT_EQ(::chmod(s.c_str(), 0751), 0);
  for (const char* compress : {"", "gzip", "zstd", "xz"}) {
    SCOPED_TRACE(compress);
    if (*compress && !sys::Exists(std::string("/usr/bin/") + compress)) continue;
    std::string archive = tmp_.path() + "/a.tar";
    std::vector<std::string> argv = {"tar", "--sparse", "--numeric-owner", "-C", s, "-cf", archive};
    if (*compress) argv.insert(argv.begin() + 1, std::string("--use-compress-program=") + compress);
    if (!*compress) argv.insert(argv.begin() + 1, "--format=pax");  // the others: GNU format
    argv.push_back(".");
    auto run = sys::RunChecked({.argv = argv});
    ASSERT_TRUE(run) << run.error().message;
    ASSERT_TRUE(sys::RemoveAll(dest_));
    ASSERT_EQ(::mkdir(dest_.c_str(), 0755), 0);
    auto r = ExtractTar(archive, dest_);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(Read(dest_ + long_file.substr(s.size())), "long");
    // Names are bytes: kept exactly, whatever the locale, and without warnings.
    EXPECT_EQ(Read(dest_ + "/" + utf8_name), "u");
    EXPECT_EQ(Read(dest_ + "/" + raw_name), "r");
    EXPECT_TRUE(r->warnings.empty()) << r->warnings[0];
    struct stat a, b;
    ASSERT_EQ(::stat((dest_ + "/sparse").c_str(), &a), 0);
    EXPECT_EQ(a.st_size, 8 << 20);
    EXPECT_LT(a.st_blocks * 512, 1 << 20) << "the hole was written out";
    std::string content = Read(dest_ + "/sparse");
    EXPECT_EQ(content.substr(0, 4), "head");
    EXPECT_EQ(content.substr(content.size() - 4), "tail");
    ASSERT_EQ(::stat((dest_ + "/sparse-link").c_str(), &b), 0);
    EXPECT_EQ(a.st_ino, b.st_ino);
    ASSERT_EQ(::lstat((dest_ + "/sym").c_str(), &b), 0);
    EXPECT_TRUE(S_ISLNK(b.st_mode));
    ASSERT_EQ(::stat(dest_.c_str(), &b), 0);
    EXPECT_EQ(b.st_mode & 07777, 0751u);  // the "./" entry applies to dest itself
    ::unlink(archive.c_str());
  }
}

TEST_F(ExtractTest, RejectsAbsolutePaths) {
  ExpectRejected({File(outside_ + "/evil", "x")}, "absolute path not allowed");
  ExpectRejected({File("/" + outside_.substr(1) + "/evil", "x")}, outside_ + "/evil");
}

TEST_F(ExtractTest, RejectsDotDot) {
  ExpectRejected({File("../outside/evil", "x")}, "\"..\" path component");
  ExpectRejected({File("a/../../outside/evil", "x")}, "entry \"a/../../outside/evil\"");
  ExpectRejected({File("ok", "x"), Hardlink("h", "../outside/target")}, "hardlink target");
}

TEST_F(ExtractTest, RejectsWritingThroughASymlinkFromTheArchive) {
  ExpectRejected({Symlink("link", outside_), File("link/evil", "x")},
                 "path goes through symlink \"link\"");
  ExpectRejected({Symlink("rel", "../outside"), File("rel/evil", "x")}, "symlink \"rel\"");
  ExpectRejected({Symlink("d", outside_), Dir("d/sub")}, "symlink \"d\"");
  ExpectRejected({Dir("a"), Symlink("a/b", "/"), File("a/b/tmp/evil", "x")}, "symlink \"a/b\"");
}

TEST_F(ExtractTest, ReplacingASymlinkWritesAFreshFileNotItsTarget) {
  auto r = Extract({Symlink("f", outside_ + "/target"), File("f", "replaced")});
  ASSERT_TRUE(r) << r.error().message;
  struct stat sb;
  ASSERT_EQ(::lstat((dest_ + "/f").c_str(), &sb), 0);
  EXPECT_TRUE(S_ISREG(sb.st_mode));
  EXPECT_EQ(Read(dest_ + "/f"), "replaced");
  // TearDown checks outside/target still reads "original".
}

TEST_F(ExtractTest, ReplacingAHardlinkDoesNotChangeTheOtherName) {
  auto r = Extract({File("a", "first"), Hardlink("b", "a"), File("b", "second")});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(Read(dest_ + "/a"), "first");
  EXPECT_EQ(Read(dest_ + "/b"), "second");
}

TEST_F(ExtractTest, RejectsHardlinksOutOfTheTree) {
  struct stat before;
  ASSERT_EQ(::stat("/etc/passwd", &before), 0);
  ExpectRejected({Hardlink("pw", "/etc/passwd")}, "absolute path not allowed");
  ExpectRejected({Hardlink("pw", "../../../../etc/passwd")}, "\"..\" path component");
  ExpectRejected({Hardlink("pw", "etc/passwd")}, "does not exist in the tree");
  ExpectRejected({Symlink("etc", "/etc"), Hardlink("pw", "etc/passwd")},
                 "path goes through symlink \"etc\"");
  ExpectRejected({Dir("d"), Hardlink("h", "d")}, "hardlink to a directory");
  struct stat after;
  ASSERT_EQ(::stat("/etc/passwd", &after), 0);
  EXPECT_EQ(before.st_nlink, after.st_nlink);
  EXPECT_FALSE(LExists(dest_ + "/pw"));
}

TEST_F(ExtractTest, DevicesRejectedOrSkipped) {
  TarEntry chr;
  chr.type = TarEntry::Type::kCharDev;
  chr.path = "dev/null";
  TarEntry blk;
  blk.type = TarEntry::Type::kBlockDev;
  blk.path = "dev/loop0";
  ExpectRejected({File("ok", "x"), chr}, "entry \"dev/null\": character device not allowed");
  ExpectRejected({blk}, "entry \"dev/loop0\": block device not allowed");
  ExtractOptions o;
  o.skip_devices = true;
  auto r = Extract({chr, blk, File("after", "y")}, o);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_FALSE(LExists(dest_ + "/dev/null"));
  EXPECT_FALSE(LExists(dest_ + "/dev/loop0"));
  EXPECT_EQ(Read(dest_ + "/after"), "y");
  ASSERT_EQ(r->warnings.size(), 2u);
  EXPECT_EQ(r->warnings[0], "entry \"dev/null\": character device skipped");
  // Warnings are capped.
  std::vector<TarEntry> many(150, chr);
  for (size_t i = 0; i < many.size(); ++i) many[i].path = "dev/c" + std::to_string(i);
  r = Extract(many, o);
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->warnings.size(), 101u);
  EXPECT_EQ(r->warnings.back(), "... and 50 more warnings");
}

TEST_F(ExtractTest, HugeDeclaredSizeIsRefusedBeforeReadingData) {
  int64_t t0 = MonotonicNanos();
  auto r = Extract(testing::HugeDeclaredSizeTar("big", 1ull << 40));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::kTooLarge) << r.error().message;
  EXPECT_NE(r.error().message.find("entry \"big\": declared size 1099511627776"), std::string::npos)
      << r.error().message;
  EXPECT_FALSE(LExists(dest_ + "/big"));
  EXPECT_LT(MonotonicNanos() - t0, 2'000'000'000);
}

TEST_F(ExtractTest, TotalSizeLimit) {
  ExtractOptions o;
  o.max_bytes = 1000;
  ExpectRejected({File("a", std::string(600, 'a')), File("b", std::string(600, 'b'))},
                 "entry \"b\": declared size 600", Errc::kTooLarge, o);
  EXPECT_FALSE(LExists(dest_ + "/b"));
}

TEST_F(ExtractTest, EntryCountLimit) {
  std::vector<TarEntry> many;
  for (int i = 0; i < 20; ++i) many.push_back(File("f" + std::to_string(i), ""));
  ExtractOptions o;
  o.max_entries = 10;
  ExpectRejected(many, "more than 10 entries", Errc::kTooLarge, o);
  o.max_entries = 20;
  auto r = Extract(many, o);
  EXPECT_TRUE(r) << r.error().message;
}

TEST_F(ExtractTest, GarbageAndTruncatedArchivesAreErrors) {
  auto r = Extract(std::string("this is not a tar archive at all, not even close......") +
                   std::string(600, 'z'));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::kInvalidArgument) << r.error().message;
  std::string gz = TarBytes({File("a", std::string(100000, 'q'))}, Compression::kGzip);
  r = Extract(gz.substr(0, gz.size() / 2));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::kInvalidArgument) << r.error().message;
  std::string tar = TarBytes({File("a", std::string(100000, 'q'))});
  r = Extract(tar.substr(0, 5000));
  ASSERT_FALSE(r);
  r = Extract(std::string());  // an empty file is an empty archive
  EXPECT_TRUE(r) << r.error().message;
  EXPECT_FALSE(ExtractTar(tmp_.path() + "/missing.tar", dest_));
}

TEST_F(ExtractTest, Cancelled) {
  std::atomic<bool> cancel{true};
  ExtractOptions o;
  o.cancel = &cancel;
  ExpectRejected({File("a", "x")}, "cancelled", Errc::kDeadlineExceeded, o);
}

TEST_F(ExtractTest, WhiteoutsAndOpaqueDirectoriesAcrossTwoLayers) {
  ExtractOptions o;
  o.whiteouts = true;
  auto r = Extract({File("a/file1", "1"), File("a/file2", "2"), File("b/keep", "k"),
                    File("c/x/y", "y"), File("d/lower1", "l"), File("d/sub/deep", "deep"),
                    File("e/plain", "p"), File("g/f", "gf"), Dir("h"), File("i", "file")},
                   o);
  ASSERT_TRUE(r) << r.error().message;
  r = Extract({File("a/.wh.file1", ""), File(".wh.c", ""),
               File("d/upper-before", "u1"),  // same layer as the opaque marker: kept
               File("d/.wh..wh..opq", ""), File("d/sub/new", "n"), File("d/upper-after", "u2"),
               File("b/new", "n"), File("e/f", "same-layer"),
               File("e/.wh.f", ""),  // whiteouts never hide their own layer
               File(".wh..wh.plnk", ""), File("a/.wh.never-existed", ""), File("nodir/.wh.x", ""),
               File("g", "file over dir"), Dir("i"), File("i/in", "dir over file")},
              o);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(List(dest_ + "/a"), std::set<std::string>{"file2"});
  EXPECT_FALSE(LExists(dest_ + "/c"));
  EXPECT_EQ(List(dest_ + "/b"), (std::set<std::string>{"keep", "new"}));
  EXPECT_EQ(List(dest_ + "/d"), (std::set<std::string>{"upper-before", "upper-after", "sub"}));
  EXPECT_EQ(List(dest_ + "/d/sub"), std::set<std::string>{"new"});
  EXPECT_EQ(List(dest_ + "/e"), (std::set<std::string>{"plain", "f"}));
  EXPECT_EQ(Read(dest_ + "/g"), "file over dir");
  EXPECT_EQ(Read(dest_ + "/i/in"), "dir over file");
  EXPECT_EQ(List(dest_),
            (std::set<std::string>{"a", "b", "d", "e", "g", "h", "i"}));  // no .wh.* files
}

TEST_F(ExtractTest, WhiteoutsOffExtractsThemAsFiles) {
  auto r = Extract({File("a/.wh.x", ""), File("a/.wh..wh..opq", "")});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(List(dest_ + "/a"), (std::set<std::string>{".wh.x", ".wh..wh..opq"}));
}

TEST_F(ExtractTest, WhiteoutThroughASymlinkIsRefused) {
  ExtractOptions o;
  o.whiteouts = true;
  ASSERT_TRUE(Extract({Symlink("l", outside_)}, o));
  ExpectRejected({File("l/.wh.target", "")}, "path goes through symlink \"l\"",
                 Errc::kInvalidArgument, o);
  ExpectRejected({File("l/.wh..wh..opq", "")}, "symlink \"l\"", Errc::kInvalidArgument, o);
  ExpectRejected({File(".wh..", "")}, "whiteout of nothing", Errc::kInvalidArgument, o);
  ExpectRejected({File("a/.wh...", "")}, "whiteout of nothing", Errc::kInvalidArgument, o);
}

}  // namespace
}  // namespace space::tmpl
