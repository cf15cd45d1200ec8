// Runs tests/console/console.test.mjs — Debian's chromium driven by playwright-core (pinned by
// package-lock.json; never a downloaded browser) — against a real spaced serving the web
// console built into share/space/console. Screenshots: build/test-artifacts/console/.
#include "tests/integration/npm_suite.h"

#ifndef SPACE_SOURCE_DIR
#error "SPACE_SOURCE_DIR must be defined"
#endif

namespace space::testing {
namespace {

TEST(ConsoleE2eTest, InChromium) {
  SPACE_REQUIRE_SANDBOXES();
  std::string node = Which("node"), npm = Which("npm"), chromium = Which("chromium");
  if (node.empty() || npm.empty() || chromium.empty())
    GTEST_SKIP() << "node, npm and chromium are needed (scripts/install-deps.sh installs them)";
  ASSERT_TRUE(sys::Exists(BinDir() + "/../share/space/console/index.html"))
      << "the console is not built (target space_console)";
  const std::string work = BinDir() + "/../console-e2e";
  std::vector<std::string> env = EnvironWithout({"SPACE_", "PLAYWRIGHT_"});
  std::string why;
  auto installed = InstallNpmSuite(npm, std::string(SPACE_SOURCE_DIR) + "/tests/console", work,
                                   {"package.json", "package-lock.json", "console.test.mjs"},
                                   "playwright-core/package.json", env, &why);
  if (installed == NpmSuite::kOffline) GTEST_SKIP() << "npm ci cannot reach the registry:\n" << why;
  ASSERT_EQ(installed, NpmSuite::kReady) << "npm ci failed:\n" << why;

  Daemon d;
  ASSERT_TRUE(d.Start());
  const std::string artifacts = BinDir() + "/../test-artifacts/console";
  ASSERT_TRUE(sys::MkdirAll(artifacts, 0755));
  env.push_back("SPACE_URL=" + d.url());
  env.push_back("SPACE_API_KEY=" + d.api_key());
  env.push_back("SPACE_CHROMIUM=" + chromium);
  env.push_back("SPACE_ARTIFACTS=" + artifacts);
  env.push_back("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1");
  sys::SpawnOptions o;
  o.argv = {node, "--test", "--test-reporter=spec", "--test-concurrency=1", "--test-timeout=240000",
            "console.test.mjs"};
  o.cwd = work;
  o.env = env;
  auto r = sys::Run(o, 12 * 60 * 1000);
  ASSERT_TRUE(r) << r.error().message;
  std::printf("%s\n", r->out.c_str());
  EXPECT_TRUE(r->ok()) << "the console suite failed (exit " << r->exit_code << "):\n"
                       << r->out << r->err << "\n---- spaced log ----\n" << d.Log();
  EXPECT_TRUE(d.client().Health());
}

}  // namespace
}  // namespace space::testing
