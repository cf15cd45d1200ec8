// Runs tests/e2b/e2b.test.mjs and e2b_platform.test.mjs — the unmodified E2B JavaScript SDK,
// pinned by package-lock.json — against a real spaced: installs the SDK with `npm ci` (once per
// lock file, in the build tree), starts spaced, and hands node nothing but the E2B
// environment variables an E2B user would set. E2bCodeInterpreterSdkTest does the same
// with tests/e2b/code-interpreter (the unmodified @e2b/code-interpreter) once spaced has
// the built-in code-interpreter template (imported from the shared template cache, or
// built there on the first run).
#include "tests/integration/fakenet.h"
#include "tests/integration/npm_suite.h"

#ifndef SPACE_SOURCE_DIR
#error "SPACE_SOURCE_DIR must be defined"
#endif

namespace space::testing {
namespace {

// Installs the SDK (once per lock file, in the build tree); "" when ready, else why to skip.
// Nothing of a developer's own E2B set-up may leak into the run.
std::string InstallSdk(std::string* node, std::string* work, std::vector<std::string>* base_env) {
  *node = Which("node");
  std::string npm = Which("npm");
  if (node->empty() || npm.empty()) return "node and npm are needed (scripts/install-deps.sh installs them)";
  *base_env = EnvironWithout({"E2B_", "NODE_EXTRA_CA_CERTS", "SPACE_TLS_CA"});
  *work = BinDir() + "/../e2b-sdk";
  std::string why;
  auto installed = InstallNpmSuite(npm, std::string(SPACE_SOURCE_DIR) + "/tests/e2b", *work,
                                   {"package.json", "package-lock.json", "suite.mjs", "e2b.test.mjs",
                                    "e2b_platform.test.mjs"},
                                   "e2b/package.json", *base_env, &why);
  if (installed == NpmSuite::kOffline) return "npm ci cannot reach the registry (offline?):\n" + why;
  EXPECT_EQ(installed, NpmSuite::kReady) << "npm ci failed:\n" << why;
  return installed == NpmSuite::kReady ? "" : "npm ci failed";
}

// An operator key in E2B's shape (e2b_ + hex: some SDK releases refuse any other
// client-side), made through SPACE's API as `space keys create --e2b` makes it.
std::string E2bKey(Daemon& d) {
  static int n = 0;
  auto k = d.client().Call("POST", "/v1/keys", Json{{"name", "e2b-suite-" + std::to_string(++n)}, {"format", "e2b"}});
  EXPECT_TRUE(k) << (k ? "" : k.error().message);
  return k ? JsonStringOr(*k, "key", "") : "";
}

// Runs the suite's files (the tests matching `pattern`, all if empty) against `d`, driving the
// SDK release `package` (package.json: `e2b`, or an npm alias of an older release). When `d`
// serves TLS (--tls-self-signed), node trusts its CA (docs/tls.md), and with `https` the SDK
// talks to spaced over it: every call, stream and upload of the suite then crosses TLS.
void RunSuite(Daemon& d, const std::string& node, const std::string& work, std::vector<std::string> env,
              const std::string& pattern, const std::string& max_file_bytes, const std::string& fake_log,
              const std::string& package = "e2b", bool https = false) {
  std::string url = d.url();
  const std::string ca = d.data_dir() + "/tls/ca.pem";
  if (sys::Exists(ca)) {
    env.push_back("NODE_EXTRA_CA_CERTS=" + ca);
    env.push_back("SPACE_TLS_CA=" + ca);
    if (https) url = "https://" + url.substr(url.find("://") + 3);
  } else {
    EXPECT_FALSE(https) << "https asked of a spaced without TLS";
  }
  env.push_back("E2B_API_URL=" + url);
  env.push_back("E2B_SANDBOX_URL=" + url);
  env.push_back("E2B_API_KEY=" + E2bKey(d));
  env.push_back("E2B_SDK_PACKAGE=" + package);
  env.push_back("SPACE_MAX_FILE_BYTES=" + max_file_bytes);
  if (!fake_log.empty()) env.push_back("SPACE_FAKE_INTERNET_LOG=" + fake_log);
  sys::SpawnOptions o;
  o.argv = {node, "--test", "--test-reporter=spec", "--test-concurrency=1"};
  if (!pattern.empty()) o.argv.push_back("--test-name-pattern=" + pattern);
  o.argv.insert(o.argv.end(), {"e2b.test.mjs", "e2b_platform.test.mjs"});
  o.cwd = work;
  o.env = env;
  auto r = sys::Run(o, 12 * 60 * 1000);
  ASSERT_TRUE(r) << r.error().message;
  std::printf("%s\n", r->out.c_str());
  EXPECT_TRUE(r->ok()) << "the E2B SDK suite (" << package << ") failed (exit " << r->exit_code
                       << "):\n" << r->out << r->err;
  // A pattern that matched nothing would pass with no test run.
  EXPECT_EQ(r->out.find("\xe2\x84\xb9 pass 0\n"), std::string::npos) << r->out;  // "ℹ pass 0"
}

// The fake internet (fakenet.h) when this host can make it; null and why not otherwise.
std::unique_ptr<FakeNet> StartFakeNet(const std::string& dir, std::string* why) {
  if (!Have("nft") || !Have("dnsmasq") || !Have("openssl")) {
    *why = "needs nft, dnsmasq and openssl";
    return nullptr;
  }
  auto net = std::make_unique<FakeNet>(dir);
  if (!net->Start(why)) return nullptr;
  return net;
}

TEST(E2bSdkTest, UnmodifiedSdkAgainstSpaced) {
  SPACE_REQUIRE_SANDBOXES();
  std::string node, work;
  std::vector<std::string> base_env;
  if (std::string skip = InstallSdk(&node, &work, &base_env); !skip.empty()) {
    if (HasFailure()) return;
    GTEST_SKIP() << skip;
  }
  // The egress cases run against the fake internet (fakenet.h) when this host can make it.
  auto tmp = sys::TempDir::Create("/tmp", "space-fakenet-");
  ASSERT_TRUE(tmp);
  std::string net_why;
  std::unique_ptr<FakeNet> net = StartFakeNet(tmp->path(), &net_why);
  const std::string max_file_bytes = "8388608";
  // HTTPS beside plain HTTP (docs/tls.md): the whole suite talks to spaced over TLS.
  std::vector<std::string> args = {"--max-file-bytes", max_file_bytes, "--tls-self-signed"};
  if (net) args.insert(args.end(), {"--dns-upstream", "198.51.100.53", "--sandbox-subnet", "10.216.0.0/24"});
  Daemon d(args);
  ASSERT_TRUE(d.Start());
  if (!net) std::printf("egress cases skipped: no fake internet (%s)\n", net_why.c_str());
  RunSuite(d, node, work, base_env, "", max_file_bytes, net ? tmp->path() + "/servers.log" : "", "e2b",
           /*https=*/true);
}

// The unmodified E2B Python SDK's network cases (tests/e2b/python/test_e2b_network.py)
// against the fake internet: run_pytest.sh starts spaced with it as its internet and hands
// pytest its connection log. (The rest of that suite is ctest's e2b_python_sdk_test.)
TEST(E2bPythonSdkTest, NetworkUnderPolicy) {
  SPACE_REQUIRE_SANDBOXES();
  // E2B's `base` (SPACE's e2b-base, built from Debian) is made before the fake internet is
  // spaced's internet: its RUN steps need the real package registries, which the fake DNS
  // does not know. The spaced under test then imports it from the template cache.
  {
    Daemon prep;
    ASSERT_TRUE(prep.Start());
    ASSERT_TRUE(EnsureBuiltin(prep.client(), "e2b-base"));
  }
  auto tmp = sys::TempDir::Create("/tmp", "space-fakenet-");
  ASSERT_TRUE(tmp);
  std::string why;
  std::unique_ptr<FakeNet> net = StartFakeNet(tmp->path(), &why);
  if (!net) GTEST_SKIP() << "no fake internet: " << why;
  sys::SpawnOptions o;
  o.argv = {"bash", std::string(SPACE_SOURCE_DIR) + "/tests/python/run_pytest.sh", BinDir(),
            std::string(SPACE_SOURCE_DIR) + "/tests/e2b/python", "--env", "e2b"};
  for (const char* a : {"--dns-upstream", "198.51.100.53", "--sandbox-subnet", "10.218.0.0/24"})
    o.argv.insert(o.argv.end(), {"--spaced-arg", a});
  o.argv.insert(o.argv.end(), {"--", "-k", "test_e2b_network"});
  std::vector<std::string> env = EnvironWithout({"E2B_", "SPACE_"});
  env.push_back("SPACE_FAKE_INTERNET_LOG=" + tmp->path() + "/servers.log");
  if (const char* agent = std::getenv("SPACE_TEST_AGENT")) env.push_back(std::string("SPACE_TEST_AGENT=") + agent);
  o.env = env;
  auto r = sys::Run(o, 10 * 60 * 1000);
  ASSERT_TRUE(r) << r.error().message;
  std::printf("%s\n", r->out.c_str());
  if (r->exit_code == 77) GTEST_SKIP() << r->out;
  EXPECT_TRUE(r->ok()) << "the E2B Python network cases failed (exit " << r->exit_code << "):\n" << r->out << r->err;
  // Every egress case ran: none was skipped for want of the fake internet.
  EXPECT_EQ(r->out.find("SKIPPED"), std::string::npos) << r->out;
}

// The oldest 2.x release that can be pointed at spaced (2.7.0, the first to take E2B_API_URL
// and E2B_SANDBOX_URL; it creates with POST /sandboxes,
// connects with POST /sandboxes/{id}/connect) and the one E2B's own suite was measured with
// (2.45.0), side by side with the newest: the core of the suite against each, one spaced.
TEST(E2bSdkTest, OlderSdkReleases) {
  SPACE_REQUIRE_SANDBOXES();
  std::string node, work;
  std::vector<std::string> base_env;
  if (std::string skip = InstallSdk(&node, &work, &base_env); !skip.empty()) {
    if (HasFailure()) return;
    GTEST_SKIP() << skip;
  }
  const std::string max_file_bytes = "8388608";
  // Plain HTTP here; TLS beside it for the port URLs the SDKs build with https://.
  Daemon d({"--max-file-bytes", max_file_bytes, "--tls-self-signed"});
  ASSERT_TRUE(d.Start());
  // The calls each release has: 2.7 has no pause() (nor sbx.sendStdin), and its kill()
  // answers nothing; those cases run on 2.45 and the newest.
  const std::string core =
      "create returns|getInfo reports|commands\\.run in the foreground|a non-zero exit|background commands|"
      "files: write and read|files: list|Sandbox\\.list|unknown sandbox|the API key is in E2B shape|"
      "POST /sandboxes creates|commands\\.connect|signed file URLs";
  for (const auto& [package, extra] : std::vector<std::pair<std::string, std::string>>{
           {"e2b-2-7", ""}, {"e2b-2-45", "|sendStdin|pause, then connect|kill, isRunning|snapshots|files\\.watchDir|file metadata|getHost over https"}}) {
    SCOPED_TRACE(package);
    RunSuite(d, node, work, base_env, "^(" + core + extra + ")", max_file_bytes, "", package);
  }
}

// The same SDK on gVisor (spaced's default runtime the gvisor plugin; the E2B API names no
// runtime): create, commands, files, pause and connect, and egress by policy through
// gVisor's netstack. The other cases test spaced's E2B surface, which is the same here.
TEST(E2bSdkTest, SdkOnGvisor) {
  SPACE_REQUIRE_SANDBOXES();
  if (!sys::Exists("/usr/bin/runsc")) GTEST_SKIP() << "runsc is not installed (make deps)";
  std::string node, work;
  std::vector<std::string> base_env;
  if (std::string skip = InstallSdk(&node, &work, &base_env); !skip.empty()) {
    if (HasFailure()) return;
    GTEST_SKIP() << skip;
  }
  auto tmp = sys::TempDir::Create("/tmp", "space-fakenet-");
  ASSERT_TRUE(tmp);
  std::string net_why;
  std::unique_ptr<FakeNet> net = StartFakeNet(tmp->path(), &net_why);
  const std::string max_file_bytes = "8388608";
  std::vector<std::string> args = {"--max-file-bytes", max_file_bytes, "--default-runtime", "gvisor"};
  if (net) args.insert(args.end(), {"--dns-upstream", "198.51.100.53", "--sandbox-subnet", "10.217.0.0/24"});
  Daemon d(args);
  ASSERT_TRUE(d.Start());
  if (!net) std::printf("egress cases skipped: no fake internet (%s)\n", net_why.c_str());
  // E2B's create names no runtime: the sandboxes are the default runtime's.
  std::string probe = CreateSandbox(d.client());
  ASSERT_FALSE(probe.empty());
  EXPECT_EQ(d.client().GetSandbox(probe)->value("runtime", ""), "gvisor");
  ASSERT_TRUE(d.client().DeleteSandboxAndWait(probe, 60s));
  RunSuite(d, node, work, base_env,
           "^(create returns|commands\\.run in the foreground|a non-zero exit|background commands|"
           "files: write and read|getInfo of a symlink|pause, then connect resumes|"
           "allowInternetAccess|network\\.denyOut)",
           max_file_bytes, net ? tmp->path() + "/servers.log" : "");
}

TEST(E2bCodeInterpreterSdkTest, UnmodifiedSdkAgainstSpaced) {
  SPACE_REQUIRE_SANDBOXES();
  std::string node = Which("node"), npm = Which("npm");
  if (node.empty() || npm.empty())
    GTEST_SKIP() << "node and npm are needed (scripts/install-deps.sh installs them)";
  const std::vector<std::string> base_env = EnvironWithout({"E2B_"});
  const std::string work = BinDir() + "/../e2b-code-interpreter-sdk";
  std::string why;
  auto installed = InstallNpmSuite(
      npm, std::string(SPACE_SOURCE_DIR) + "/tests/e2b/code-interpreter", work,
      {"package.json", "package-lock.json", "code-interpreter.test.mjs"},
      "@e2b/code-interpreter/package.json", base_env, &why);
  if (installed == NpmSuite::kOffline)
    GTEST_SKIP() << "npm ci cannot reach the registry (offline?):\n" << why;
  ASSERT_EQ(installed, NpmSuite::kReady) << "npm ci failed:\n" << why;

  Daemon d;
  ASSERT_TRUE(d.Start());
  // The SDK's default template (code-interpreter-v1) is our built-in code-interpreter:
  // present before the suite starts, so that its creates measure sandboxes, not a build.
  auto t0 = std::chrono::steady_clock::now();
  // (EnsureBuiltin follows the operation: a wait is capped at 5 minutes, a build on a
  // cache miss can take longer.)
  ASSERT_TRUE(EnsureBuiltin(d.client(), "code-interpreter")) << "preparing the code-interpreter template";
  std::printf("code-interpreter template ready in %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());

  std::vector<std::string> env = base_env;
  env.push_back("E2B_API_URL=" + d.url());
  env.push_back("E2B_SANDBOX_URL=" + d.url());
  env.push_back("E2B_API_KEY=" + d.api_key());
  sys::SpawnOptions o;
  o.argv = {node, "--test", "--test-reporter=spec", "--test-concurrency=1", "code-interpreter.test.mjs"};
  o.cwd = work;
  o.env = env;
  auto r = sys::Run(o, 10 * 60 * 1000);
  ASSERT_TRUE(r) << r.error().message;
  std::printf("%s\n", r->out.c_str());
  EXPECT_TRUE(r->ok()) << "the E2B code-interpreter SDK suite failed (exit " << r->exit_code
                       << "):\n" << r->out << r->err;
}

}  // namespace
}  // namespace space::testing
