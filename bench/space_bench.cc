// space_bench: end-to-end figures of a running spaced, each beside a baseline measured in
// the same run on the same machine (these machines are shared and noisy: read the ratios).
//
//   create -> first output of `echo`   vs  bare `crun run -d` -> first output, same rootfs
//   command round trip (`true`)        vs  bare fork+exec+wait of /bin/true
//   output throughput of one command (dd bs=1M of 1 GiB), end to end over HTTP, vs the
//   producer alone in the sandbox and the host writing a file (bench/output_bench.cc)
//   with --microvm N: microVM cold boot vs start from the template snapshot (each to first
//   output), full snapshot time and size of a 256 MiB guest, fork of a running VM
//
// Usage: space_bench --url URL --key KEY --data-dir DIR [--n 30] [--bytes 1073741824]
//        [--runtimes oci gvisor [--runtimes-only]] [--output-only]
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <thread>

#include "bench/output_bench.h"
#include "bench/stats.h"
#include "cli/client.h"
#include "sys/sys.h"

using namespace space;
using namespace space::bench;

namespace {

// Bare crun: a bundle whose process is `echo hi` on the same busybox rootfs, run detached
// in spaced's own runtime mount namespace; time until the first byte arrives on a pipe.
Result<double> BareCrunOnce(const std::string& ns, const std::string& bundle, int i) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return ErrnoFail("pipe");
  sys::UniqueFd r(p[0]), w(p[1]);
  std::string id = "bench-bare-" + std::to_string(::getpid()) + "-" + std::to_string(i);
  auto t0 = Clock::now();
  auto child = sys::Spawn({.argv = {"nsenter", "--mount=" + ns, "crun", "--root", "/run/space-bench-crun",
                                    "run", "-d", "--bundle", bundle, id},
                           .stdout_fd = w.get(), .stderr_fd = w.get()});
  if (!child) return tl::unexpected(child.error());
  w.Reset();
  char c;
  ssize_t n = ::read(r.get(), &c, 1);
  auto t1 = Clock::now();
  (void)child->Wait();
  (void)sys::Run({.argv = {"nsenter", "--mount=" + ns, "crun", "--root", "/run/space-bench-crun",
                           "delete", "-f", id}});
  if (n != 1) return Fail(Errc::kInternal, "bare crun produced no output");
  return Ms(t1 - t0);
}

Result<std::string> MakeBareBundle(const std::string& dir, const std::string& rootfs) {
  SPACE_TRY(sys::MkdirAll(dir));
  auto spec = sys::RunChecked({.argv = {"crun", "spec"}, .cwd = dir});
  if (!spec) return tl::unexpected(spec.error());
  auto text = sys::ReadFile(dir + "/config.json");
  if (!text) return tl::unexpected(text.error());
  auto j = ParseJson(*text);
  if (!j) return Fail(Errc::kInternal, "crun spec: bad JSON");
  (*j)["root"] = {{"path", rootfs}, {"readonly", true}};
  (*j)["process"]["args"] = {"/bin/echo", "hi"};
  (*j)["process"]["terminal"] = false;
  (*j)["linux"]["cgroupsPath"] = "/space-bench/bare";
  SPACE_TRY(sys::WriteFileAtomic(dir + "/config.json", j->dump()));
  return dir;
}

// The same bundle as a sandbox's (issue 17: "≤ 1.5× bare `crun run -d` of the same
// bundle"): its config.json (crun's copy, in crun's state) — user namespace, seccomp filter, capabilities, cgroup limits,
// masked paths, mounts — with `echo hi` as the process. Sources of mounts that spaced makes
// per sandbox (its run dir, files in its bundle) become fresh copies in `dir`, since crun runs
// in the helper namespace where those mounts are not; the sandbox's root stays its root.
Result<std::string> MakeSameBundle(const std::string& dir, const std::string& sandbox_bundle,
                                   const std::string& sandbox_config, const std::string& rootfs) {
  SPACE_TRY(sys::MkdirAll(dir));
  auto text = sys::ReadFile(sandbox_config);
  if (!text) return tl::unexpected(text.error());
  auto j = ParseJson(*text);
  if (!j) return Fail(Errc::kInternal, "sandbox config.json: bad JSON");
  (*j)["root"]["path"] = rootfs;
  (*j)["process"]["args"] = {"/bin/echo", "hi"};
  (*j)["process"]["terminal"] = false;
  (*j)["linux"]["cgroupsPath"] = "/space-bench/same";
  const std::string runtime_dir = sandbox_bundle.substr(0, sandbox_bundle.rfind("/bundles/"));
  int k = 0;
  for (auto& m : (*j)["mounts"]) {
    std::string src = m.value("source", "");
    if (src.rfind(runtime_dir + "/", 0) != 0) continue;
    std::string copy = dir + "/src-" + std::to_string(k++);
    struct stat st;
    if (::stat(src.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      SPACE_TRY(sys::MkdirAll(copy));
      ::chmod(copy.c_str(), st.st_mode & 07777);
      if (::chown(copy.c_str(), st.st_uid, st.st_gid) != 0) return ErrnoFail("chown " + copy);
    } else {
      auto content = sys::ReadFile(src);
      SPACE_TRY(sys::WriteFileAtomic(copy, content ? *content : ""));
    }
    m["source"] = copy;
  }
  SPACE_TRY(sys::WriteFileAtomic(dir + "/config.json", j->dump()));
  return dir;
}

// Starts `echo hi` in one request (POST ?stream=mux) and returns the time from t0 until
// its first stdout byte arrived.
Result<double> FirstOutputMs(client::Client& c, const std::string& id, Clock::time_point t0) {
  client::MuxOffsets off;
  std::string cid;
  std::optional<double> first;
  auto cmd = c.StartAndStream(id, Json{{"argv", {"echo", "hi"}}}, off,
                              [&](client::MuxKind k, std::string_view) {
                                if (k == client::MuxKind::kStdout && !first)
                                  first = Ms(Clock::now() - t0);
                                return !first;
                              }, &cid);
  if (!cmd) return tl::unexpected(cmd.error());
  if (!first) return Fail(Errc::kInternal, "echo hi printed nothing");
  return *first;
}

// create (with `body`) -> first stdout byte of `echo hi`; deletes the sandbox unless `keep`.
Result<double> CreateToFirstOutput(client::Client& c, const Json& body, std::string* keep) {
  auto t0 = Clock::now();
  auto sb = c.CreateSandbox(body, std::chrono::seconds(120));
  if (!sb) return tl::unexpected(sb.error());
  std::string id = (*sb)["sandbox"]["id"];
  auto ms = FirstOutputMs(c, id, t0);
  if (!ms) return tl::unexpected(ms.error());
  if (keep) {
    *keep = id;
  } else {
    (void)c.DeleteSandboxAndWait(id, std::chrono::seconds(60));
  }
  return ms;
}

// microVM figures (256 MiB guests): cold boot (a daemon started with
// --no-microvm-template-snapshots) and start from the template snapshot, each to the first
// output; a full snapshot (time and size) and a fork of a running VM.
int MicrovmBench(client::Client& c, client::Client* cold, int n) {
  const Json body = {{"runtime", "microvm"}, {"limits", {{"memory_bytes", 256 << 20}}}};
  std::vector<double> cold_ms, warm_ms, snap_ms, fork_ms;
  // The first create of the template boots it once and saves the template snapshot.
  std::string id;
  auto first = CreateToFirstOutput(c, body, &id);
  if (!first) {
    std::fprintf(stderr, "microvm create: %s\n", first.error().message.c_str());
    return 1;
  }
  std::printf("%-34s %8.2f ms (boot + template snapshot, once per template)\n",
              "microvm first create", *first);
  for (int i = 0; cold && i < n; ++i) {
    auto ms = CreateToFirstOutput(*cold, body, nullptr);
    if (!ms) {
      std::fprintf(stderr, "microvm cold create: %s\n", ms.error().message.c_str());
      return 1;
    }
    cold_ms.push_back(*ms);
  }
  for (int i = 0; i < n; ++i) {
    auto ms = CreateToFirstOutput(c, body, nullptr);
    if (!ms) {
      std::fprintf(stderr, "microvm create: %s\n", ms.error().message.c_str());
      return 1;
    }
    warm_ms.push_back(*ms);
  }
  // Dirty some guest memory so the snapshot is not just a fresh boot.
  (void)c.Run(id, std::vector<std::string>{"sh", "-c", "head -c 64m /dev/urandom > /dev/shm/fill"});
  int64_t snap_bytes = 0;
  for (int i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    auto snap = c.SnapshotAndWait(id);
    if (!snap) {
      std::fprintf(stderr, "microvm snapshot: %s\n", snap.error().message.c_str());
      return 1;
    }
    snap_ms.push_back(Ms(Clock::now() - t0));
    for (int k = 0; k < 50; ++k) {
      auto info = c.GetSnapshot(*snap);
      if (info && (*info)["size"].is_number() && (*info)["size"].get<int64_t>() > 0) {
        snap_bytes = (*info)["size"].get<int64_t>();
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    (void)c.Call("DELETE", "/v1/snapshots/" + *snap);
  }
  for (int i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    auto forks = c.ForkAndWait(id, 1);
    if (!forks || forks->empty() || (*forks)[0].state != "running") {
      std::fprintf(stderr, "microvm fork failed\n");
      return 1;
    }
    fork_ms.push_back(Ms(Clock::now() - t0));
    (void)c.DeleteSandboxAndWait((*forks)[0].id, std::chrono::seconds(60));
  }
  (void)c.DeleteSandboxAndWait(id, std::chrono::seconds(60));
  if (cold) {
    Print("microvm cold boot -> first output", Summarize(cold_ms), Summarize(cold_ms));
  }
  Print("microvm template snapshot -> output", Summarize(warm_ms), Summarize(cold_ms));
  Print("microvm snapshot, 256 MiB guest", Summarize(snap_ms), Summarize(warm_ms));
  std::printf("%-34s %.1f MiB (memory stream + disk overlay)\n", "microvm snapshot size",
              snap_bytes / 1048576.0);
  Print("microvm fork x1 (running VM)", Summarize(fork_ms), Summarize(warm_ms));
  return 0;
}

}  // namespace

// Per runtime, in one run: create -> first output (cold: a non-default limit keeps the warm
// pool out), command round trip (`true`), and a snapshot of a running sandbox; each later
// runtime is printed against the first (the baseline, normally oci).
int RuntimesBench(client::Client& c, const std::vector<std::string>& runtimes, int n) {
  struct Figures { Stats create, rt, snap; };
  std::vector<Figures> all;
  for (const auto& rt : runtimes) {
    const Json body = {{"runtime", rt}, {"limits", {{"memory_bytes", 200 << 20}}}};
    std::vector<double> create_ms, rt_ms, snap_ms;
    for (int i = 0; i < n; ++i) {
      auto ms = CreateToFirstOutput(c, body, nullptr);
      if (!ms) {
        std::fprintf(stderr, "%s create: %s\n", rt.c_str(), ms.error().message.c_str());
        return 1;
      }
      create_ms.push_back(*ms);
    }
    std::string id;
    if (auto ms = CreateToFirstOutput(c, body, &id); !ms) return 1;
    for (int i = 0; i < n * 5; ++i) {
      auto t0 = Clock::now();
      auto cmd = c.StartCommand(id, {{"argv", {"true"}}});
      if (!cmd) return 1;
      auto done = c.GetCommand(id, (*cmd)["id"].get<std::string>(), std::chrono::seconds(30));
      if (!done || (*done)["state"] != "exited") return 1;
      rt_ms.push_back(Ms(Clock::now() - t0));
    }
    for (int i = 0; i < n; ++i) {
      auto t0 = Clock::now();
      auto r = c.Call("POST", "/v1/sandboxes/" + id + "/snapshots?wait=60s");
      snap_ms.push_back(Ms(Clock::now() - t0));
      if (!r) return 1;
      (void)c.Call("DELETE", "/v1/snapshots/" + (*r)["snapshot"]["id"].get<std::string>());
    }
    (void)c.DeleteSandboxAndWait(id, std::chrono::seconds(60));
    all.push_back({Summarize(create_ms), Summarize(rt_ms), Summarize(snap_ms)});
  }
  for (size_t i = 0; i < runtimes.size(); ++i) {
    std::string tag = " [" + runtimes[i] + " vs " + runtimes[0] + "]";
    Print(("create -> first output" + tag).c_str(), all[i].create, all[0].create);
    Print(("command round trip" + tag).c_str(), all[i].rt, all[0].rt);
    Print(("snapshot (running)" + tag).c_str(), all[i].snap, all[0].snap);
  }
  return 0;
}

int main(int argc, char** argv) {
  CLI::App app{"space_bench"};
  std::string url, key, data_dir;
  int n = 30;
  int64_t bytes = 1ll << 30;
  app.add_option("--url", url)->required();
  app.add_option("--key", key)->required();
  app.add_option("--data-dir", data_dir)->required();
  app.add_option("--n", n);
  app.add_option("--bytes", bytes);
  int microvm_n = 0;
  bool microvm_only = false;
  std::string cold_url, cold_key;
  app.add_option("--microvm", microvm_n, "microVM figures with N samples each (0: skip)");
  app.add_flag("--microvm-only", microvm_only, "only the microVM figures");
  app.add_option("--microvm-cold-url", cold_url, "a spaced without template snapshots (cold boots)");
  app.add_option("--microvm-cold-key", cold_key);
  std::vector<std::string> runtimes;
  app.add_option("--runtimes", runtimes, "runtime comparison, first is the baseline (e.g. oci gvisor)");
  bool runtimes_only = false;
  app.add_flag("--runtimes-only", runtimes_only, "only the runtime comparison");
  bool output_only = false;
  app.add_flag("--output-only", output_only, "only the output throughput figures");
  int output_rounds = 3;
  app.add_option("--output-rounds", output_rounds, "end-to-end and file-write rounds (medians)");
  CLI11_PARSE(app, argc, argv);
  client::Client c(url, key);
  if (!c.Health()) {
    std::fprintf(stderr, "spaced is not answering at %s\n", url.c_str());
    return 1;
  }
  if (output_only) {
    auto sb = c.CreateSandboxAndWait(Json::object(), std::chrono::seconds(60));
    if (!sb) {
      std::fprintf(stderr, "create: %s\n", sb.error().message.c_str());
      return 1;
    }
    std::string id = (*sb)["id"];
    int rc = OutputBench(c, id, data_dir, bytes, std::max(1, output_rounds));
    (void)c.DeleteSandboxAndWait(id, std::chrono::seconds(60));
    return rc;
  }
  if (!runtimes.empty()) {
    if (int rc = RuntimesBench(c, runtimes, n); rc != 0) return rc;
    if (runtimes_only) return 0;
  }
  if (microvm_n > 0) {
    std::unique_ptr<client::Client> cold;
    if (!cold_url.empty()) cold = std::make_unique<client::Client>(cold_url, cold_key);
    if (int rc = MicrovmBench(c, cold.get(), microvm_n); rc != 0) return rc;
    if (microvm_only) return 0;
  } else if (microvm_only) {
    std::fprintf(stderr, "--microvm-only needs --microvm N\n");
    return 1;
  }

  // ---- create -> first output. Cold: a non-default limit keeps the warm pool out of it.
  auto create_to_first_output = [&](const Json& body, bool* warm) -> Result<double> {
    auto t0 = Clock::now();
    auto sb = c.CreateSandbox(body, std::chrono::seconds(60));
    if (!sb) return tl::unexpected(sb.error());
    if (warm) *warm = JsonBoolOr((*sb)["operation"]["result"], "warm", false);
    std::string id = (*sb)["sandbox"]["id"];
    auto ms = FirstOutputMs(c, id, t0);
    if (!ms) return tl::unexpected(ms.error());
    (void)c.DeleteSandboxAndWait(id, std::chrono::seconds(60));
    return *ms;
  };
  std::vector<double> warm_ms;
  int cold_fallbacks = 0;
  for (int i = 0; i < n; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // let the pool refill
    bool warm = false;
    auto ms = create_to_first_output(Json::object(), &warm);
    if (!ms) {
      std::fprintf(stderr, "warm create: %s\n", ms.error().message.c_str());
      return 1;
    }
    if (warm) {
      warm_ms.push_back(*ms);
    } else {
      ++cold_fallbacks;
    }
  }
  // Cold creates and their baselines alternate (create, then crun of the sandbox's own
  // bundle, then crun's default bundle; every other round in the reverse order), so that
  // each pair shares the machine's state of the moment: on these shared machines a phase
  // of n creates followed by a phase of n crun runs moved the ratio by ±0.2 between runs.
  // The bundles come from two reference sandboxes (a default one, and one with the cold
  // creates' limits, whose config crun keeps in its state), kept while the loop runs for
  // their roots.
  std::string ns = data_dir + "/runtime/oci/ns/mnt";
  if (!sys::Exists(ns)) ns = "/proc/self/ns/mnt";
  std::string bare_bundle, same_bundle, ref_bare, ref_same;
  auto bare_tmp = sys::TempDir::Create("/tmp", "space-bench-");
  auto same_tmp = sys::TempDir::Create("/tmp", "space-bench-same-");
  if (bare_tmp && same_tmp) {
    ::chmod(same_tmp->path().c_str(), 0711);
    if (auto sb = c.CreateSandboxAndWait(Json::object(), std::chrono::seconds(60))) {
      ref_bare = (*sb)["id"];
      auto bundle = MakeBareBundle(bare_tmp->path() + "/bundle", data_dir + "/storage/pool/roots/" + ref_bare);
      if (bundle) bare_bundle = *bundle;
      else std::fprintf(stderr, "bundle: %s\n", bundle.error().message.c_str());
    }
    if (auto sb = c.CreateSandboxAndWait(Json{{"limits", {{"pids", 513}}}}, std::chrono::seconds(60))) {
      ref_same = (*sb)["id"];
      // The bundle's config.json goes once crun has started the sandbox; crun's copy stays.
      auto bundle = MakeSameBundle(same_tmp->path() + "/bundle", data_dir + "/runtime/oci/bundles/" + ref_same,
                                   data_dir + "/runtime/oci/crun/" + ref_same + "/config.json",
                                   data_dir + "/storage/pool/roots/" + ref_same);
      if (bundle) {
        ::chmod((same_tmp->path() + "/bundle").c_str(), 0711);
        same_bundle = *bundle;
      } else {
        std::fprintf(stderr, "same bundle: %s\n", bundle.error().message.c_str());
      }
    }
  }
  std::vector<double> create_ms, bare_ms, same_ms, pair_ratios;
  for (int i = 0; i < n; ++i) {
    double created = 0, same = 0;
    auto cold_create = [&]() -> bool {
      auto ms = create_to_first_output(Json{{"limits", {{"pids", 513}}}}, nullptr);
      if (!ms) std::fprintf(stderr, "cold create: %s\n", ms.error().message.c_str());
      if (ms) create_ms.push_back(created = *ms);
      return ms.has_value();
    };
    // One crun run of `bundle` into `out`; a failing bundle is dropped for the rest.
    auto baseline = [&](std::string& bundle, std::vector<double>& out, int k, const char* what) {
      if (bundle.empty()) return 0.0;
      auto ms = BareCrunOnce(ns, bundle, k);
      if (ms) {
        out.push_back(*ms);
        return *ms;
      }
      std::fprintf(stderr, "%s: %s\n", what, ms.error().message.c_str());
      bundle.clear();
      return 0.0;
    };
    auto baselines = [&] {
      same = baseline(same_bundle, same_ms, 2 * i, "bare crun, same bundle");
      baseline(bare_bundle, bare_ms, 2 * i + 1, "bare crun");
    };
    if (i % 2 == 0) {
      if (!cold_create()) return 1;
      baselines();
    } else {
      baselines();
      if (!cold_create()) return 1;
    }
    if (same > 0) pair_ratios.push_back(created / same);
  }
  for (const auto& id : {ref_bare, ref_same}) {
    if (!id.empty()) (void)c.DeleteSandboxAndWait(id, std::chrono::seconds(60));
  }
  Print("create -> first output (cold)", Summarize(create_ms), Summarize(bare_ms));
  if (!same_ms.empty()) {
    Print("  vs crun of the same bundle", Summarize(create_ms), Summarize(same_ms));
    auto r = Summarize(pair_ratios);
    std::sort(pair_ratios.begin(), pair_ratios.end());
    std::printf("  the same, pair by pair              median of %zu ratios %.2fx (quartiles %.2f-%.2fx)\n",
                r.n, r.p50, pair_ratios[pair_ratios.size() / 4], pair_ratios[pair_ratios.size() * 3 / 4]);
    Print("  warm pool vs the same bundle", Summarize(warm_ms), Summarize(same_ms));
  }
  Print("create -> first output (warm pool)", Summarize(warm_ms), Summarize(bare_ms));
  if (cold_fallbacks) std::printf("  (%d of %d warm attempts found the pool empty)\n", cold_fallbacks, n);

  // ---- command round trip
  auto sb = c.CreateSandboxAndWait(Json::object(), std::chrono::seconds(60));
  if (!sb) return 1;
  std::string id = (*sb)["id"];
  std::vector<double> rt_ms, fork_ms;
  for (int i = 0; i < n * 10; ++i) {
    auto t0 = Clock::now();
    auto cmd = c.StartCommand(id, {{"argv", {"true"}}});
    if (!cmd) return 1;
    auto done = c.GetCommand(id, (*cmd)["id"].get<std::string>(), std::chrono::seconds(30));
    auto t1 = Clock::now();
    if (!done || (*done)["state"] != "exited") return 1;
    rt_ms.push_back(Ms(t1 - t0));
  }
  for (int i = 0; i < n * 10; ++i) {
    auto t0 = Clock::now();
    pid_t pid;
    char* args[] = {const_cast<char*>("/bin/true"), nullptr};
    if (posix_spawn(&pid, "/bin/true", nullptr, nullptr, args, environ) != 0) return 1;
    int st;
    waitpid(pid, &st, 0);
    fork_ms.push_back(Ms(Clock::now() - t0));
  }
  Print("command round trip (true)", Summarize(rt_ms), Summarize(fork_ms));

  // ---- snapshot and fork of a running sandbox, small and large workspace
  {
    auto snap_once = [&](const std::string& sid) -> double {
      auto t0 = Clock::now();
      auto r = c.Call("POST", "/v1/sandboxes/" + sid + "/snapshots?wait=60s");
      double ms = Ms(Clock::now() - t0);
      if (r) (void)c.Call("DELETE", "/v1/snapshots/" + (*r)["snapshot"]["id"].get<std::string>());
      return ms;
    };
    auto fork_once = [&](const std::string& sid) -> double {
      auto t0 = Clock::now();
      auto r = c.Call("POST", "/v1/sandboxes/" + sid + "/fork?wait=60s", Json{{"count", 1}});
      double ms = Ms(Clock::now() - t0);
      if (r) {
        for (const auto& k : (*r)["operation"]["result"]["sandboxes"])
          (void)c.DeleteSandboxAndWait(k["id"].get<std::string>(), std::chrono::seconds(60));
      }
      return ms;
    };
    // Baseline: the bare btrfs snapshot of the same root, from the host, same run.
    auto bare_snapshot = [&](const std::string& sid) -> double {
      std::string root = data_dir + "/storage/pool/roots/" + sid;
      std::string dst = data_dir + "/storage/pool/bench-bare-snap";
      auto t0 = Clock::now();
      auto r = sys::Run({.argv = {"btrfs", "subvolume", "snapshot", "-r", root, dst}});
      double ms = Ms(Clock::now() - t0);
      (void)sys::Run({.argv = {"btrfs", "subvolume", "delete", dst}});
      return r && r->exit_code == 0 ? ms : -1;
    };
    for (int64_t mib : {0, 512}) {
      auto sb = c.CreateSandboxAndWait(Json::object(), std::chrono::seconds(60));
      if (!sb) return 1;
      std::string sid = (*sb)["id"];
      if (mib > 0) {
        (void)c.Run(sid, Json{{"cmd", "dd if=/dev/urandom of=/root/big bs=1M count=" +
                                          std::to_string(mib) + " 2>/dev/null; sync"}});
      }
      (void)c.Run(sid, Json{{"cmd", "i=0; while [ $i -lt 2000 ]; do echo $i > /root/f$i; i=$((i+1)); done; sync"}});
      std::vector<double> snap_ms, fork_ms, bare_ms2;
      for (int i = 0; i < std::max(5, n / 2); ++i) {
        snap_ms.push_back(snap_once(sid));
        bare_ms2.push_back(bare_snapshot(sid));
      }
      for (int i = 0; i < std::max(3, n / 4); ++i) fork_ms.push_back(fork_once(sid));
      std::string label = "snapshot (2,000 files + " + std::to_string(mib) + " MiB)";
      Print(label.c_str(), Summarize(snap_ms), Summarize(bare_ms2));
      label = "fork x1 (2,000 files + " + std::to_string(mib) + " MiB)";
      Print(label.c_str(), Summarize(fork_ms), Summarize(create_ms));
      (void)c.DeleteSandboxAndWait(sid, std::chrono::seconds(60));
    }
  }

  // ---- output throughput (bench/output_bench.cc)
  int rc = OutputBench(c, id, data_dir, bytes, std::max(1, output_rounds));
  (void)c.DeleteSandboxAndWait(id, std::chrono::seconds(60));
  return rc;
}
