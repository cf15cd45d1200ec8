// Runs tests/mcp/mcp.test.mjs — the official MCP TypeScript client, pinned by
// package-lock.json — against a real spaced, over stdio (spawning `space mcp`) and
// streamable HTTP (POST /mcp). Installs the client with `npm ci` once per lock file.
#include "tests/integration/npm_suite.h"

#ifndef SPACE_SOURCE_DIR
#error "SPACE_SOURCE_DIR must be defined"
#endif

namespace space::testing {
namespace {

TEST(McpClientTest, OfficialClientOverStdioAndHttp) {
  SPACE_REQUIRE_SANDBOXES();
  std::string node = Which("node"), npm = Which("npm");
  if (node.empty() || npm.empty())
    GTEST_SKIP() << "node and npm are needed (scripts/install-deps.sh installs them)";
  const std::string work = BinDir() + "/../mcp-client";
  std::vector<std::string> env = EnvironWithout({"SPACE_"});
  std::string why;
  auto installed = InstallNpmSuite(npm, std::string(SPACE_SOURCE_DIR) + "/tests/mcp", work,
                                   {"package.json", "package-lock.json", "mcp.test.mjs"},
                                   "@modelcontextprotocol/sdk/package.json", env, &why);
  if (installed == NpmSuite::kOffline) GTEST_SKIP() << "npm ci cannot reach the registry:\n" << why;
  ASSERT_EQ(installed, NpmSuite::kReady) << "npm ci failed:\n" << why;

  Daemon d({"--mcp-allow-origin", "https://tools.example.test"});
  ASSERT_TRUE(d.Start());
  env.push_back("SPACE_URL=" + d.url());
  env.push_back("SPACE_API_KEY=" + d.api_key());
  env.push_back("SPACE_CLI=" + BinDir() + "/space");
  sys::SpawnOptions o;
  // Each test ends within 4 minutes or fails by name (rather than the whole run timing out).
  o.argv = {node, "--test", "--test-reporter=spec", "--test-concurrency=1", "--test-timeout=240000",
            "mcp.test.mjs"};
  o.cwd = work;
  o.env = env;
  auto r = sys::Run(o, 12 * 60 * 1000);
  ASSERT_TRUE(r) << r.error().message;
  std::printf("%s\n", r->out.c_str());
  EXPECT_TRUE(r->ok()) << "the MCP client suite failed (exit " << r->exit_code << "):\n"
                       << r->out << r->err << "\n---- spaced log ----\n" << d.Log();
  // Whatever the suite did to /mcp, spaced still serves.
  EXPECT_TRUE(d.client().Health());
}

}  // namespace
}  // namespace space::testing
