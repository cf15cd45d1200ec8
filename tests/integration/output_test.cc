// Command output at full speed through the real agent, crun and spaced: a reader slower
// than the producer, a reader that resumes from an offset in the middle of the stream, and
// a SIGKILL of spaced while a fast producer runs. Every byte is checked.
#include <signal.h>
#include <sys/stat.h>

#include <thread>

#include "tests/integration/harness.h"

namespace space::testing {
namespace {

using namespace std::chrono_literals;

// md5sum of `bytes` computed on the host.
std::string Md5(const std::string& bytes) {
  auto tmp = sys::TempDir::Create();
  if (!tmp) return "tmp: " + tmp.error().message;
  if (auto st = sys::WriteFileAtomic(tmp->path() + "/b", bytes); !st) return st.error().message;
  auto r = sys::RunChecked({.argv = {"md5sum", tmp->path() + "/b"}});
  return r ? r->out.substr(0, 32) : r.error().message;
}

// Makes /root/r in the sandbox: `mib` MiB of random bytes, and its md5 in /root/r.md5.
std::string MakeRandomFile(client::Client& c, const std::string& sb, int mib) {
  auto r = c.Run(sb, Json{{"cmd", "head -c " + std::to_string(mib << 20) +
                                      " /dev/urandom > /root/r && md5sum < /root/r > /root/r.md5"}});
  if (!r || r->exit_code != 0) return "";
  auto md5 = c.ReadFile(sb, "/root/r.md5");
  return md5 ? md5->substr(0, 32) : "";
}

class OutputTest : public ::testing::Test {
 protected:
  void SetUp() override { SPACE_REQUIRE_SANDBOXES(); }

  // Starts `cat` of `mib` MiB of random bytes in a new sandbox of `d`: sb_, md5_, cid_.
  void StartCat(Daemon& d, int mib) {
    auto& c = d.client();
    sb_ = CreateSandbox(c);
    ASSERT_FALSE(sb_.empty());
    md5_ = MakeRandomFile(c, sb_, mib);
    ASSERT_EQ(md5_.size(), 32u);
    auto started = c.StartCommand(sb_, {{"cmd", "cat /root/r"}});
    ASSERT_TRUE(started);
    cid_ = (*started)["id"];
  }

  std::string sb_, md5_, cid_;
};

TEST_F(OutputTest, ASlowReaderOfMoreThanTheWindowGetsEveryByteAndHoldsNothingBack) {
  // 48 MiB, six times the agent's window, read slowly at first: the command is not
  // held back by the reader (its output is stored as it comes), and the reader, whose socket
  // stays full, gets every byte in order (spaced waits for the socket between sendfiles).
  Daemon d;
  ASSERT_TRUE(d.Start());
  auto& c = d.client();
  ASSERT_NO_FATAL_FAILURE(StartCat(d, 48));
  const std::string &sb = sb_, &cid = cid_;
  client::MuxOffsets off;
  std::string out;
  bool exited_while_reading = false;
  auto fin = c.FollowOutput(sb, cid, off, [&](client::MuxKind k, std::string_view b) {
    if (k != client::MuxKind::kStdout) return true;
    out.append(b);
    if (!exited_while_reading && out.size() > (12u << 20) && out.size() < (16u << 20)) {
      auto info = c.GetCommand(sb, cid);
      exited_while_reading = info && (*info)["state"] == "exited";
    }
    // The first 16 MiB at 8 MiB/s, the rest as fast as it comes.
    if (out.size() < (16u << 20)) std::this_thread::sleep_for(std::chrono::microseconds(b.size() / 8));
    return true;
  });
  ASSERT_TRUE(fin) << fin.error().message;
  EXPECT_EQ((*fin)["exit_code"], 0);
  ASSERT_EQ(out.size(), 48u << 20);
  EXPECT_EQ(Md5(out), md5_);
  // By the time a third had been read (two seconds) the command had long finished.
  EXPECT_TRUE(exited_while_reading);
}

TEST_F(OutputTest, AReaderResumesFromAnyOffsetWhileTheCommandRuns) {
  // A reader stops part-way, then another resumes from an offset inside a record it was
  // given (a client that kept only part of what it read), while the command still writes.
  Daemon d;
  ASSERT_TRUE(d.Start());
  auto& c = d.client();
  const std::string sb = CreateSandbox(c);
  ASSERT_FALSE(sb.empty());
  std::string expect;
  for (int i = 1; i <= 300000; ++i) expect += std::to_string(i) + "\n";
  // Ten pieces of 30,000 lines with pauses: about a second of output.
  auto started = c.StartCommand(
      sb, {{"cmd", "for i in 0 1 2 3 4 5 6 7 8 9; do seq $((i*30000+1)) $((i*30000+30000)); "
                   "sleep 0.1; done"}});
  ASSERT_TRUE(started);
  const std::string cid = (*started)["id"];
  client::MuxOffsets off;
  std::string first;
  (void)c.StreamMux(sb, cid, off, [&](client::MuxKind k, std::string_view b) {
    if (k == client::MuxKind::kStdout) first.append(b);
    return first.size() < 200000;
  });
  ASSERT_GE(first.size(), 200000u);
  auto info = c.GetCommand(sb, cid);
  ASSERT_TRUE(info);
  EXPECT_EQ((*info)["state"], "running") << "the command should still be writing";
  const uint64_t resume = first.size() - 12345;  // inside the last record received
  client::MuxOffsets from{resume, 0};
  std::string rest;
  auto fin = c.FollowOutput(sb, cid, from, [&](client::MuxKind k, std::string_view b) {
    if (k == client::MuxKind::kStdout) rest.append(b);
    return true;
  });
  ASSERT_TRUE(fin) << fin.error().message;
  EXPECT_EQ((*fin)["exit_code"], 0);
  EXPECT_TRUE(first.substr(0, resume) + rest == expect)
      << "got " << resume + rest.size() << " bytes, want " << expect.size();
  // And a reader that starts at the end gets just the exit record.
  client::MuxOffsets end{expect.size(), 0};
  std::string none;
  auto again = c.StreamMux(sb, cid, end, [&](client::MuxKind k, std::string_view b) {
    if (k != client::MuxKind::kExit) none.append(b);
    return true;
  });
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(none, "");
}

TEST_F(OutputTest, SigkillOfSpacedDuringAFastProducerLosesNothing) {
  // cat of 384 MiB runs at hundreds of MB/s: spaced is killed with frames in flight (some
  // spliced into the log, some in the socket, more in the agent's window). After the
  // restart the agent retransmits what was not acknowledged and the log is whole.
  Daemon d;
  ASSERT_TRUE(d.Start());
  ASSERT_NO_FATAL_FAILURE(StartCat(d, 384));
  const std::string &sb = sb_, &cid = cid_;
  const std::string log = d.data_dir() + "/logs/" + sb + "/" + cid + ".stdout";
  // Kill once a good part is stored, well before the end.
  uint64_t at_kill = 0;
  for (int i = 0; i < 3000; ++i) {
    struct stat st;
    if (::stat(log.c_str(), &st) == 0 && st.st_size > (64 << 20)) {
      at_kill = static_cast<uint64_t>(st.st_size);
      break;
    }
    std::this_thread::sleep_for(2ms);
  }
  ASSERT_GT(at_kill, 0u) << "output did not flow";
  d.Kill();
  struct stat st;
  ASSERT_EQ(::stat(log.c_str(), &st), 0);
  EXPECT_LT(static_cast<uint64_t>(st.st_size), 384u << 20) << "killed too late to test anything";
  std::this_thread::sleep_for(300ms);  // the agent fills its window meanwhile, then waits

  ASSERT_TRUE(d.Start());
  auto& c2 = d.client();
  auto done = c2.GetCommand(sb, cid, 120s);
  ASSERT_TRUE(done) << done.error().message;
  EXPECT_EQ((*done)["state"], "exited") << done->dump();
  EXPECT_EQ((*done)["exit_code"], 0);
  EXPECT_EQ((*done)["stdout_size"], 384u << 20);
  client::MuxOffsets off;
  std::string out;
  out.reserve(384u << 20);
  auto fin = c2.FollowOutput(sb, cid, off, [&](client::MuxKind k, std::string_view b) {
    if (k == client::MuxKind::kStdout) out.append(b);
    return true;
  });
  ASSERT_TRUE(fin) << fin.error().message;
  ASSERT_EQ(out.size(), 384u << 20);
  EXPECT_EQ(Md5(out), md5_);
}

}  // namespace
}  // namespace space::testing
