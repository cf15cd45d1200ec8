// npm_suite: runs a node test suite whose packages are pinned by a package-lock.json
// (tests/e2b, tests/mcp): copies the suite into the build tree, installs it with `npm ci`
// once per lock file (a stamp in node_modules records the lock it was installed from),
// and finds node. Header-only, for the integration tests.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "tests/integration/harness.h"

namespace space::testing {

// The absolute path of `name` on PATH, or "".
inline std::string Which(const std::string& name) {
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

// Our environment minus variables whose name starts with one of `drop_prefixes` (so
// nothing of a developer's own set-up leaks into a run).
inline std::vector<std::string> EnvironWithout(const std::vector<std::string>& drop_prefixes) {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    bool drop = false;
    for (const auto& p : drop_prefixes) drop = drop || kv.rfind(p, 0) == 0;
    if (!drop) env.push_back(kv);
  }
  return env;
}

// What InstallNpmSuite did.
enum class NpmSuite { kReady, kOffline, kFailed };

// Copies `files` (package.json and package-lock.json among them) from `src` to `work` and
// runs `npm ci` there unless node_modules was installed from this very lock. kOffline when
// the registry cannot be reached; *why says what went wrong.
inline NpmSuite InstallNpmSuite(const std::string& npm, const std::string& src,
                                const std::string& work, const std::vector<std::string>& files,
                                const std::string& installed_marker,
                                const std::vector<std::string>& env, std::string* why) {
  if (!sys::MkdirAll(work, 0755)) {
    *why = "cannot make " + work;
    return NpmSuite::kFailed;
  }
  for (const auto& f : files) {
    auto text = sys::ReadFile(src + "/" + f);
    if (!text || !sys::WriteFileAtomic(work + "/" + f, *text, 0644)) {
      *why = "cannot copy " + src + "/" + f;
      return NpmSuite::kFailed;
    }
  }
  auto lock = sys::ReadFile(work + "/package-lock.json");
  if (!lock) {
    *why = lock.error().message;
    return NpmSuite::kFailed;
  }
  auto stamp = sys::ReadFile(work + "/node_modules/.space-lock");
  if (stamp && *stamp == *lock && sys::Exists(work + "/node_modules/" + installed_marker))
    return NpmSuite::kReady;
  sys::SpawnOptions o;
  o.argv = {npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"};
  o.cwd = work;
  o.env = env;
  auto r = sys::Run(o, 10 * 60 * 1000);
  if (!r) {
    *why = r.error().message;
    return NpmSuite::kFailed;
  }
  if (!r->ok()) {
    *why = r->out + r->err;
    for (const char* offline : {"ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ETIMEDOUT", "ENETUNREACH"}) {
      if (why->find(offline) != std::string::npos) return NpmSuite::kOffline;
    }
    return NpmSuite::kFailed;
  }
  if (!sys::WriteFileAtomic(work + "/node_modules/.space-lock", *lock, 0644)) {
    *why = "cannot write the install stamp";
    return NpmSuite::kFailed;
  }
  return NpmSuite::kReady;
}

}  // namespace space::testing
