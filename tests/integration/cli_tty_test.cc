// The interactive CLI against a real spaced: `space shell` and `space exec -t` driven in a
// tmux pane (keys sent, the pane read back, the window resized), plus `space logs -f` and
// `space completion bash`.
#include <signal.h>

#include <fstream>

#include <regex>

#include "tests/integration/harness.h"

namespace space::testing {
namespace {

using namespace std::chrono_literals;

// A private tmux server (its own socket in a temp dir) with one pane running `script`
// under sh. The script writes our exit status and the terminal's settings before and after.
class Pane {
 public:
  Pane(const std::string& dir, const std::string& name) : dir_(dir), sock_(dir + "/" + name + ".sock"), name_(name) {}
  ~Pane() { (void)Tmux({"kill-server"}); }

  bool Start(const std::string& command, int cols = 100, int rows = 30) {
    const std::string script = "stty -g > " + dir_ + "/before; " + command + "; echo $? > " + dir_ +
                               "/rc.tmp; stty -g > " + dir_ + "/after; mv " + dir_ + "/rc.tmp " +
                               dir_ + "/rc; sleep 600";
    auto r = Tmux({"new-session", "-d", "-s", name_, "-x", std::to_string(cols), "-y",
                   std::to_string(rows), "sh", "-c", script});
    return r.exit_code == 0;
  }
  sys::RunResult Tmux(std::vector<std::string> args) {
    std::vector<std::string> argv = {"/usr/bin/tmux", "-S", sock_};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = sys::Run({.argv = argv, .env = std::vector<std::string>{"PATH=/usr/bin:/bin", "TERM=xterm-256color", "HOME=/root"}}, 30000);
    return r ? *r : sys::RunResult{};
  }
  void Type(const std::string& text) {
    Tmux({"send-keys", "-t", name_, "-l", text});
    Tmux({"send-keys", "-t", name_, "Enter"});
  }
  void Key(const std::string& key) { Tmux({"send-keys", "-t", name_, key}); }
  std::string Screen() { return Tmux({"capture-pane", "-p", "-t", name_}).out; }
  // Waits until the pane shows `text`; false (with the screen in the failure) after 30 s.
  bool WaitFor(const std::string& text, std::chrono::milliseconds limit = 30s) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    std::string s;
    while (std::chrono::steady_clock::now() < deadline) {
      s = Screen();
      if (s.find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(100ms);
    }
    ADD_FAILURE() << "the pane never showed [" << text << "]:\n" << s;
    return false;
  }
  // The exit status the script recorded for our command; -1 if none within `limit`.
  int ExitStatus(std::chrono::seconds limit = 30s) {
    for (int64_t i = 0; i < limit.count() * 10; ++i) {
      if (auto rc = sys::ReadFile(dir_ + "/rc")) return std::stoi(*rc);
      std::this_thread::sleep_for(100ms);
    }
    ADD_FAILURE() << "no exit status; the pane shows:\n" << Screen();
    return -1;
  }
  bool TerminalRestored() {
    auto before = sys::ReadFile(dir_ + "/before"), after = sys::ReadFile(dir_ + "/after");
    return before && after && !before->empty() && *before == *after;
  }
  // The pid of the pane's child (our `space`), or -1.
  pid_t CommandPid() {
    auto r = Tmux({"display-message", "-p", "-t", name_, "#{pane_pid}"});
    const std::string sh = Daemon::Trim(r.out);
    auto children = sys::ReadFile("/proc/" + sh + "/task/" + sh + "/children");
    if (!children || children->empty()) return -1;
    return std::stoi(*children);
  }

 private:
  std::string dir_, sock_, name_;
};

class CliTtyTest : public SharedDaemonTest<CliTtyTest> {
 protected:
  void SetUp() override {
    SharedDaemonTest::SetUp();
    ASSERT_TRUE(sys::Exists("/usr/bin/tmux")) << "tmux is missing: run scripts/install-deps.sh";
    auto t = sys::TempDir::Create("/tmp", "space-tty-");
    ASSERT_TRUE(t);
    tmp_ = std::move(*t);
  }
  // `space ARGS` as a shell command line for the pane, with the daemon's URL and key.
  std::string SpaceLine(const std::string& args) {
    return "env SPACE_URL=" + daemon_->url() + " SPACE_API_KEY=" + daemon_->api_key() + " " +
           BinDir() + "/space " + args;
  }
  sys::RunResult Space(std::vector<std::string> args) {
    std::vector<std::string> argv = {BinDir() + "/space"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = sys::Run({.argv = argv,
                       .env = std::vector<std::string>{"PATH=/usr/bin:/bin", "HOME=/root", "SPACE_URL=" + daemon_->url(),
                               "SPACE_API_KEY=" + daemon_->api_key()}},
                      120000);
    EXPECT_TRUE(r) << (r ? "" : r.error().message);
    return r ? *r : sys::RunResult{};
  }
  sys::TempDir tmp_;
};

TEST_F(CliTtyTest, ShellIsATerminalThatFollowsResizeAndExitsWithTheShellsStatus) {
  std::string id = CreateSandbox(c());
  ASSERT_FALSE(id.empty());
  Pane pane(tmp_.path(), "shell");
  ASSERT_TRUE(pane.Start(SpaceLine("shell " + id)));
  // Typed keys reach the remote shell and its output comes back (the remote pty echoes).
  pane.Type("echo READY-$((40+2))");
  ASSERT_TRUE(pane.WaitFor("READY-42"));
  pane.Type("tty; echo TERM=$TERM");
  EXPECT_TRUE(pane.WaitFor("/dev/pts/"));
  EXPECT_TRUE(pane.WaitFor("TERM=tmux-256color"));  // our $TERM (tmux's, in its pane)
  pane.Type("stty size | sed 's/^/SIZE=/'");
  EXPECT_TRUE(pane.WaitFor("SIZE=30 100"));
  // A resized window is forwarded (SIGWINCH -> resize): the remote terminal follows.
  ASSERT_EQ(pane.Tmux({"resize-window", "-t", "shell", "-x", "120", "-y", "40"}).exit_code, 0);
  std::this_thread::sleep_for(500ms);
  pane.Type("stty size | sed 's/^/RESIZED=/'");
  EXPECT_TRUE(pane.WaitFor("RESIZED=40 120"));
  // Raw local terminal: ^C goes to the remote foreground job, not to `space`.
  pane.Type("sleep 100");
  std::this_thread::sleep_for(500ms);
  pane.Key("C-c");
  pane.Type("echo AFTER-INT-$((2+2))");
  EXPECT_TRUE(pane.WaitFor("AFTER-INT-4"));
  // The shell's exit status becomes ours; our terminal is as it was.
  pane.Type("exit 7");
  EXPECT_EQ(pane.ExitStatus(), 7);
  EXPECT_TRUE(pane.TerminalRestored());
}

TEST_F(CliTtyTest, ExecTtyExitCodeAndTerminalRestoredOnSignal) {
  std::string id = CreateSandbox(c());
  ASSERT_FALSE(id.empty());
  {
    Pane pane(tmp_.path(), "exec");
    ASSERT_TRUE(pane.Start(SpaceLine("exec -t " + id + " -- sh -c 'stty size | sed s/^/GOT=/; read x; exit 3'"), 90, 25));
    EXPECT_TRUE(pane.WaitFor("GOT=25 90"));
    pane.Type("anything");
    EXPECT_EQ(pane.ExitStatus(), 3);
    EXPECT_TRUE(pane.TerminalRestored());
  }
  (void)sys::RemoveAll(tmp_.path() + "/rc");
  {
    // SIGTERM to `space shell`: the remote terminal is hung up, ours restored, 128+15.
    Pane pane(tmp_.path(), "term");
    ASSERT_TRUE(pane.Start(SpaceLine("shell " + id)));
    pane.Type("echo UP-$((1+1))");
    ASSERT_TRUE(pane.WaitFor("UP-2"));
    pid_t pid = pane.CommandPid();
    ASSERT_GT(pid, 0);
    auto cmdline = sys::ReadFile("/proc/" + std::to_string(pid) + "/cmdline");
    ASSERT_TRUE(cmdline && cmdline->find("/space") != std::string::npos) << (cmdline ? *cmdline : "");
    ASSERT_EQ(::kill(pid, SIGTERM), 0);
    EXPECT_EQ(pane.ExitStatus(), 128 + SIGTERM);
    EXPECT_TRUE(pane.TerminalRestored());
  }
  // The hung-up shell ends in the sandbox.
  bool ended = false;
  for (int i = 0; i < 100 && !ended; ++i) {
    auto list = c().ListCommands(id);
    ASSERT_TRUE(list);
    ended = true;
    for (const auto& cmd : *list) ended &= cmd.value("state", "") != "running";
    if (!ended) std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(ended);
  // Without a terminal, -t is refused with a usage error (nothing is started).
  auto no_tty = Space({"exec", "-t", id, "--", "true"});
  EXPECT_EQ(no_tty.exit_code, 2) << no_tty.err;
  EXPECT_NE(no_tty.err.find("terminal"), std::string::npos) << no_tty.err;
}

TEST_F(CliTtyTest, LargeCopyShowsProgressOnTheTerminalOnly) {
  std::string id = CreateSandbox(c());
  ASSERT_FALSE(id.empty());
  const std::string big = tmp_.path() + "/big.bin";
  {
    std::ofstream f(big);
    ASSERT_TRUE(f);
  }
  ASSERT_EQ(::truncate(big.c_str(), 512ll << 20), 0);  // 512 MiB, sparse: read at memory speed
  Pane pane(tmp_.path(), "cp");
  ASSERT_TRUE(pane.Start(SpaceLine("cp " + big + " " + id + ":/root/big.bin")));
  EXPECT_TRUE(pane.WaitFor("cp big.bin: "));
  EXPECT_TRUE(pane.WaitFor(" of 512.0 MiB ("));
  EXPECT_EQ(pane.ExitStatus(300s), 0);  // a shared, busy machine can take a while
  auto st = c().Stat(id, "/root/big.bin");
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_EQ((*st)["size"], 512ll << 20);
  // Not a terminal: nothing but the copy (stderr stays empty).
  auto plain = Space({"cp", id + ":/root/big.bin", tmp_.path() + "/back.bin"});
  EXPECT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.err, "");
  (void)c().Remove(id, "/root/big.bin");
}

TEST_F(CliTtyTest, ForkOfManyShowsProgressOnTheTerminal) {
  // A template whose start command takes 3 s to be ready makes every fork take that long,
  // so the fork is certain to outlast the CLI's first one-second wait.
  Json build = {{"name", "slowstart"},
                {"spec", "FROM base\nCMD exec sleep 100000\nHEALTHCHECK CMD sleep 3\n"}};
  auto b = c().Request("POST", "/v1/templates?wait=120s", build.dump(), "application/json");
  ASSERT_TRUE(b);
  ASSERT_EQ(b->status, 201) << b->body;
  std::string id = CreateSandbox(c(), {{"template", "slowstart"}});
  ASSERT_FALSE(id.empty());
  // On a terminal (script(1) gives it one), everything the CLI wrote: the progress line is
  // redrawn in place and erased at the end, so a screen capture could miss it.
  auto r = sys::Run({.argv = {"script", "-qec", SpaceLine("fork " + id + " --count 3"), "/dev/null"}},
                    120000);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->exit_code, 0) << r->out;
  EXPECT_NE(r->out.find("(fork)..."), std::string::npos) << r->out;
  EXPECT_NE(r->out.find(" of 3 running"), std::string::npos) << r->out;
  // The three new ids, one per line (the first right after the erased progress line).
  std::regex id_line("sb-[a-z0-9]+\r?\n");
  auto n = std::distance(std::sregex_iterator(r->out.begin(), r->out.end(), id_line),
                         std::sregex_iterator());
  EXPECT_EQ(n, 3) << r->out;
  // Not a terminal: no progress at all.
  auto plain = Space({"fork", id, "--count", "2"});
  EXPECT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.err, "");
  if (auto list = c().ListSandboxes()) {
    for (const auto& sb : *list) {
      if (sb.value("id", "") != id) (void)c().DeleteSandboxAndWait(sb.value("id", ""), 30s);
    }
  }
  (void)c().DeleteSandboxAndWait(id, 30s);
}

TEST_F(CliTtyTest, LogsFollowStreamsUntilTheCommandEnds) {
  std::string id = CreateSandbox(c());
  ASSERT_FALSE(id.empty());
  auto started = c().StartCommand(
      id, {{"argv", {"sh", "-c", "for i in 1 2 3; do echo line$i; sleep 1; done; echo bye >&2"}}});
  ASSERT_TRUE(started) << started.error().message;
  const std::string cid = (*started)["id"];
  auto t0 = std::chrono::steady_clock::now();
  auto r = Space({"logs", "-f", id, cid});
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "line1\nline2\nline3\n");
  EXPECT_EQ(r.err, "bye\n");
  EXPECT_GE(took, 1500ms) << "logs -f returned before the command ended";
}

TEST_F(CliTtyTest, BashCompletion) {
  auto script = Space({"completion", "bash"});
  ASSERT_EQ(script.exit_code, 0) << script.err;
  ASSERT_TRUE(sys::WriteFileAtomic(tmp_.path() + "/space.bash", script.out));
  auto complete = [&](const std::string& words, int cword) {
    auto r = sys::Run({.argv = {"/bin/bash", "-c",
                                "source " + tmp_.path() + "/space.bash; COMP_WORDS=(" + words +
                                    "); COMP_CWORD=" + std::to_string(cword) +
                                    "; _space; echo \"${COMPREPLY[*]}\""},
                       .env = std::vector<std::string>{"PATH=" + BinDir() + ":/usr/bin:/bin", "SPACE_URL=" + daemon_->url(),
                               "SPACE_API_KEY=" + daemon_->api_key()}},
                      30000);
    EXPECT_TRUE(r && r->exit_code == 0) << (r ? r->err : r.error().message);
    return r ? Daemon::Trim(r->out) : "";
  };
  EXPECT_EQ(complete("space she", 1), "shell");
  EXPECT_NE(complete("space e", 1).find("exec"), std::string::npos);
  EXPECT_EQ(complete("space exec --tt", 2), "--tty");
  EXPECT_EQ(complete("space template b", 2), "build");
  EXPECT_NE(complete("space --json l", 2).find("ls"), std::string::npos);
  // Sandbox ids come from spaced.
  std::string id = CreateSandbox(c());
  ASSERT_FALSE(id.empty());
  EXPECT_NE(complete("space shell sb-", 2).find(id), std::string::npos);
  auto bad = Space({"completion", "fish"});
  EXPECT_EQ(bad.exit_code, 2);
}

}  // namespace
}  // namespace space::testing
