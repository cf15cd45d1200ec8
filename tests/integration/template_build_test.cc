// Template builds against a real spaced: Dockerfile specs (RUN in build sandboxes, ENV,
// COPY from a context), layer reuse on rebuild, failures (line numbers, no leftovers), bad
// input, imports of tarballs and directories, and recovery of a build killed mid-way.
#include <filesystem>

#include <boost/beast/core/detail/base64.hpp>

#include "tests/integration/harness.h"

namespace space::testing {
namespace {

using namespace std::chrono_literals;

std::string B64(std::string_view s) {
  namespace b64 = boost::beast::detail::base64;
  std::string out(b64::encoded_size(s.size()), '\0');
  out.resize(b64::encode(out.data(), s.data(), s.size()));
  return out;
}

// Names under `dir` (up to `depth` levels, not following symlinks) that start with "bld-":
// build sandboxes' instances and roots that were not cleaned up.
std::vector<std::string> BuildLeftovers(const std::string& dir, int depth = 4) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().rfind("bld-", 0) == 0) out.push_back(it->path().string());
    if (it.depth() >= depth) it.disable_recursion_pending();
  }
  return out;
}

class TemplateBuildTest : public SharedDaemonTest<TemplateBuildTest> {
 protected:

  // POST /v1/templates?wait=…; returns (status, body).
  std::pair<int, Json> Build(const Json& body, const std::string& wait = "120s") {
    auto r = c().Request("POST", "/v1/templates?wait=" + wait, body.dump(), "application/json");
    EXPECT_TRUE(r) << (r ? "" : r.error().message);
    if (!r) return {0, Json()};
    auto j = ParseJson(r->body);
    return {r->status, j ? *j : Json()};
  }
  std::string BuildLog(const std::string& op) {
    auto r = c().Request("GET", "/v1/templates/builds/" + op + "/log");
    EXPECT_TRUE(r && r->status == 200) << (r ? r->body : r.error().message);
    return r ? r->body : "";
  }
  std::string Cat(const std::string& id, const std::string& path) {
    auto f = c().ReadFile(id, path);
    return f ? *f : "<" + f.error().message + ">";
  }
  // The `space` CLI against this test's spaced.
  sys::RunResult Space(std::vector<std::string> args) {
    std::vector<std::string> argv = {BinDir() + "/space", "--url", daemon_->url(), "--api-key",
                                     daemon_->api_key()};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = sys::Run({.argv = argv}, 120000);
    EXPECT_TRUE(r) << (r ? "" : r.error().message);
    return r ? *r : sys::RunResult{};
  }
  static int Count(const std::string& hay, const std::string& needle) {
    int n = 0;
    for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++n;
    return n;
  }
};

constexpr const char* kSpec = "FROM base\nRUN echo hi > /hello\nENV X=1\nRUN cat /hello > /copy\n";

TEST_F(TemplateBuildTest, BuildsRunsEnvAndReusesLayers) {
  auto t0 = std::chrono::steady_clock::now();
  auto [status, body] = Build({{"name", "py"}, {"tag", "v1"}, {"spec", kSpec}});
  auto first = std::chrono::steady_clock::now() - t0;
  ASSERT_EQ(status, 201) << body.dump();
  const Json& op = body["operation"];
  EXPECT_EQ(op["kind"], "template_build");
  EXPECT_EQ(op["state"], "succeeded");
  EXPECT_EQ(op["result"]["template"], "py:v1");
  std::string digest = op["result"]["digest"];
  EXPECT_EQ(digest.rfind("sha256:", 0), 0u) << digest;
  EXPECT_EQ(digest.size(), 71u);
  std::string log = BuildLog(op["id"]);
  EXPECT_EQ(Count(log, "build sandbox bld-"), 2) << log;
  EXPECT_EQ(Count(log, "  cached"), 0) << log;

  // The template is listed with the config accumulated from ENV.
  auto list = c().Call("GET", "/v1/templates");
  ASSERT_TRUE(list);
  bool found = false;
  for (const auto& t : (*list)["templates"]) {
    if (t["ref"] != "py:v1") continue;
    found = true;
    EXPECT_EQ(t["digest"], digest);
    auto env = t["config"]["env"];
    EXPECT_NE(std::find(env.begin(), env.end(), Json("X=1")), env.end()) << t.dump();
  }
  EXPECT_TRUE(found) << list->dump();

  // A sandbox from it sees both RUN steps' files and the ENV.
  std::string id = CreateSandbox(c(), {{"template", "py:v1"}});
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(Cat(id, "/hello"), "hi\n");
  EXPECT_EQ(Cat(id, "/copy"), "hi\n");
  auto r = c().Run(id, Json{{"cmd", "echo $X"}});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->out, "1\n");
  EXPECT_TRUE(c().DeleteSandboxAndWait(id, 30s));

  // The same spec again: every layer is reused, nothing runs.
  t0 = std::chrono::steady_clock::now();
  auto [status2, body2] = Build({{"name", "py"}, {"tag", "v2"}, {"spec", kSpec}});
  auto second = std::chrono::steady_clock::now() - t0;
  ASSERT_EQ(status2, 201) << body2.dump();
  EXPECT_EQ(body2["operation"]["result"]["digest"], digest);
  std::string log2 = BuildLog(body2["operation"]["id"]);
  EXPECT_EQ(Count(log2, "  cached"), 2) << log2;
  EXPECT_EQ(Count(log2, "build sandbox"), 0) << log2;
  EXPECT_LT(second * 3, first) << "first " << first.count() << " second " << second.count();
  EXPECT_TRUE(BuildLeftovers(daemon_->data_dir()).empty());
}

TEST_F(TemplateBuildTest, CopyFromContext) {
  Json ctx = {{"app/main.sh", B64("echo from-context\n")}, {"notes.txt", B64("n1")}};
  auto [status, body] = Build(
      {{"name", "copy"},
       {"spec", "FROM base\nWORKDIR /opt/app\nCOPY app/ ./\nCOPY --chmod=0755 notes.txt /etc/notes\n"
                "RUN sh main.sh > out.txt\n"},
       {"context", ctx}});
  ASSERT_EQ(status, 201) << body.dump();
  EXPECT_EQ(body["operation"]["result"]["template"], "copy:latest");
  std::string id = CreateSandbox(c(), {{"template", "copy:latest"}});
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(Cat(id, "/opt/app/main.sh"), "echo from-context\n");
  EXPECT_EQ(Cat(id, "/opt/app/out.txt"), "from-context\n");
  EXPECT_EQ(Cat(id, "/etc/notes"), "n1");
  auto r = c().Run(id, Json{{"cmd", "stat -c '%a %u' /etc/notes /opt/app/main.sh"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->out, "755 0\n644 0\n");
  EXPECT_TRUE(c().DeleteSandboxAndWait(id, 30s));

  // A changed context file invalidates the COPY (and what follows), not what precedes.
  ctx["app/main.sh"] = B64("echo changed\n");
  auto [status2, body2] = Build(
      {{"name", "copy"},
       {"tag", "v2"},
       {"spec", "FROM base\nWORKDIR /opt/app\nCOPY app/ ./\nCOPY --chmod=0755 notes.txt /etc/notes\n"
                "RUN sh main.sh > out.txt\n"},
       {"context", ctx}});
  ASSERT_EQ(status2, 201) << body2.dump();
  std::string log2 = BuildLog(body2["operation"]["id"]);
  EXPECT_EQ(Count(log2, "  cached"), 1) << log2;  // the WORKDIR layer only
  EXPECT_NE(body2["operation"]["result"]["digest"], body["operation"]["result"]["digest"]);

  // A COPY source missing from the context is refused up front.
  auto [s3, b3] = Build({{"name", "copy"}, {"spec", "FROM base\nCOPY missing /x\n"}});
  EXPECT_EQ(s3, 400) << b3.dump();
  EXPECT_NE(b3.dump().find("line 2"), std::string::npos) << b3.dump();

  // A file copied onto an existing directory lands inside it, as in Docker.
  auto [s4, b4] = Build({{"name", "copy"}, {"tag", "v4"}, {"spec", "FROM base\nCOPY notes.txt /etc\n"},
                         {"context", ctx}});
  ASSERT_EQ(s4, 201) << b4.dump();
  std::string id4 = CreateSandbox(c(), {{"template", "copy:v4"}});
  ASSERT_FALSE(id4.empty());
  EXPECT_EQ(Cat(id4, "/etc/notes.txt"), "n1");
  EXPECT_TRUE(c().DeleteSandboxAndWait(id4, 30s));
}

// COPY wildcards, Docker's way: each match copied as if written out (a directory's contents
// into the destination), a single match to a destination without '/' as a file, no match a
// clear error; the cache is keyed by the content of what the pattern matches.
TEST_F(TemplateBuildTest, CopyWildcardFromContext) {
  Json ctx = {{"folder/a.txt", B64("A")},      {"folder/.dot", B64("D")},
              {"folder/sub/x.txt", B64("X")},  {"folder/sub/deep/y", B64("Y")},
              {"other/skip", B64("S")}};
  const std::string spec =
      "FROM base\nWORKDIR /w\nCOPY folder/* dest/\nCOPY folder/a* single\n"
      "RUN cat dest/a.txt dest/x.txt > /seen\n";
  auto [status, body] = Build({{"name", "glob"}, {"spec", spec}, {"context", ctx}});
  ASSERT_EQ(status, 201) << body.dump();
  const std::string digest = body["operation"]["result"]["digest"];
  std::string id = CreateSandbox(c(), {{"template", "glob:latest"}});
  ASSERT_FALSE(id.empty());
  // folder/sub is a match: its contents (x.txt, deep/) land in dest/, not dest/sub/.
  auto r = c().Run(id, Json{{"cmd", "cd /w && LC_ALL=C ls -A dest dest/deep && cat dest/.dot dest/deep/y && "
                                    "test -f single && cat single /seen"}});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->out, "dest:\n.dot\na.txt\ndeep\nx.txt\n\ndest/deep:\ny\nDYAAX") << r->err;
  EXPECT_TRUE(c().DeleteSandboxAndWait(id, 30s));

  // A context file the patterns do not match changes nothing: every step is reused.
  ctx["other/skip"] = B64("S2");
  auto [s2, b2] = Build({{"name", "glob"}, {"tag", "v2"}, {"spec", spec}, {"context", ctx}});
  ASSERT_EQ(s2, 201) << b2.dump();
  EXPECT_EQ(Count(BuildLog(b2["operation"]["id"]), "  cached"), 4);
  EXPECT_EQ(b2["operation"]["result"]["digest"], digest);

  // Editing a matched file (inside a matched directory) rebuilds the COPY and what follows.
  ctx["folder/sub/x.txt"] = B64("X2");
  auto [s3, b3] = Build({{"name", "glob"}, {"tag", "v3"}, {"spec", spec}, {"context", ctx}});
  ASSERT_EQ(s3, 201) << b3.dump();
  std::string log3 = BuildLog(b3["operation"]["id"]);
  EXPECT_EQ(Count(log3, "  cached"), 1) << log3;  // the WORKDIR layer only
  EXPECT_NE(b3["operation"]["result"]["digest"], digest);
  std::string id3 = CreateSandbox(c(), {{"template", "glob:v3"}});
  ASSERT_FALSE(id3.empty());
  EXPECT_EQ(Cat(id3, "/seen"), "AX2");
  EXPECT_TRUE(c().DeleteSandboxAndWait(id3, 30s));

  // A pattern matching nothing is refused up front, naming the line and the pattern.
  auto [s4, b4] = Build({{"name", "glob"}, {"spec", "FROM base\nCOPY nothing/*.txt /x/\n"},
                         {"context", ctx}});
  EXPECT_EQ(s4, 400) << b4.dump();
  const std::string m4 = b4.dump();
  EXPECT_NE(m4.find("line 2"), std::string::npos) << m4;
  EXPECT_NE(m4.find("nothing/*.txt"), std::string::npos) << m4;
  EXPECT_NE(m4.find("no source files were specified"), std::string::npos) << m4;
  // Several matches need a destination directory ending in '/'.
  auto [s5, b5] = Build({{"name", "glob"}, {"spec", "FROM base\nCOPY folder/* /x\n"},
                         {"context", ctx}});
  EXPECT_EQ(s5, 400) << b5.dump();
  EXPECT_NE(b5.dump().find("ending in '/'"), std::string::npos) << b5.dump();
}

TEST_F(TemplateBuildTest, FailingRunFailsWithLineAndLeavesNothing) {
  auto [status, body] =
      Build({{"name", "bad"}, {"spec", "FROM base\nRUN true\n# comment\nRUN echo oops; exit 3\n"}});
  EXPECT_EQ(status, 400) << body.dump();
  const Json& op = body["operation"];
  EXPECT_EQ(op["state"], "failed");
  std::string msg = op["error"]["message"];
  EXPECT_NE(msg.find("line 4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("code 3"), std::string::npos) << msg;
  EXPECT_NE(BuildLog(op["id"]).find("oops"), std::string::npos);
  // No template, no build sandbox anywhere.
  auto t = c().Call("GET", "/v1/templates");
  ASSERT_TRUE(t);
  for (const auto& tt : (*t)["templates"]) EXPECT_NE(tt["name"], "bad");
  auto sbs = c().ListSandboxes();
  ASSERT_TRUE(sbs);
  EXPECT_TRUE(sbs->empty()) << sbs->dump();
  EXPECT_TRUE(BuildLeftovers(daemon_->data_dir()).empty());
}

TEST_F(TemplateBuildTest, BadRequestsAreRefused) {
  // Spec syntax: 400 naming the line.
  auto [s1, b1] = Build({{"name", "x"}, {"spec", "FROM base\nRUN true\nFOO bar\n"}});
  EXPECT_EQ(s1, 400) << b1.dump();
  EXPECT_NE(b1.dump().find("line 3"), std::string::npos) << b1.dump();
  // Unknown FROM: 404.
  auto [s2, b2] = Build({{"name", "x"}, {"spec", "FROM nope:v1\nRUN true\n"}});
  EXPECT_EQ(s2, 404) << b2.dump();
  // Names and tags.
  for (const Json& bad : {Json{{"spec", "FROM base\n"}},
                          Json{{"name", "has space"}, {"spec", "FROM base\n"}},
                          Json{{"name", "a:b"}, {"spec", "FROM base\n"}},
                          Json{{"name", "ok"}, {"tag", "bad/tag"}, {"spec", "FROM base\n"}},
                          Json{{"name", ".hidden"}, {"spec", "FROM base\n"}}}) {
    auto [s, b] = Build(bad);
    EXPECT_EQ(s, 400) << bad.dump() << " -> " << b.dump();
  }
  // Sources: none, two, relative or missing host paths, unknown fields.
  auto [s3, b3] = Build({{"name", "x"}});
  EXPECT_EQ(s3, 400) << b3.dump();
  auto [s4, b4] = Build({{"name", "x"}, {"spec", "FROM base\n"}, {"directory", "/tmp"}});
  EXPECT_EQ(s4, 400) << b4.dump();
  auto [s5, b5] = Build({{"name", "x"}, {"tarball_path", "rel/x.tar"}});
  EXPECT_EQ(s5, 400) << b5.dump();
  auto [s6, b6] = Build({{"name", "x"}, {"tarball_path", "/nonexistent/x.tar"}});
  EXPECT_EQ(s6, 404) << b6.dump();
  auto [s7, b7] = Build({{"name", "x"}, {"spec", "FROM base\n"}, {"bogus", 1}});
  EXPECT_EQ(s7, 400) << b7.dump();
  auto [s8, b8] = Build({{"name", "x"}, {"spec", "FROM base\n"}, {"context", {{"a", "!!!"}}}});
  EXPECT_EQ(s8, 400) << b8.dump();
  auto r = c().Request("GET", "/v1/templates/builds/op-aaaaaaaaaaaaaaaa/log");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
}

TEST_F(TemplateBuildTest, ImportsTarballAndDirectory) {
  auto tmp = sys::TempDir::Create("/tmp", "tb-import-");
  ASSERT_TRUE(tmp);
  std::string tree = tmp->path() + "/tree";
  ASSERT_TRUE(sys::MkdirAll(tree + "/bin"));
  ASSERT_TRUE(sys::MkdirAll(tree + "/data"));
  ASSERT_TRUE(sys::MkdirAll(tree + "/tmp"));
  ASSERT_TRUE(sys::RunChecked({.argv = {"cp", "/bin/busybox", tree + "/bin/busybox"}}));
  ASSERT_EQ(::symlink("busybox", (tree + "/bin/sh").c_str()), 0);
  ASSERT_EQ(::symlink("busybox", (tree + "/bin/cat").c_str()), 0);
  ASSERT_TRUE(sys::WriteFileAtomic(tree + "/data/hello.txt", "from tarball\n"));
  std::string tarball = tmp->path() + "/rootfs.tar.gz";
  ASSERT_TRUE(sys::RunChecked(
      {.argv = {"tar", "-czf", tarball, "-C", tree, "--numeric-owner", "--owner=0", "--group=0", "."}}));

  auto [status, body] = Build({{"name", "tarred"}, {"tag", "v1"}, {"tarball_path", tarball}});
  ASSERT_EQ(status, 201) << body.dump();
  std::string digest = body["operation"]["result"]["digest"];
  std::string id = CreateSandbox(c(), {{"template", "tarred:v1"}});
  ASSERT_FALSE(id.empty());
  auto r = c().Run(id, std::vector<std::string>{"cat", "/data/hello.txt"});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->out, "from tarball\n");
  EXPECT_TRUE(c().DeleteSandboxAndWait(id, 30s));

  // The same tree as a directory: the same content digest.
  ASSERT_EQ(::lchown(tree.c_str(), 0, 0), 0);
  auto [s2, b2] = Build({{"name", "dir"}, {"directory", tree}});
  ASSERT_EQ(s2, 201) << b2.dump();
  EXPECT_EQ(b2["operation"]["result"]["template"], "dir:latest");
  EXPECT_FALSE(BuildLog(b2["operation"]["id"]).empty());

  // A broken archive fails the operation.
  ASSERT_TRUE(sys::WriteFileAtomic(tmp->path() + "/junk.tar", std::string(1000, 'x')));
  auto [s3, b3] = Build({{"name", "junk"}, {"tarball_path", tmp->path() + "/junk.tar"}});
  EXPECT_EQ(s3, 400) << b3.dump();
  EXPECT_EQ(b3["operation"]["state"], "failed") << b3.dump();
}

TEST_F(TemplateBuildTest, CliBuildAndImport) {
  auto tmp = sys::TempDir::Create("/tmp", "tb-cli-");
  ASSERT_TRUE(tmp);
  const std::string dir = tmp->path();
  ASSERT_TRUE(sys::MkdirAll(dir + "/ctx/conf"));
  ASSERT_TRUE(sys::WriteFileAtomic(dir + "/ctx/conf/app.ini", "key=value\n"));
  ASSERT_TRUE(sys::WriteFileAtomic(dir + "/ctx/unused.bin", "not sent"));
  ASSERT_TRUE(sys::WriteFileAtomic(
      dir + "/Spacefile", "FROM base\nCOPY conf /etc/app/\nRUN cat /etc/app/app.ini > /seen\n"));
  auto space = [&](std::vector<std::string> args) { return Space(std::move(args)); };
  auto r = space({"template", "build", "-f", dir + "/Spacefile", "-t", "cli:v1", "--context",
                  dir + "/ctx"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(r.out.size(), 72u) << r.out;  // "sha256:<64 hex>\n" and nothing else
  EXPECT_EQ(r.out.rfind("sha256:", 0), 0u);
  EXPECT_NE(r.err.find("[2/2]"), std::string::npos) << r.err;  // progress went to stderr
  std::string id = CreateSandbox(c(), {{"template", "cli:v1"}});
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(Cat(id, "/seen"), "key=value\n");
  EXPECT_NE(Cat(id, "/unused.bin"), "not sent");
  EXPECT_TRUE(c().DeleteSandboxAndWait(id, 30s));

  // A wildcard: the CLI sends the directory above it, spaced matches it.
  ASSERT_TRUE(sys::WriteFileAtomic(dir + "/Globfile", "FROM base\nCOPY conf/*.ini /etc/app/\n"));
  auto glob = space({"template", "build", "-f", dir + "/Globfile", "-t", "cli:glob", "--context",
                     dir + "/ctx"});
  EXPECT_EQ(glob.exit_code, 0) << glob.err;

  // A failing build: exit 1, the reason (with its line) on stderr, nothing on stdout.
  ASSERT_TRUE(sys::WriteFileAtomic(dir + "/Bad", "FROM base\nRUN false\n"));
  auto bad = space({"template", "build", "-f", dir + "/Bad", "-t", "cli:bad"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_TRUE(bad.out.empty()) << bad.out;
  EXPECT_NE(bad.err.find("line 2"), std::string::npos) << bad.err;

  // Import of a directory.
  auto imp = space({"template", "import", "--dir", dir + "/ctx", "-t", "cli:dir"});
  ASSERT_EQ(imp.exit_code, 0) << imp.err;
  EXPECT_EQ(imp.out.rfind("sha256:", 0), 0u) << imp.out;
  auto usage = space({"template", "import", "-t", "cli:none"});
  EXPECT_EQ(usage.exit_code, 2) << usage.err;
}

// Names (tags) through SPACE's own API and CLI: a build gets further names, a name moves
// between builds, removing one leaves the build to what still uses it; bad names and
// unknown builds are clear errors that change nothing.
TEST_F(TemplateBuildTest, TagsThroughTheApiAndCli) {
  auto [st, op] = Build({{"name", "tags"}, {"tag", "one"}, {"spec", "FROM base\nRUN echo one > /which\n"}});
  ASSERT_EQ(st, 201) << op.dump();
  auto [st2, op2] = Build({{"name", "tags"}, {"tag", "two"}, {"spec", "FROM base\nRUN echo two > /which\n"}});
  ASSERT_EQ(st2, 201) << op2.dump();
  auto put = [&](const std::string& name, const Json& body) {
    auto r = c().Request("PUT", "/v1/templates/" + name, body.dump(), "application/json");
    EXPECT_TRUE(r) << (r ? "" : r.error().message);
    return r ? std::make_pair(r->status, ParseJson(r->body).value_or(Json())) : std::make_pair(0, Json());
  };
  auto digest_of = [&](const std::string& name) -> std::string {
    auto r = c().Request("GET", "/v1/templates");
    if (!r) return "";
    auto j = ParseJson(r->body);
    if (!j) return "";
    for (const Json& t : (*j)["templates"])
      if (t.value("name", "") + ":" + t.value("tag", "") == name) return t.value("digest", "");
    return "";
  };
  const std::string one = digest_of("tags:one"), two = digest_of("tags:two");
  ASSERT_FALSE(one.empty());
  ASSERT_NE(one, two);

  auto [s1, t1] = put("tags:stable", {{"from", "tags:one"}});
  ASSERT_EQ(s1, 200) << t1.dump();
  EXPECT_EQ(t1.value("digest", ""), one);
  std::string id = CreateSandbox(c(), {{"template", "tags:stable"}});
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(Cat(id, "/which"), "one\n");
  // The name moves to the other build (by digest); the running sandbox keeps its own.
  auto [s2, t2] = put("tags:stable", {{"from", two}});
  ASSERT_EQ(s2, 200) << t2.dump();
  EXPECT_EQ(digest_of("tags:stable"), two);
  std::string id2 = CreateSandbox(c(), {{"template", "tags:stable"}});
  ASSERT_FALSE(id2.empty());
  EXPECT_EQ(Cat(id2, "/which"), "two\n");
  EXPECT_EQ(Cat(id, "/which"), "one\n");

  // Bad input: an unknown build, a bad name, no "from", a body that is not JSON.
  EXPECT_EQ(put("tags:x", {{"from", "nope:none"}}).first, 404);
  EXPECT_EQ(put("tags:x", {{"from", "sha256:" + std::string(64, '0')}}).first, 404);
  EXPECT_EQ(put("Bad%20Name:x", {{"from", "tags:one"}}).first, 400);
  EXPECT_EQ(put("tags:x", Json::object()).first, 400);
  EXPECT_EQ(put("tags:x", {{"from", 7}}).first, 400);
  auto junk = c().Request("PUT", "/v1/templates/tags:x", "{not json", "application/json");
  ASSERT_TRUE(junk);
  EXPECT_EQ(junk->status, 400);
  EXPECT_EQ(digest_of("tags:x"), "");

  // The CLI: tag prints the digest, untag each name removed; the builds stay.
  auto space = [&](std::vector<std::string> args) { return Space(std::move(args)); };
  auto tag = space({"template", "tag", "tags:one", "tags:cli"});
  ASSERT_EQ(tag.exit_code, 0) << tag.err;
  EXPECT_EQ(tag.out, one + "\n");
  auto untag = space({"template", "untag", "tags:cli", "tags:stable"});
  ASSERT_EQ(untag.exit_code, 0) << untag.err;
  EXPECT_EQ(untag.out, "tags:cli\ntags:stable\n");
  EXPECT_EQ(digest_of("tags:cli"), "");
  EXPECT_EQ(digest_of("tags:stable"), "");
  EXPECT_EQ(digest_of("tags:one"), one);
  auto again = space({"template", "untag", "tags:cli"});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_NE(again.err.find("unknown template tags:cli"), std::string::npos) << again.err;
  auto bad = space({"template", "tag", "tags:one", "a/b:c"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  // Sandboxes made under a removed name run on.
  EXPECT_EQ(Cat(id2, "/which"), "two\n");
  EXPECT_TRUE(c().DeleteSandboxAndWait(id, 30s));
  EXPECT_TRUE(c().DeleteSandboxAndWait(id2, 30s));
}

// LABEL space.allow-setuid: the template's sandboxes run without no_new_privs (so setuid
// programs such as sudo work), inherited by templates built FROM it unless they say false;
// every other template keeps it. Build sandboxes of such a template run RUN steps alike.
TEST_F(TemplateBuildTest, AllowSetuidLabel) {
  auto nnp_of = [&](const std::string& tmpl) -> std::string {
    std::string id = CreateSandbox(c(), {{"template", tmpl}});
    if (id.empty()) return "no sandbox";
    auto r = c().Run(id, std::vector<std::string>{"grep", "NoNewPrivs", "/proc/self/status"});
    (void)c().DeleteSandboxAndWait(id, 30s);
    return r ? r->out : r.error().message;
  };
  auto [st, op] = Build({{"name", "suid"}, {"tag", "on"},
                         {"spec", "FROM base\nLABEL space.allow-setuid=true\n"
                                  "RUN grep NoNewPrivs /proc/self/status > /built-with\n"}});
  ASSERT_EQ(st, 201) << op.dump();
  auto [st2, op2] = Build({{"name", "suid"}, {"tag", "child"}, {"spec", "FROM suid:on\nENV X=1\n"}});
  ASSERT_EQ(st2, 201) << op2.dump();
  auto [st3, op3] = Build({{"name", "suid"}, {"tag", "off"},
                           {"spec", "FROM suid:on\nLABEL space.allow-setuid=false\n"}});
  ASSERT_EQ(st3, 201) << op3.dump();
  EXPECT_EQ(nnp_of("suid:on"), "NoNewPrivs:\t0\n");
  EXPECT_EQ(nnp_of("suid:child"), "NoNewPrivs:\t0\n");
  EXPECT_EQ(nnp_of("suid:off"), "NoNewPrivs:\t1\n");
  EXPECT_EQ(nnp_of("base:latest"), "NoNewPrivs:\t1\n");
  std::string id = CreateSandbox(c(), {{"template", "suid:on"}});
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(Cat(id, "/built-with"), "NoNewPrivs:\t0\n");
  EXPECT_TRUE(c().DeleteSandboxAndWait(id, 30s));
  // A bad value is refused with its line, and nothing is built.
  auto [bad, why] = Build({{"name", "suid"}, {"tag", "bad"}, {"spec", "FROM base\nLABEL space.allow-setuid=1\n"}});
  EXPECT_EQ(bad, 400) << why.dump();
  EXPECT_NE(why.dump().find("line 2"), std::string::npos) << why.dump();
}

TEST_F(TemplateBuildTest, ImportsOciArchive) {
  // A one-layer OCI image layout, made with the system's tar and sha256sum.
  auto tmp = sys::TempDir::Create("/tmp", "tb-oci-");
  ASSERT_TRUE(tmp);
  const std::string d = tmp->path();
  ASSERT_TRUE(sys::MkdirAll(d + "/tree/etc"));
  ASSERT_TRUE(sys::MkdirAll(d + "/image/blobs/sha256"));
  ASSERT_TRUE(sys::WriteFileAtomic(d + "/tree/etc/release", "oci-layer\n"));
  ASSERT_TRUE(sys::MkdirAll(d + "/tree/bin"));
  ASSERT_TRUE(sys::RunChecked({.argv = {"cp", "/bin/busybox", d + "/tree/bin/busybox"}}));
  ASSERT_EQ(::symlink("busybox", (d + "/tree/bin/sh").c_str()), 0);
  ASSERT_TRUE(sys::RunChecked({.argv = {"tar", "-cf", d + "/layer.tar", "-C", d + "/tree",
                                        "--numeric-owner", "--owner=0", "--group=0", "."}}));
  auto sha = [&](const std::string& path) {
    auto r = sys::RunChecked({.argv = {"sha256sum", path}});
    EXPECT_TRUE(r);
    return r ? r->out.substr(0, 64) : std::string();
  };
  auto blob = [&](const std::string& name, const std::string& content) {
    EXPECT_TRUE(sys::WriteFileAtomic(d + "/" + name, content));
    std::string h = sha(d + "/" + name);
    EXPECT_TRUE(sys::RunChecked({.argv = {"cp", d + "/" + name, d + "/image/blobs/sha256/" + h}}));
    return h;
  };
  std::string layer_hex = sha(d + "/layer.tar");
  ASSERT_TRUE(sys::RunChecked({.argv = {"cp", d + "/layer.tar", d + "/image/blobs/sha256/" + layer_hex}}));
  auto layer_size = std::filesystem::file_size(d + "/layer.tar");
  Json config = {{"architecture", "amd64"},
                 {"os", "linux"},
                 {"config", {{"Env", {"PATH=/bin", "FROM_OCI=yes"}}, {"WorkingDir", "/etc"},
                             {"User", "0"}, {"Cmd", {"/bin/sh"}}}},
                 {"rootfs", {{"type", "layers"}, {"diff_ids", {"sha256:" + layer_hex}}}}};
  std::string config_text = config.dump();
  std::string config_hex = blob("config.json", config_text);
  Json manifest = {{"schemaVersion", 2},
                   {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                   {"config", {{"mediaType", "application/vnd.oci.image.config.v1+json"},
                               {"digest", "sha256:" + config_hex},
                               {"size", config_text.size()}}},
                   {"layers", {{{"mediaType", "application/vnd.oci.image.layer.v1.tar"},
                                {"digest", "sha256:" + layer_hex},
                                {"size", layer_size}}}}};
  std::string manifest_text = manifest.dump();
  std::string manifest_hex = blob("manifest.json", manifest_text);
  Json index = {{"schemaVersion", 2},
                {"manifests", {{{"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                                {"digest", "sha256:" + manifest_hex},
                                {"size", manifest_text.size()}}}}};
  ASSERT_TRUE(sys::WriteFileAtomic(d + "/image/index.json", index.dump()));
  ASSERT_TRUE(sys::WriteFileAtomic(d + "/image/oci-layout", R"({"imageLayoutVersion":"1.0.0"})"));
  ASSERT_TRUE(sys::RunChecked({.argv = {"tar", "-cf", d + "/image.tar", "-C", d + "/image", "."}}));

  auto [status, body] = Build({{"name", "oci"}, {"tag", "v1"}, {"oci_archive_path", d + "/image.tar"}});
  ASSERT_EQ(status, 201) << body.dump();
  auto list = c().Call("GET", "/v1/templates");
  ASSERT_TRUE(list);
  bool found = false;
  for (const auto& t : (*list)["templates"]) {
    if (t["ref"] != "oci:v1") continue;
    found = true;
    EXPECT_EQ(t["config"]["workdir"], "/etc") << t.dump();
    EXPECT_EQ(t["config"]["user"], "0") << t.dump();
    EXPECT_EQ(t["config"]["env"], Json({"PATH=/bin", "FROM_OCI=yes"})) << t.dump();
  }
  EXPECT_TRUE(found);
  EXPECT_NE(BuildLog(body["operation"]["id"]).find("CMD/ENTRYPOINT are ignored"), std::string::npos);
  // A sandbox from it sees the layer's files and the image's Env and WorkingDir.
  std::string id = CreateSandbox(c(), {{"template", "oci:v1"}});
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(Cat(id, "/etc/release"), "oci-layer\n");
  auto r = c().Run(id, Json{{"cmd", "echo $FROM_OCI"}});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->out, "yes\n");
  EXPECT_TRUE(c().DeleteSandboxAndWait(id, 30s));
  // FROM by digest resolves to the same layer (an ENV-only spec adds none).
  std::string digest = body["operation"]["result"]["digest"];
  auto [s2, b2] = Build({{"name", "oci2"}, {"spec", "FROM " + digest + "\nENV Y=2\n"}});
  ASSERT_EQ(s2, 201) << b2.dump();
  EXPECT_EQ(b2["operation"]["result"]["digest"], digest);
}

TEST_F(TemplateBuildTest, AsyncProgressAndRecoveryAfterKill) {
  // Without wait: 202, then progress in the operation's result.
  auto [status, body] = Build(
      {{"name", "slow"}, {"spec", "FROM base\nRUN echo started\nRUN sleep 60\n"}}, "0s");
  ASSERT_EQ(status, 202) << body.dump();
  std::string op = body["operation"]["id"];
  bool in_sleep = false;
  for (int i = 0; i < 300 && !in_sleep; ++i) {
    auto o = c().Call("GET", "/v1/operations/" + op);
    ASSERT_TRUE(o);
    in_sleep = (*o)["state"] == "running" && (*o)["result"].value("step", -1) == 1 &&
               BuildLog(op).find("RUN sleep 60\n  build sandbox") != std::string::npos;
    if (in_sleep) {
      EXPECT_EQ((*o)["result"]["steps"], 2);
      EXPECT_NE((*o)["result"]["log_tail"].get<std::string>().find("started"), std::string::npos);
    } else {
      std::this_thread::sleep_for(100ms);
    }
  }
  ASSERT_TRUE(in_sleep);
  std::this_thread::sleep_for(300ms);  // let the instance come up fully
  EXPECT_FALSE(BuildLeftovers(daemon_->data_dir()).empty());

  // spaced dies mid-build; after a restart the build failed and its sandbox is gone.
  daemon_->Kill();
  ASSERT_TRUE(daemon_->Start());
  auto o = c().Call("GET", "/v1/operations/" + op);
  ASSERT_TRUE(o);
  EXPECT_EQ((*o)["state"], "failed") << o->dump();
  EXPECT_TRUE(BuildLeftovers(daemon_->data_dir()).empty());
  EXPECT_FALSE(BuildLog(op).empty());  // the log survives recovery
}

// GET /v1/templates/{ref}/archive: the tree a cluster's node pulls a template by, with its
// record and the body's sha256 in headers; bad refs are refused.
TEST_F(TemplateBuildTest, ArchiveCarriesTheTreeAndItsRecord) {
  auto [status, body] = Build({{"name", "archived"}, {"tag", "v1"}, {"spec", kSpec}});
  ASSERT_EQ(status, 201) << body.dump();
  const std::string digest = body["operation"]["result"]["digest"];
  for (const std::string ref : {std::string("archived:v1"), digest}) {
    auto r = c().Request("GET", "/v1/templates/" + ref + "/archive");
    ASSERT_TRUE(r) << r.error().message;
    ASSERT_EQ(r->status, 200) << r->body;
    auto meta = ParseJson(r->Header("X-Space-Template").value_or(""));
    ASSERT_TRUE(meta) << ref;
    EXPECT_EQ((*meta)["name"], "archived");
    EXPECT_EQ((*meta)["tag"], "v1");
    EXPECT_EQ((*meta)["digest"], digest);
    EXPECT_EQ(r->Header("X-Space-Archive-Size").value_or(""), std::to_string(r->body.size()));
    // The sha256 it names is the body's (what the puller checks).
    auto tmp = sys::TempDir::Create("/tmp", "tb-archive-");
    ASSERT_TRUE(tmp);
    ASSERT_TRUE(sys::WriteFileAtomic(tmp->path() + "/a.tar.zst", r->body));
    FILE* f = ::popen(("sha256sum " + tmp->path() + "/a.tar.zst").c_str(), "r");
    ASSERT_NE(f, nullptr);
    char sum[65] = {};
    ASSERT_EQ(::fread(sum, 1, 64, f), 64u);
    ::pclose(f);
    EXPECT_EQ(r->Header("X-Space-Archive-Sha256").value_or(""), std::string(sum, 64));
    // The tree: the files the build made, in a zstd tar.
    FILE* t = ::popen(("tar --zstd -tf " + tmp->path() + "/a.tar.zst").c_str(), "r");
    ASSERT_NE(t, nullptr);
    std::string listing;
    char buf[4096];
    for (size_t n; (n = ::fread(buf, 1, sizeof buf, t)) > 0;) listing.append(buf, n);
    ::pclose(t);
    EXPECT_NE(listing.find("hello\n"), std::string::npos) << listing.substr(0, 500);
    EXPECT_NE(listing.find("copy\n"), std::string::npos);
  }
  auto unknown = c().Request("GET", "/v1/templates/nowhere:v1/archive");
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404) << unknown->body;
  auto bad = c().Request("GET", "/v1/templates/sha256:zz/archive");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400) << bad->body;
  auto bad_ref = c().Request("GET", "/v1/templates/Bad%20Name/archive");
  ASSERT_TRUE(bad_ref);
  EXPECT_EQ(bad_ref->status, 400) << bad_ref->body;
}

}  // namespace
}  // namespace space::testing
