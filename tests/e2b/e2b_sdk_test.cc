// Runs tests/e2b/e2b.test.mjs — the unmodified E2B JavaScript SDK, pinned by
// package-lock.json — against a real spaced: installs the SDK with `npm ci` (once per
// lock file, in the build tree), starts spaced, and hands node nothing but the E2B
// environment variables an E2B user would set.
#include <cstdlib>
#include <fstream>

#include "tests/integration/harness.h"

#ifndef SPACE_SOURCE_DIR
#error "SPACE_SOURCE_DIR must be defined"
#endif

namespace space::testing {
namespace {

// The absolute path of `name` on PATH, or "".
std::string Which(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t pos = 0;
  while (pos <= dirs.size()) {
    size_t colon = dirs.find(':', pos);
    if (colon == std::string::npos) colon = dirs.size();
    std::string candidate = dirs.substr(pos, colon - pos) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    pos = colon + 1;
  }
  return "";
}

std::vector<std::string> Environ() {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    // Nothing of a developer's own E2B set-up may leak into the run.
    if (kv.rfind("E2B_", 0) == 0) continue;
    env.push_back(kv);
  }
  return env;
}

TEST(E2bSdkTest, UnmodifiedSdkAgainstSpaced) {
  SPACE_REQUIRE_SANDBOXES();
  std::string node = Which("node"), npm = Which("npm");
  if (node.empty() || npm.empty())
    GTEST_SKIP() << "node and npm are needed (scripts/install-deps.sh installs them)";

  // The SDK is installed in the build tree, keyed by the lock file: `npm ci` runs when the
  // lock changes (or nothing is installed yet).
  const std::string src = std::string(SPACE_SOURCE_DIR) + "/tests/e2b";
  const std::string work = BinDir() + "/../e2b-sdk";
  ASSERT_TRUE(sys::MkdirAll(work, 0755)) << work;
  for (const char* f : {"package.json", "package-lock.json", "e2b.test.mjs"}) {
    auto text = sys::ReadFile(src + "/" + f);
    ASSERT_TRUE(text) << text.error().message;
    ASSERT_TRUE(sys::WriteFileAtomic(work + "/" + f, *text, 0644));
  }
  auto lock = sys::ReadFile(work + "/package-lock.json");
  auto stamp = sys::ReadFile(work + "/node_modules/.space-lock");
  if (!stamp || *stamp != *lock || !sys::Exists(work + "/node_modules/e2b/package.json")) {
    sys::SpawnOptions o;
    o.argv = {npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"};
    o.cwd = work;
    o.env = Environ();
    auto r = sys::Run(o, 10 * 60 * 1000);
    ASSERT_TRUE(r) << r.error().message;
    if (!r->ok()) {
      std::string why = r->out + r->err;
      for (const char* offline : {"ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ETIMEDOUT", "ENETUNREACH"}) {
        if (why.find(offline) != std::string::npos)
          GTEST_SKIP() << "npm ci cannot reach the registry (offline?):\n" << why;
      }
      FAIL() << "npm ci failed:\n" << why;
    }
    ASSERT_TRUE(sys::WriteFileAtomic(work + "/node_modules/.space-lock", *lock, 0644));
  }

  const std::string max_file_bytes = "8388608";
  Daemon d({"--max-file-bytes", max_file_bytes});
  ASSERT_TRUE(d.Start());
  std::vector<std::string> env = Environ();
  env.push_back("E2B_API_URL=" + d.url());
  env.push_back("E2B_SANDBOX_URL=" + d.url());
  env.push_back("E2B_API_KEY=" + d.api_key());
  env.push_back("SPACE_MAX_FILE_BYTES=" + max_file_bytes);
  sys::SpawnOptions o;
  o.argv = {node, "--test", "--test-reporter=spec", "--test-concurrency=1", "e2b.test.mjs"};
  o.cwd = work;
  o.env = env;
  auto r = sys::Run(o, 12 * 60 * 1000);
  ASSERT_TRUE(r) << r.error().message;
  std::printf("%s\n", r->out.c_str());
  EXPECT_TRUE(r->ok()) << "the E2B SDK suite failed (exit " << r->exit_code << "):\n"
                       << r->out << r->err;
}

}  // namespace
}  // namespace space::testing
