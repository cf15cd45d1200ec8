// Built-in templates and code cells, against a real spaced:
// - BuiltinTest: a tiny built-in (a Spacefile in a temp --builtin-templates dir, FROM base)
//   built from a clean --template-cache on first ask, imported by another data dir, rebuilt
//   when its cached tarball is damaged; its start command and readiness check.
// - PythonTemplateTest / CodeTest: the shipped `python` and `code-interpreter` templates
//   (from the shared cache, /var/cache/space/templates: built there from Debian on the first
//   run of the suite, several minutes, imported in about a minute afterwards), and cells in
//   stateful contexts: state, rich results, errors, timeouts, interrupts, restart, delete,
//   and a crash of spaced during a long cell.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <fstream>

#include "tests/integration/harness.h"

namespace space::testing {
namespace {

using namespace std::chrono_literals;

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) out.push_back(e->d_name);
    ::closedir(d);
  }
  return out;
}

std::string BuildLog(client::Client& c, const std::string& op) {
  auto r = c.Request("GET", "/v1/templates/builds/" + op + "/log");
  return r ? r->body : "";
}

// ------------------------------------------------------------------ a tiny built-in

class BuiltinTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SPACE_REQUIRE_SANDBOXES();
    auto t = sys::TempDir::Create("/tmp", "space-builtin-");
    ASSERT_TRUE(t);
    dir_ = std::move(*t);
    ASSERT_TRUE(sys::MkdirAll(dir_.path() + "/templates/tiny", 0755));
    // The start command writes a file a second later; the readiness check waits for it.
    ASSERT_TRUE(sys::WriteFileAtomic(dir_.path() + "/templates/tiny/Spacefile",
                                     "FROM base\n"
                                     "COPY hello.txt /etc/hello.txt\n"
                                     "RUN echo built > /built\n"
                                     "CMD sleep 1; echo up > /tmp/ready; exec sleep 100000\n"
                                     "HEALTHCHECK --interval=1s CMD test -f /tmp/ready\n"));
    ASSERT_TRUE(sys::WriteFileAtomic(dir_.path() + "/templates/tiny/hello.txt", "hello\n"));
  }
  std::vector<std::string> Args() const {
    return {"--builtin-templates", dir_.path() + "/templates", "--template-cache",
            dir_.path() + "/cache"};
  }
  sys::TempDir dir_;
};

TEST_F(BuiltinTest, BuiltOnFirstAskCachedAcrossDataDirsAndRebuiltWhenDamaged) {
  std::string op_id;
  {
    Daemon d(Args());
    ASSERT_TRUE(d.Start());
    auto& c = d.client();
    // Listed before it exists.
    auto list = c.Call("GET", "/v1/templates");
    ASSERT_TRUE(list) << list.error().message;
    EXPECT_NE(list->at("builtins").dump().find("tiny:latest"), std::string::npos) << list->dump();
    // A create names it: refused with the operation that builds it, then it works.
    auto r = c.Request("POST", "/v1/sandboxes", R"({"template":"tiny"})", "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 503) << r->body;
    size_t at = r->body.find("op-");
    ASSERT_NE(at, std::string::npos) << r->body;
    op_id = r->body.substr(at, r->body.find_first_of(",) \"", at) - at);
    auto done = c.WaitOperation(op_id, 300s);
    ASSERT_TRUE(done) << done.error().message;
    EXPECT_EQ(JsonStringOr(*done, "state", ""), "succeeded") << done->dump() << BuildLog(c, op_id);
    std::string log = BuildLog(c, op_id);
    EXPECT_NE(log.find("building tiny:latest"), std::string::npos) << log;
    EXPECT_NE(log.find("saving tiny:latest to the template cache"), std::string::npos) << log;
    // Asked again: up to date, nothing built.
    ASSERT_TRUE(EnsureBuiltin(c, "tiny"));
    std::string id = CreateSandbox(c, {{"template", "tiny"}});
    ASSERT_FALSE(id.empty());
    // Running means ready: the readiness check passed, so the start command ran.
    auto out = c.Run(id, std::vector<std::string>{"cat", "/tmp/ready", "/built", "/etc/hello.txt"});
    ASSERT_TRUE(out) << out.error().message;
    EXPECT_EQ(out->out, "up\nbuilt\nhello\n");
    auto cmds = c.ListCommands(id);
    ASSERT_TRUE(cmds);
    bool start_running = false;
    for (const auto& cmd : *cmds) {
      if (cmd.dump().find("exec sleep 100000") != std::string::npos)
        start_running = JsonStringOr(cmd, "state", "") == "running";
    }
    EXPECT_TRUE(start_running) << cmds->dump();
  }
  std::string tar;
  for (const auto& n : ListDir(dir_.path() + "/cache"))
    if (n.starts_with("tiny-latest-") && n.ends_with(".tar.zst")) tar = dir_.path() + "/cache/" + n;
  ASSERT_FALSE(tar.empty());
  {
    // Another data dir imports it instead of building it.
    Daemon d(Args());
    ASSERT_TRUE(d.Start());
    auto r = d.client().Request("POST", "/v1/templates?wait=300s", R"({"builtin":"tiny"})",
                                "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 201) << r->body;
    std::string op = JsonStringOr(ParseJson(r->body)->at("operation"), "id", "");
    std::string log = BuildLog(d.client(), op);
    EXPECT_NE(log.find("importing tiny:latest from the template cache"), std::string::npos) << log;
    EXPECT_EQ(log.find("building tiny:latest"), std::string::npos) << log;
    std::string id = CreateSandbox(d.client(), {{"template", "tiny"}});
    auto out = d.client().Run(id, std::vector<std::string>{"cat", "/built"});
    ASSERT_TRUE(out);
    EXPECT_EQ(out->out, "built\n");
  }
  {
    // A damaged tarball is noticed and the template built again.
    int fd = ::open(tar.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, "XXXX", 4, 100), 4);
    ::close(fd);
    Daemon d(Args());
    ASSERT_TRUE(d.Start());
    auto r = d.client().Request("POST", "/v1/templates?wait=300s", R"({"builtin":"tiny"})",
                                "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 201) << r->body;
    std::string op = JsonStringOr(ParseJson(r->body)->at("operation"), "id", "");
    std::string log = BuildLog(d.client(), op);
    EXPECT_NE(log.find("damaged; building it again"), std::string::npos) << log;
    EXPECT_NE(log.find("building tiny:latest"), std::string::npos) << log;
  }
}

TEST_F(BuiltinTest, BadBuiltinRequests) {
  Daemon d(Args());
  ASSERT_TRUE(d.Start());
  auto& c = d.client();
  auto r = c.Request("POST", "/v1/templates", R"({"builtin":"nope"})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404) << r->body;
  r = c.Request("POST", "/v1/templates", R"({"builtin":5})", "application/json");
  EXPECT_EQ(r->status, 400) << r->body;
  r = c.Request("POST", "/v1/templates", R"({"builtin":"tiny","spec":"FROM base"})", "application/json");
  EXPECT_EQ(r->status, 400) << r->body;
  r = c.Request("POST", "/v1/templates", R"({"builtin":"../etc"})", "application/json");
  EXPECT_EQ(r->status, 400) << r->body;
  // An unknown template that is no built-in is still a plain 404.
  r = c.Request("POST", "/v1/sandboxes", R"({"template":"nope"})", "application/json");
  EXPECT_EQ(r->status, 404) << r->body;
}

// ------------------------------------------------------------------ the shipped templates

class CodeTest : public SharedDaemonTest<CodeTest> {
 public:
  static void SetUpTestSuite() {
    SharedDaemonTest<CodeTest>::SetUpTestSuite();
    if (!daemon_) return;
    ready_ = EnsureBuiltin(daemon_->client(), "code-interpreter");
    if (!ready_) why_ = ready_.message();
  }

 protected:
  void SetUp() override {
    SharedDaemonTest<CodeTest>::SetUp();
    ASSERT_TRUE(ready_) << why_;
  }
  std::string Sandbox() {
    if (sb_.empty()) sb_ = CreateSandbox(c(), {{"template", "code-interpreter"}});
    return sb_;
  }
  // Runs a cell and returns the reply's JSON (any status: "_status" holds it).
  Json Cell(const std::string& id, Json body, const std::string& query = "") {
    auto r = c().Request("POST", "/v1/sandboxes/" + id + "/code" + query, body.dump(), "application/json");
    if (!r) {
      ADD_FAILURE() << r.error().message;
      return Json::object();
    }
    auto j = ParseJson(r->body);
    Json out = j && j->is_object() ? *j : Json{{"raw", r->body}};
    out["_status"] = r->status;
    return out;
  }
  static std::string MainText(const Json& ex) {
    for (const auto& r : ex.value("results", Json::array()))
      if (r.value("is_main_result", false)) return r.value("text", "");
    return "";
  }
  static std::string Stdout(const Json& ex) {
    std::string s;
    for (const auto& p : ex["logs"]["stdout"]) s += p.get<std::string>();
    return s;
  }
  static inline ::testing::AssertionResult ready_ = ::testing::AssertionFailure();
  static inline std::string why_;
  static inline std::string sb_;
};

TEST_F(CodeTest, PythonTemplateHasItsTools) {
  ASSERT_TRUE(EnsureBuiltin(c(), "python"));
  std::string id = CreateSandbox(c(), {{"template", "python"}});
  ASSERT_FALSE(id.empty());
  auto out = c().Run(id, std::vector<std::string>{
                             "sh", "-c",
                             "python3 -c 'import numpy, pandas, matplotlib; print(numpy.__name__, "
                             "pandas.__name__, matplotlib.__name__)' && python --version && "
                             "pip --version >/dev/null && python3 -m venv /tmp/v && node -e "
                             "'console.log(1+1)' && npm --version >/dev/null && git --version "
                             ">/dev/null && curl --version >/dev/null && cc --version >/dev/null "
                             "&& echo ok"});
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_EQ(out->exit_code, 0) << out->err;
  EXPECT_NE(out->out.find("numpy pandas matplotlib\nPython 3.11"), std::string::npos)
      << out->out;
  EXPECT_NE(out->out.find("2\nok\n"), std::string::npos) << out->out;
  (void)c().DeleteSandboxAndWait(id, 30s);
}

TEST_F(CodeTest, StateRichResultsAndErrors) {
  std::string id = Sandbox();
  ASSERT_FALSE(id.empty());
  Json a = Cell(id, {{"code", "x = 41\nprint('hello')"}, {"context", "default"}});
  ASSERT_EQ(a["_status"], 200) << a.dump();
  EXPECT_EQ(Stdout(a), "hello\n");
  EXPECT_TRUE(a["error"].is_null()) << a.dump();
  EXPECT_EQ(a["state"], "done");
  Json b = Cell(id, {{"code", "x + 1"}, {"context", "default"}});
  EXPECT_EQ(MainText(b), "42") << b.dump();
  // A chart comes back as PNG (display output, not the main result).
  Json chart = Cell(id, {{"code", "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()"},
                         {"context", "default"}});
  bool png = false;
  for (const auto& r : chart["results"]) png = png || (r.contains("png") && r["png"].get<std::string>().rfind("iVBOR", 0) == 0);
  EXPECT_TRUE(png) << chart.dump().substr(0, 400);
  // Rich: html and json.
  Json rich = Cell(id, {{"code", "class H:\n  def _repr_html_(self): return '<b>hi</b>'\nH()"},
                        {"context", "default"}});
  ASSERT_FALSE(rich["results"].empty()) << rich.dump();
  EXPECT_EQ(rich["results"][0].value("html", ""), "<b>hi</b>") << rich.dump();
  Json dict = Cell(id, {{"code", "{'a': [1, 2]}"}, {"context", "default"}});
  ASSERT_FALSE(dict["results"].empty()) << dict.dump();
  EXPECT_EQ(dict["results"][0]["json"], Json::parse(R"({"a":[1,2]})")) << dict.dump();
  // An error names the exception, with its traceback.
  Json err = Cell(id, {{"code", "1/0"}, {"context", "default"}});
  EXPECT_EQ(err["_status"], 200);
  EXPECT_EQ(err["error"].value("name", ""), "ZeroDivisionError") << err.dump();
  EXPECT_NE(err["error"].value("traceback", "").find("1/0"), std::string::npos) << err.dump();
  // JavaScript and bash keep their own state.
  // A named context that does not exist is an error, not a silent new one.
  Json js1 = Cell(id, {{"code", "let n = 5; n * 3"}, {"language", "javascript"}, {"context", "jsctx"}});
  EXPECT_FALSE(js1["error"].is_null()) << js1.dump();
  EXPECT_TRUE(js1["results"].empty()) << js1.dump();
  Json js = Cell(id, {{"code", "let n = 5; n * 3"}, {"language", "javascript"}});
  EXPECT_EQ(MainText(js), "15") << js.dump();
  std::string js_ctx = js["context"].value("id", "");
  ASSERT_FALSE(js_ctx.empty()) << js.dump();
  Json js2 = Cell(id, {{"code", "n + 1"}, {"language", "javascript"}, {"context", js_ctx}});
  EXPECT_EQ(MainText(js2), "6") << js2.dump();
  Json sh = Cell(id, {{"code", "V=7; echo $((V * 6))"}, {"language", "bash"}});
  EXPECT_EQ(Stdout(sh), "42\n") << sh.dump();
  // The execution reads again by id.
  auto again = c().Call("GET", "/v1/sandboxes/" + id + "/code/" + b.value("id", ""));
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(MainText(*again), "42");
}

TEST_F(CodeTest, ContextsCreateListRestartDelete) {
  std::string id = Sandbox();
  ASSERT_FALSE(id.empty());
  auto made = c().Call("POST", "/v1/sandboxes/" + id + "/code/contexts",
                       Json{{"language", "python"}, {"cwd", "/tmp"}});
  ASSERT_TRUE(made) << made.error().message;
  std::string ctx = made->value("id", "");
  ASSERT_FALSE(ctx.empty()) << made->dump();
  Json a = Cell(id, {{"code", "import os\nk = 3\nos.getcwd()"}, {"context", ctx}});
  EXPECT_EQ(MainText(a), "/tmp") << a.dump();
  auto list = c().Call("GET", "/v1/sandboxes/" + id + "/code/contexts");
  ASSERT_TRUE(list) << list.error().message;
  EXPECT_NE(list->dump().find(ctx), std::string::npos) << list->dump();
  auto rs = c().Call("POST", "/v1/sandboxes/" + id + "/code/contexts/" + ctx + "/restart");
  ASSERT_TRUE(rs) << rs.error().message;
  Json b = Cell(id, {{"code", "k"}, {"context", ctx}});
  EXPECT_EQ(b["error"].value("name", ""), "NameError") << b.dump();
  auto del = c().Call("DELETE", "/v1/sandboxes/" + id + "/code/contexts/" + ctx);
  ASSERT_TRUE(del) << del.error().message;
  auto gone = c().Request("DELETE", "/v1/sandboxes/" + id + "/code/contexts/" + ctx);
  ASSERT_TRUE(gone);
  EXPECT_EQ(gone->status, 404) << gone->body;
  Json c2 = Cell(id, {{"code", "1"}, {"context", ctx}});
  EXPECT_FALSE(c2["error"].is_null()) << c2.dump();
}

TEST_F(CodeTest, TimeoutInterruptAndBadRequests) {
  std::string id = Sandbox();
  ASSERT_FALSE(id.empty());
  Json t = Cell(id, {{"code", "import time\ntime.sleep(60)"}, {"context", "default"}, {"timeout_ms", 700}});
  EXPECT_EQ(t["error"].value("name", ""), "TimeoutError") << t.dump();
  // A long cell answered early (202, running), then interrupted.
  Json l = Cell(id, {{"code", "import time\ntime.sleep(60)"}, {"context", "default"}}, "?wait=1s");
  ASSERT_EQ(l["_status"], 202) << l.dump();
  EXPECT_EQ(l["state"], "running");
  std::string cid = l.value("id", "");
  auto intr = c().Call("POST", "/v1/sandboxes/" + id + "/code/" + cid + "/interrupt");
  ASSERT_TRUE(intr) << intr.error().message;
  auto done = c().Call("GET", "/v1/sandboxes/" + id + "/code/" + cid + "?wait=30s");
  ASSERT_TRUE(done) << done.error().message;
  EXPECT_EQ(done->value("state", ""), "done") << done->dump();
  EXPECT_EQ((*done)["error"].value("name", ""), "KeyboardInterrupt") << done->dump();
  Json after = Cell(id, {{"code", "2 + 2"}, {"context", "default"}});
  EXPECT_EQ(MainText(after), "4") << after.dump();
  // Bad requests.
  EXPECT_EQ(Cell(id, {{"language", "python"}})["_status"], 400);
  EXPECT_EQ(Cell(id, {{"code", "1"}, {"language", "cobol"}})["_status"], 400);
  EXPECT_EQ(Cell(id, {{"code", "1"}, {"context", "../x"}})["_status"], 400);
  EXPECT_EQ(Cell(id, {{"code", "1"}, {"timeout_ms", -1}})["_status"], 400);
  EXPECT_EQ(Cell(id, {{"code", "1"}, {"env", {{"A", 1}}}})["_status"], 400);
  auto r = c().Request("GET", "/v1/sandboxes/" + id + "/code/cmd-nope");
  EXPECT_EQ(r->status, 404) << r->body;
  // A sandbox without the runner says so.
  std::string plain = CreateSandbox(c());
  Json none = Cell(plain, {{"code", "1"}});
  EXPECT_EQ(none["_status"], 409) << none.dump();
  (void)c().DeleteSandboxAndWait(plain, 30s);
}

TEST_F(CodeTest, SpacedCrashDuringALongCellLosesNothing) {
  std::string id = Sandbox();
  ASSERT_FALSE(id.empty());
  Json l = Cell(id,
                {{"code", "import time\nprint('start', flush=True)\ntime.sleep(4)\ny = 7\nprint('done')\ny * 6"},
                 {"context", "default"}},
                "?wait=1s");
  ASSERT_EQ(l["_status"], 202) << l.dump();
  std::string cid = l.value("id", "");
  daemon_->Kill();
  ASSERT_TRUE(daemon_->Start());
  auto done = c().Call("GET", "/v1/sandboxes/" + id + "/code/" + cid + "?wait=60s");
  ASSERT_TRUE(done) << done.error().message;
  EXPECT_EQ(done->value("state", ""), "done") << done->dump();
  EXPECT_EQ(Stdout(*done), "start\ndone\n") << done->dump();
  EXPECT_EQ(MainText(*done), "42") << done->dump();
  // The context's state survived with the sandbox.
  Json y = Cell(id, {{"code", "y"}, {"context", "default"}});
  EXPECT_EQ(MainText(y), "7") << y.dump();
}

TEST_F(CodeTest, CliRunCode) {
  std::string id = Sandbox();
  ASSERT_FALSE(id.empty());
  std::string bin = BinDir() + "/space";
  auto tmp = sys::TempDir::Create("/tmp", "space-code-");
  ASSERT_TRUE(tmp);
  auto run = [&](const std::string& args, const std::string& input, int* code) {
    std::string file = tmp->path() + "/cell";
    (void)sys::WriteFileAtomic(file, input);
    std::string cmd = "SPACE_URL=" + daemon_->url() + " SPACE_API_KEY=" + daemon_->api_key() + " " +
                      bin + " run-code " + id + " " + args + " - < " + file + " 2>&1";
    std::string out;
    FILE* f = ::popen(cmd.c_str(), "r");
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    *code = WEXITSTATUS(::pclose(f));
    return out;
  };
  int code = -1;
  EXPECT_EQ(run("--context default", "z = 20\nprint('out')\nz + 1", &code), "out\n21\n");
  EXPECT_EQ(code, 0);
  std::string err = run("--context default", "raise ValueError('bad')", &code);
  EXPECT_EQ(code, 1);
  EXPECT_NE(err.find("ValueError: bad"), std::string::npos) << err;
  EXPECT_EQ(run("-l javascript", "[1,2].length", &code), "2\n");
  EXPECT_EQ(code, 0);
}

}  // namespace
}  // namespace space::testing
