// The `space` CLI against a real spaced: the fixed points of its interface.
#include <set>
#include <sstream>

#include "tests/integration/harness.h"

namespace space::testing {
namespace {

using namespace std::chrono_literals;

class CliTest : public SharedDaemonTest<CliTest> {
 protected:
  // Runs `space ARGS...` with SPACE_URL/SPACE_API_KEY set (or only the data dir).
  sys::RunResult Space(std::vector<std::string> args, bool via_env = true,
                       const std::string& stdin_path = "") {
    std::vector<std::string> argv = {BinDir() + "/space"};
    std::vector<std::string> env = {"PATH=/usr/bin:/bin", "HOME=/root"};
    if (via_env) {
      env.push_back("SPACE_URL=" + daemon_->url());
      env.push_back("SPACE_API_KEY=" + daemon_->api_key());
    } else {
      env.push_back("SPACE_DATA_DIR=" + daemon_->data_dir());
    }
    argv.insert(argv.end(), args.begin(), args.end());
    sys::UniqueFd in;
    if (!stdin_path.empty()) in = std::move(*sys::Open(stdin_path, O_RDONLY));
    auto r = sys::Run({.argv = argv, .env = env, .stdin_fd = in ? in.get() : -1}, 120000);
    EXPECT_TRUE(r) << (r ? "" : r.error().message);
    return r ? *r : sys::RunResult{};
  }
};

std::string Trim(std::string s) { return Daemon::Trim(std::move(s)); }

TEST_F(CliTest, CreateExecLsCpLogsRm) {
  auto created = Space({"create"});
  ASSERT_EQ(created.exit_code, 0) << created.err;
  std::string id = Trim(created.out);
  ASSERT_TRUE(IsValidId(id, "sb")) << "create must print the id alone: [" << created.out << "]";

  // exec passes stdout and stderr through and exits with the command's code.
  auto ex = Space({"exec", id, "--", "sh", "-c", "echo to-out; echo to-err >&2; exit 3"});
  EXPECT_EQ(ex.exit_code, 3);
  EXPECT_EQ(ex.out, "to-out\n");
  EXPECT_EQ(ex.err, "to-err\n");
  auto ok = Space({"exec", id, "--", "echo", "hello", "world"});
  EXPECT_EQ(ok.exit_code, 0);
  EXPECT_EQ(ok.out, "hello world\n");

  // The data dir fallback works too.
  auto viadir = Space({"exec", id, "--", "true"}, /*via_env=*/false);
  EXPECT_EQ(viadir.exit_code, 0) << viadir.err;

  // ls --json is an array of sandboxes with id and state.
  auto ls = Space({"ls", "--json"});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  auto arr = ParseJson(ls.out);
  ASSERT_TRUE(arr && arr->is_array()) << ls.out;
  bool found = false;
  for (const auto& s : *arr) {
    if (s["id"] == id) {
      found = true;
      EXPECT_EQ(s["state"], "running");
    }
  }
  EXPECT_TRUE(found);

  // cp both ways, byte for byte.
  auto tmp = sys::TempDir::Create();
  ASSERT_TRUE(tmp);
  std::string payload;
  for (int i = 0; i < 200000; ++i) payload += static_cast<char>(i * 7);
  ASSERT_TRUE(sys::WriteFileAtomic(tmp->path() + "/up.bin", payload));
  auto up = Space({"cp", tmp->path() + "/up.bin", id + ":/root/up.bin"});
  ASSERT_EQ(up.exit_code, 0) << up.err;
  auto down = Space({"cp", id + ":/root/up.bin", tmp->path() + "/down.bin"});
  ASSERT_EQ(down.exit_code, 0) << down.err;
  EXPECT_TRUE(*sys::ReadFile(tmp->path() + "/down.bin") == payload);
  auto inside = Space({"exec", id, "--", "wc", "-c", "/root/up.bin"});
  EXPECT_EQ(inside.out, "200000 /root/up.bin\n");

  // logs replays a command's stored output.
  auto cmds = daemon_->client().ListCommands(id);
  ASSERT_TRUE(cmds && !cmds->empty());
  std::string first_cid = (*cmds)[0]["id"];
  auto logs = Space({"logs", id, first_cid});
  EXPECT_EQ(logs.exit_code, 0) << logs.err;
  EXPECT_EQ(logs.out, "to-out\n");

  // ops lists operations as JSON.
  auto ops = Space({"ops", "--json"});
  ASSERT_EQ(ops.exit_code, 0);
  auto opj = ParseJson(ops.out);
  ASSERT_TRUE(opj && opj->is_array() && !opj->empty()) << ops.out;

  // exec with stdin.
  ASSERT_TRUE(sys::WriteFileAtomic(tmp->path() + "/in.txt", "piped input\n"));
  auto withstdin = Space({"exec", "-i", id, "--", "cat"}, true, tmp->path() + "/in.txt");
  EXPECT_EQ(withstdin.exit_code, 0) << withstdin.err;
  EXPECT_EQ(withstdin.out, "piped input\n");

  // rm removes it.
  auto rm = Space({"rm", id});
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
  auto gone = daemon_->client().GetSandbox(id);
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, Errc::kNotFound);
}

TEST_F(CliTest, RmByLabelDeletesWhatMatchesAndNothingElse) {
  std::vector<std::string> ids;
  for (const char* batch : {"cli-x", "cli-x", "cli-y"}) {
    auto made = Space({"create", "--label", std::string("batch=") + batch});
    ASSERT_EQ(made.exit_code, 0) << made.err;
    ids.push_back(Trim(made.out));
  }
  // Ids or labels, one of the two; a malformed label is a usage error.
  EXPECT_NE(Space({"rm"}).exit_code, 0);
  EXPECT_NE(Space({"rm", ids[0], "--label", "batch=cli-x"}).exit_code, 0);
  auto bad = Space({"rm", "--label", "nokey"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--label"), std::string::npos) << bad.err;

  auto rm = Space({"rm", "--label", "batch=cli-x"});
  ASSERT_EQ(rm.exit_code, 0) << rm.err;
  std::set<std::string> printed;
  std::istringstream lines(rm.out);
  for (std::string line; std::getline(lines, line);) printed.insert(line);
  EXPECT_EQ(printed, std::set<std::string>({ids[0], ids[1]})) << rm.out;
  for (int i : {0, 1}) EXPECT_EQ(daemon_->client().GetSandbox(ids[i]).error().code, Errc::kNotFound);
  ASSERT_TRUE(daemon_->client().GetSandbox(ids[2]));

  auto js = Space({"--json", "rm", "--label", "batch=cli-y"});
  ASSERT_EQ(js.exit_code, 0) << js.err;
  auto parsed = ParseJson(js.out);
  ASSERT_TRUE(parsed) << js.out;
  ASSERT_EQ(parsed->size(), 1u) << js.out;
  EXPECT_EQ((*parsed)[0]["id"], ids[2]);
  EXPECT_EQ((*parsed)[0]["deleted"], true);
  EXPECT_EQ(daemon_->client().GetSandbox(ids[2]).error().code, Errc::kNotFound);
}

TEST_F(CliTest, ErrorsAreClear) {
  auto bad = Space({"exec", "sb-aaaaaaaaaaaaaaaa", "--", "true"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("space:"), std::string::npos) << bad.err;
  auto tmpl = Space({"create", "--template", "missing:v1"});
  EXPECT_NE(tmpl.exit_code, 0);
  EXPECT_NE(tmpl.err.find("missing"), std::string::npos) << tmpl.err;
  auto usage = Space({"frobnicate"});
  EXPECT_NE(usage.exit_code, 0);
  std::vector<std::string> argv = {BinDir() + "/space", "ls"};
  auto down = sys::Run({.argv = argv, .env = std::vector<std::string>{"SPACE_URL=http://127.0.0.1:1",
                                                                     "SPACE_API_KEY=x"}});
  ASSERT_TRUE(down);
  EXPECT_NE(down->exit_code, 0);
  EXPECT_NE(down->err.find("cannot reach"), std::string::npos) << down->err;
}

TEST_F(CliTest, RuntimesTableAndJson) {
  // --json is the API's array as is; the table has a row per runtime with what it can do.
  auto js = Space({"runtimes", "--json"});
  ASSERT_EQ(js.exit_code, 0) << js.err;
  auto arr = ParseJson(js.out);
  ASSERT_TRUE(arr && arr->is_array()) << js.out;
  const Json* oci = nullptr;
  for (const auto& r : *arr)
    if (r.value("name", "") == "oci") oci = &r;
  ASSERT_NE(oci, nullptr) << js.out;
  ASSERT_TRUE((*oci)["available"].get<bool>()) << js.out;
  ASSERT_TRUE((*oci)["capabilities"]["volumes"].get<bool>()) << js.out;

  auto table = Space({"runtimes"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_EQ(table.out.rfind("NAME", 0), 0u) << table.out;
  std::string row;
  for (size_t at = 0; at < table.out.size();) {
    size_t nl = table.out.find('\n', at);
    std::string line = table.out.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    if (line.rfind("oci", 0) == 0) row = line;
    if (nl == std::string::npos) break;
    at = nl + 1;
  }
  ASSERT_FALSE(row.empty()) << table.out;
  EXPECT_NE(row.find("yes"), std::string::npos) << row;
  EXPECT_NE(row.find("volumes"), std::string::npos) << "the table names every capability the runtime has: " << row;
  EXPECT_NE(row.find("pause"), std::string::npos) << row;
}

}  // namespace
}  // namespace space::testing
