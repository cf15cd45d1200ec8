// Tests for OutputLog and the output readers, on real files in a temporary directory.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "store/store.h"

namespace space::store {
namespace {

class OutputLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = sys::TempDir::Create("/tmp", "space-outlog-test-");
    ASSERT_TRUE(dir) << dir.error().message;
    tmp_ = std::move(*dir);
    dir_ = tmp_.path() + "/logs/sb-1";  // missing: Open creates it
  }
  std::string Read(OutputStream s, uint64_t offset = 0, size_t max = SIZE_MAX) {
    auto r = ReadOutput(dir_, "cmd-1", s, offset, max);
    EXPECT_TRUE(r) << r.error().message;
    return r ? *r : std::string("<error>");
  }

  sys::TempDir tmp_;
  std::string dir_;
};

TEST_F(OutputLogTest, StreamNamesAndPaths) {
  EXPECT_EQ(OutputStreamName(OutputStream::kStdout), "stdout");
  EXPECT_EQ(OutputStreamName(OutputStream::kStderr), "stderr");
  EXPECT_EQ(OutputPath("/d", "cmd-x", OutputStream::kStdout), "/d/cmd-x.stdout");
  EXPECT_EQ(OutputPath("/d", "cmd-x", OutputStream::kStderr), "/d/cmd-x.stderr");
}

TEST_F(OutputLogTest, AppendKeepsStreamsApart) {
  auto log = OutputLog::Open(dir_, "cmd-1");
  ASSERT_TRUE(log) << log.error().message;
  EXPECT_EQ((*log)->Size(OutputStream::kStdout), 0u);
  EXPECT_EQ(*(*log)->Append(OutputStream::kStdout, 0, "hello "), 6u);
  EXPECT_EQ(*(*log)->Append(OutputStream::kStderr, 0, "oops"), 4u);
  EXPECT_EQ(*(*log)->Append(OutputStream::kStdout, 6, "world"), 11u);
  EXPECT_EQ(*(*log)->Append(OutputStream::kStdout, 11, ""), 11u);
  EXPECT_EQ((*log)->Size(OutputStream::kStdout), 11u);
  EXPECT_EQ((*log)->Size(OutputStream::kStderr), 4u);
  EXPECT_EQ(Read(OutputStream::kStdout), "hello world");
  EXPECT_EQ(Read(OutputStream::kStderr), "oops");
  EXPECT_EQ(OutputSize(dir_, "cmd-1", OutputStream::kStdout), 11u);
  EXPECT_EQ(OutputSize(dir_, "cmd-1", OutputStream::kStderr), 4u);
  ASSERT_TRUE((*log)->Sync());
}

TEST_F(OutputLogTest, BinaryBytesSurvive) {
  auto log = OutputLog::Open(dir_, "cmd-1");
  ASSERT_TRUE(log);
  std::string bin;
  for (int i = 0; i < 256; ++i) bin.push_back(static_cast<char>(i));
  ASSERT_TRUE((*log)->Append(OutputStream::kStdout, 0, bin));
  EXPECT_EQ(Read(OutputStream::kStdout), bin);
}

TEST_F(OutputLogTest, ResentOverlapIsSkippedExactly) {
  auto log = OutputLog::Open(dir_, "cmd-1");
  ASSERT_TRUE(log);
  ASSERT_EQ(*(*log)->Append(OutputStream::kStdout, 0, "abcdef"), 6u);
  // Entirely old: nothing written.
  EXPECT_EQ(*(*log)->Append(OutputStream::kStdout, 0, "abcdef"), 6u);
  EXPECT_EQ(*(*log)->Append(OutputStream::kStdout, 2, "cd"), 6u);
  // Straddles the end: only "ghi" is new. The old part is deliberately different bytes
  // ("XY") to show it is skipped by offset, not compared.
  EXPECT_EQ(*(*log)->Append(OutputStream::kStdout, 4, "XYghi"), 9u);
  EXPECT_EQ(Read(OutputStream::kStdout), "abcdefghi");
  // Ends exactly at the current size.
  EXPECT_EQ(*(*log)->Append(OutputStream::kStdout, 5, "fghi"), 9u);
  EXPECT_EQ(Read(OutputStream::kStdout), "abcdefghi");
  EXPECT_EQ(Read(OutputStream::kStderr), "");
}

TEST_F(OutputLogTest, GapIsRejected) {
  auto log = OutputLog::Open(dir_, "cmd-1");
  ASSERT_TRUE(log);
  ASSERT_TRUE((*log)->Append(OutputStream::kStderr, 0, "abc"));
  auto gap = (*log)->Append(OutputStream::kStderr, 4, "e");
  ASSERT_FALSE(gap);
  EXPECT_EQ(gap.error().code, Errc::kInvalidArgument);
  EXPECT_NE(gap.error().message.find("gap"), std::string::npos) << gap.error().message;
  EXPECT_EQ((*log)->Size(OutputStream::kStderr), 3u);
  EXPECT_EQ(Read(OutputStream::kStderr), "abc");
  // The stream continues normally afterwards.
  EXPECT_EQ(*(*log)->Append(OutputStream::kStderr, 3, "d"), 4u);
  // A gap on an empty stream too.
  EXPECT_FALSE((*log)->Append(OutputStream::kStdout, 1, "x"));
  EXPECT_EQ(OutputSize(dir_, "cmd-1", OutputStream::kStdout), 0u);
}

TEST_F(OutputLogTest, ReopenContinuesAtSize) {
  {
    auto log = OutputLog::Open(dir_, "cmd-1");
    ASSERT_TRUE(log);
    ASSERT_TRUE((*log)->Append(OutputStream::kStdout, 0, "first "));
    ASSERT_TRUE((*log)->Append(OutputStream::kStderr, 0, "e1"));
  }  // the "daemon" goes away
  auto log = OutputLog::Open(dir_, "cmd-1");
  ASSERT_TRUE(log);
  EXPECT_EQ((*log)->Size(OutputStream::kStdout), 6u);
  EXPECT_EQ((*log)->Size(OutputStream::kStderr), 2u);
  // The agent re-sends from its last ACK (say 3): the stored prefix is skipped.
  EXPECT_EQ(*(*log)->Append(OutputStream::kStdout, 3, "st second"), 12u);
  EXPECT_EQ(*(*log)->Append(OutputStream::kStderr, 2, "e2"), 4u);
  EXPECT_EQ(Read(OutputStream::kStdout), "first second");
  EXPECT_EQ(Read(OutputStream::kStderr), "e1e2");
}

TEST_F(OutputLogTest, FilesAreMode0600) {
  mode_t old = ::umask(0);
  auto log = OutputLog::Open(dir_, "cmd-1");
  ASSERT_TRUE(log);
  // Files appear with the first byte of their stream.
  EXPECT_FALSE(sys::Exists(OutputPath(dir_, "cmd-1", OutputStream::kStdout)));
  ASSERT_TRUE((*log)->Append(OutputStream::kStdout, 0, "x"));
  ASSERT_TRUE((*log)->Append(OutputStream::kStderr, 0, "y"));
  ::umask(old);
  for (OutputStream s : {OutputStream::kStdout, OutputStream::kStderr}) {
    struct stat st;
    ASSERT_EQ(::stat(OutputPath(dir_, "cmd-1", s).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
  }
}

TEST_F(OutputLogTest, ReadOutputAtOffsets) {
  auto log = OutputLog::Open(dir_, "cmd-1");
  ASSERT_TRUE(log);
  ASSERT_TRUE((*log)->Append(OutputStream::kStdout, 0, "0123456789"));
  EXPECT_EQ(Read(OutputStream::kStdout, 0), "0123456789");
  EXPECT_EQ(Read(OutputStream::kStdout, 0, 4), "0123");
  EXPECT_EQ(Read(OutputStream::kStdout, 3, 4), "3456");
  EXPECT_EQ(Read(OutputStream::kStdout, 7), "789");
  EXPECT_EQ(Read(OutputStream::kStdout, 7, 100), "789");
  EXPECT_EQ(Read(OutputStream::kStdout, 9, 1), "9");
  EXPECT_EQ(Read(OutputStream::kStdout, 10), "");  // at EOF
  EXPECT_EQ(Read(OutputStream::kStdout, 11), "");  // past EOF
  EXPECT_EQ(Read(OutputStream::kStdout, UINT64_MAX), "");
  EXPECT_EQ(Read(OutputStream::kStdout, 2, 0), "");
  // Reads see appends made after the reader's previous call.
  ASSERT_TRUE((*log)->Append(OutputStream::kStdout, 10, "ab"));
  EXPECT_EQ(Read(OutputStream::kStdout, 10), "ab");
}

TEST_F(OutputLogTest, MissingFilesReadAsEmpty) {
  auto r = ReadOutput(dir_ + "/nope", "cmd-none", OutputStream::kStdout, 0, 100);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(*r, "");
  EXPECT_EQ(OutputSize(dir_ + "/nope", "cmd-none", OutputStream::kStderr), 0u);
}

TEST_F(OutputLogTest, InvalidCommandIdsAreRejected) {
  const std::vector<std::string> ids = {"",    ".",    "..",   "../x",
                                        "a/b", "/abs", "x..y", std::string("a\0b", 3)};
  for (const std::string& id : ids) {
    auto log = OutputLog::Open(dir_, id);
    ASSERT_FALSE(log) << "id=" << id;
    EXPECT_EQ(log.error().code, Errc::kInvalidArgument) << "id=" << id;
    auto r = ReadOutput(dir_, id, OutputStream::kStdout, 0, 10);
    ASSERT_FALSE(r) << "id=" << id;
    EXPECT_EQ(r.error().code, Errc::kInvalidArgument);
    EXPECT_EQ(OutputSize(dir_, id, OutputStream::kStdout), 0u);
  }
  // Nothing was created outside the (never created) log dir.
  EXPECT_FALSE(sys::Exists(dir_));
}

TEST_F(OutputLogTest, InvalidStreamValueIsRejected) {
  auto log = OutputLog::Open(dir_, "cmd-1");
  ASSERT_TRUE(log);
  auto bad = (*log)->Append(static_cast<OutputStream>(3), 0, "x");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, Errc::kInvalidArgument);
  EXPECT_EQ((*log)->Size(static_cast<OutputStream>(0)), 0u);
}

// Not asserted: prints Append throughput with 1 MiB chunks (page cache; Sync at the end).
TEST_F(OutputLogTest, BenchAppendThroughput) {
  auto log = OutputLog::Open(dir_, "cmd-1");
  ASSERT_TRUE(log);
  const std::string chunk(1 << 20, 'x');
  constexpr int kChunks = 256;
  uint64_t off = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kChunks; ++i) {
    auto r = (*log)->Append(OutputStream::kStdout, off, chunk);
    ASSERT_TRUE(r) << r.error().message;
    off = *r;
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto t1 = std::chrono::steady_clock::now();
  ASSERT_TRUE((*log)->Sync());
  double sync_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  EXPECT_EQ(off, uint64_t{kChunks} << 20);
  // Re-sending everything is a no-op and fast.
  auto t2 = std::chrono::steady_clock::now();
  for (int i = 0; i < kChunks; ++i) {
    ASSERT_EQ(*(*log)->Append(OutputStream::kStdout, static_cast<uint64_t>(i) << 20, chunk), off);
  }
  double skip_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t2).count();
  std::printf(
      "[bench] OutputLog::Append: %d x 1 MiB in %.3f s = %.0f MB/s; fdatasync %.3f s; "
      "re-sent (skipped) %.6f s\n",
      kChunks, secs, kChunks * 1.048576 / secs, sync_secs, skip_secs);
}

}  // namespace
}  // namespace space::store
