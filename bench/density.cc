// density: how many idle sandboxes one node holds, and what each costs (issue 17).
//
// Against a running spaced (loopback only; SPACED_PID names its process): measures the idle
// daemon (after one warm-up sandbox, so lazily made state is in the baseline), creates
// --count idle sandboxes with the default template (--parallel at a time, 429s honoured),
// lets them settle, measures again, checks that every one answers a command, deletes them
// all, and measures once more. Reports host memory per sandbox (MemAvailable before and
// after; other work on the machine adds noise), spaced's RSS per sandbox, its threads, and
// its RSS after the deletes against the idle figure. Bounded: the whole run stops after
// --seconds. Exit status 0 only if every sandbox was created, answered and deleted, and
// (with --max-rss-growth) spaced's RSS came back within that fraction of its idle figure.
//
// With --rates M (create and delete rates, issue 17): after the N idle sandboxes are up,
// --clients clients (16) create M more and then delete them, each client one request at a
// time: POST /v1/sandboxes without wait, then the operation waited for; likewise DELETE.
// (--bulk-delete: the M deletes as one DELETE /v1/sandboxes?label= request instead.)
// Reports creates/s and deletes/s (M over the wall time from the first request to the last
// operation's end) and, per create, the time to the 202 ("accepted") and to running.
// --rounds K: K such create-then-delete rounds (later rounds create right after deletes).
// --min-create-rate, --min-delete-rate and --max-create-p99 turn the figures into a verdict.
// --net internet: every sandbox, idle and timed, is created with internet access (its own
// network namespace, veth and rules), to see what networking adds and how it grows.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <functional>
#include <memory>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench/stats.h"
#include "cli/client.h"
#include "sys/sys.h"

using namespace space;
using namespace space::bench;
using namespace std::chrono_literals;

namespace {

// A "Key:   N kB" line of a /proc file, in bytes (-1 if absent).
int64_t ProcKb(const std::string& file, const std::string& key) {
  auto text = sys::ReadFile(file);
  if (!text) return -1;
  size_t p = text->find("\n" + key + ":");
  if (p == std::string::npos) p = text->rfind(key + ":", 0) == 0 ? 0 : std::string::npos;
  if (p == std::string::npos) return -1;
  p = text->find(':', p) + 1;
  return std::strtoll(text->c_str() + p, nullptr, 10) * 1024;
}

// Where host memory goes, from /proc/meminfo: the kernel's own (slab, stacks, page tables,
// per-cpu) and user pages (anonymous, tmpfs/shmem), to tell which grows per sandbox.
constexpr const char* kMeminfoParts[] = {"AnonPages", "Shmem",     "SUnreclaim", "SReclaimable",
                                         "KernelStack", "PageTables", "Percpu"};
constexpr size_t kParts = sizeof kMeminfoParts / sizeof kMeminfoParts[0];

struct Sample {
  int64_t rss = -1, anon = -1, avail = -1;
  size_t threads = 0, fds = 0;
  int64_t parts[kParts] = {};
};

Sample Measure(const std::string& pid) {
  Sample s;
  s.avail = ProcKb("/proc/meminfo", "MemAvailable");
  for (size_t i = 0; i < kParts; ++i) s.parts[i] = ProcKb("/proc/meminfo", kMeminfoParts[i]);
  if (!pid.empty()) {
    s.rss = ProcKb("/proc/" + pid + "/status", "VmRSS");
    s.anon = ProcKb("/proc/" + pid + "/status", "RssAnon");
    s.threads = sys::CountDirEntries("/proc/" + pid + "/task");
    s.fds = sys::CountDirEntries("/proc/" + pid + "/fd");
  }
  return s;
}

std::string MiB(int64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(b) / (1 << 20));
  return buf;
}
std::string KiB(double b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024);
  return buf;
}

// Runs fn(i) for i in [0, n) on `parallel` threads.
template <class F>
void ForAll(int n, int parallel, F fn) {
  std::atomic<int> next{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < parallel; ++t) {
    ts.emplace_back([&] {
      for (int i = next++; i < n; i = next++) fn(i);
    });
  }
  for (auto& t : ts) t.join();
}

struct Phase {
  int done = 0;
  double seconds = 0;
  std::vector<double> accept_ms, finish_ms;
};

// Waits for the operation unless `state` says it is over already; true if it succeeded
// (else reported through `error`).
bool Succeeded(client::Client& cl, const std::string& op_id, std::string state,
               const std::function<void(const std::string&)>& error) {
  if (state != "succeeded") {
    auto w = cl.WaitOperation(op_id, 300s);
    if (!w) {
      error("wait for " + op_id + ": " + w.error().message);
      return false;
    }
    state = JsonStringOr(*w, "state", "");
    if (state != "succeeded") {
      error(op_id + " " + state + ": " + JsonStringOr(*w, "error_message", ""));
      return false;
    }
  }
  return true;
}

// One request of a phase done: answered after `accepted` ms, over after `finished` ms.
void RecordDone(Phase& ph, std::mutex& mu, double accepted, double finished) {
  std::lock_guard l(mu);
  ++ph.done;
  ph.accept_ms.push_back(accepted);
  ph.finish_ms.push_back(finished);
}

// M creates (or deletes of `ids`) by `clients` clients, one request at a time each.
Phase RatePhase(const std::string& url, const std::string& key, const client::ClientOptions& opts,
                int clients, const Json& create_body, std::vector<std::string>& ids, bool create,
                const std::function<void(const std::string&)>& error) {
  Phase ph;
  std::mutex mu;
  Json body = create_body;
  body["metadata"] = {{"bench", "rates"}};
  const auto t0 = Clock::now();
  ForAll(static_cast<int>(ids.size()), clients, [&](int i) {
    thread_local std::unique_ptr<client::Client> cl;
    if (!cl) cl = std::make_unique<client::Client>(url, key, opts);
    if (!create && ids[i].empty()) return;
    const auto s = Clock::now();
    auto r = create ? cl->CreateSandbox(body) : cl->DeleteSandbox(ids[i]);
    const double accepted = Ms(Clock::now() - s);
    if (!r) return error(std::string(create ? "create: " : "delete: ") + r.error().message);
    const Json* op = JsonField(*r, "operation");
    std::string op_id = op ? JsonStringOr(*op, "id", "") : "";
    std::string state = op ? JsonStringOr(*op, "state", "") : "";
    if (create) {
      const Json* sb = JsonField(*r, "sandbox");
      std::lock_guard l(mu);
      ids[i] = sb ? JsonStringOr(*sb, "id", "") : "";
    }
    if (Succeeded(*cl, op_id, state, error)) RecordDone(ph, mu, accepted, Ms(Clock::now() - s));
  });
  ph.seconds = Ms(Clock::now() - t0) / 1000;
  return ph;
}

// The sandboxes of the rate phase (label bench=rates) deleted by one bulk request; over
// when every delete operation it started has finished (`clients` waiting at a time).
Phase BulkDeletePhase(const std::string& url, const std::string& key, const client::ClientOptions& opts,
                      int clients, const std::function<void(const std::string&)>& error) {
  Phase ph;
  std::mutex mu;
  const auto t0 = Clock::now();
  client::Client bulk(url, key, opts);
  auto r = bulk.DeleteSandboxesByLabel({{"bench", "rates"}});
  if (!r) {
    error("bulk delete: " + r.error().message);
    return ph;
  }
  const double accepted = Ms(Clock::now() - t0);
  const Json* errors = JsonField(*r, "errors");
  if (errors && errors->is_array()) {
    for (const Json& e : *errors) error("bulk delete: " + e.dump());
  }
  const Json* ops = JsonField(*r, "operations");
  const Json none = Json::array();
  const Json& list = ops && ops->is_array() ? *ops : none;
  ForAll(static_cast<int>(list.size()), clients, [&](int i) {
    thread_local std::unique_ptr<client::Client> cl;
    if (!cl) cl = std::make_unique<client::Client>(url, key, opts);
    if (Succeeded(*cl, JsonStringOr(list[i], "id", ""), JsonStringOr(list[i], "state", ""), error))
      RecordDone(ph, mu, accepted, Ms(Clock::now() - t0));
  });
  ph.seconds = Ms(Clock::now() - t0) / 1000;
  return ph;
}

void PrintPhase(const std::string& what, int want, int background, int clients, const Phase& ph) {
  auto a = Summarize(ph.accept_ms), f = Summarize(ph.finish_ms);
  std::printf("%s: %d of %d in %.2f s = %.1f/s (%d clients, %d idle beside); answered p50 %.1f "
              "ms p99 %.1f ms; done p50 %.0f ms p99 %.0f ms max %.0f ms\n",
              what.c_str(), ph.done, want, ph.seconds, ph.seconds > 0 ? ph.done / ph.seconds : 0,
              clients, background, a.p50, a.p99, f.p50, f.p99, f.max);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"density: N idle sandboxes on one node, and what each costs"};
  std::string url, key, data_dir;
  int count = 500, parallel = 8, seconds = 1800, settle_s = 5;
  double max_rss_growth = 0;
  int rates = 0, clients = 16, rounds = 1;
  double min_create_rate = 0, min_delete_rate = 0, max_create_p99 = 0;
  bool bulk_delete = false;
  std::string net_mode = "none";
  app.add_option("--url", url)->required();
  app.add_option("--key", key)->required();
  app.add_option("--data-dir", data_dir, "spaced's data dir (unused; bench/run.sh passes it)");
  app.add_option("--count", count, "idle sandboxes")->check(CLI::Range(1, 10000));
  app.add_option("--parallel", parallel, "requests at once")->check(CLI::Range(1, 64));
  app.add_option("--seconds", seconds, "bound on the whole run")->check(CLI::Range(10, 7200));
  app.add_option("--settle", settle_s, "seconds to wait before measuring")->check(CLI::Range(0, 120));
  app.add_option("--max-rss-growth", max_rss_growth,
                 "fail if spaced's RSS after the deletes exceeds idle by more than this fraction");
  app.add_option("--rates", rates, "then create and delete this many more, --clients at a time")
      ->check(CLI::Range(0, 10000));
  app.add_option("--clients", clients, "concurrent clients of --rates")->check(CLI::Range(1, 64));
  app.add_option("--rounds", rounds, "create and delete the --rates sandboxes this many times")
      ->check(CLI::Range(1, 100));
  app.add_flag("--bulk-delete", bulk_delete,
               "delete the --rates sandboxes with one DELETE /v1/sandboxes?label= request");
  app.add_option("--min-create-rate", min_create_rate, "fail below this many creates/s");
  app.add_option("--min-delete-rate", min_delete_rate, "fail below this many deletes/s");
  app.add_option("--max-create-p99", max_create_p99,
                 "fail if a create's answer (the 202) takes longer than this many ms at p99");
  app.add_option("--net", net_mode, "every sandbox's network mode (internet: each gets a namespace, a veth and rules)")
      ->check(CLI::IsMember({"none", "internet"}));
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress lines as they happen
  const char* pid_env = std::getenv("SPACED_PID");
  const std::string pid = pid_env ? pid_env : "";
  if (pid.empty()) std::fprintf(stderr, "SPACED_PID not set: no figures of spaced itself\n");
  const auto deadline = Clock::now() + std::chrono::seconds(seconds);
  auto left = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  };

  client::ClientOptions opts;
  opts.retry_busy_for = std::chrono::milliseconds{600000};
  client::Client c(url, key, opts);
  Json body = {{"timeout", 0}};
  if (net_mode != "none") body["network"] = {{"mode", net_mode}};
  // Warm-up: the first sandbox makes the template's layer, namespaces, pools, and its
  // command brings in the code that serves one.
  {
    auto sb = c.CreateSandboxAndWait(body, 120s);
    if (!sb) {
      std::fprintf(stderr, "warm-up create: %s\n", sb.error().message.c_str());
      return 1;
    }
    (void)c.Run((*sb)["id"].get<std::string>(), Json{{"cmd", "echo warm"}});
    (void)c.DeleteSandboxAndWait((*sb)["id"].get<std::string>(), 60s);
  }
  std::this_thread::sleep_for(std::chrono::seconds(settle_s));
  const Sample idle = Measure(pid);

  std::mutex mu;
  std::vector<std::string> ids(count);
  std::vector<double> create_ms;
  std::atomic<int> errors{0};
  std::vector<std::string> samples;
  auto error = [&](const std::string& what) {
    ++errors;
    std::lock_guard l(mu);
    if (samples.size() < 5) samples.push_back(what);
  };
  const auto t0 = Clock::now();
  ForAll(count, parallel, [&](int i) {
    client::Client cl(url, key, opts);
    if (left().count() <= 0) return error("out of time before create " + std::to_string(i));
    auto s = Clock::now();
    auto sb = cl.CreateSandboxAndWait(body, std::min<std::chrono::milliseconds>(left(), 300s));
    if (!sb) return error("create: " + sb.error().message);
    std::lock_guard l(mu);
    ids[i] = (*sb)["id"].get<std::string>();
    create_ms.push_back(Ms(Clock::now() - s));
  });
  const double create_s = Ms(Clock::now() - t0) / 1000;
  int created = 0;
  for (const auto& id : ids) created += !id.empty();
  std::printf("created %d of %d idle sandboxes in %.1f s (%d at a time)\n", created, count,
              create_s, parallel);
  std::this_thread::sleep_for(std::chrono::seconds(settle_s));
  const Sample full = Measure(pid);

  bool rates_ok = true;
  for (int round = 1; rates > 0 && round <= rounds; ++round) {
    // Rounds after the first create right after deletes, as a busy node does (what the
    // deleted sandboxes left for new ones, e.g. parked memory cgroups, is taken).
    const std::string nth = round > 1 ? ", round " + std::to_string(round) : "";
    std::vector<std::string> more(rates);
    Phase c = RatePhase(url, key, opts, clients, body, more, true, error);
    PrintPhase("creates" + nth, rates, created, clients, c);
    Phase d = bulk_delete ? BulkDeletePhase(url, key, opts, clients, error)
                          : RatePhase(url, key, opts, clients, body, more, false, error);
    PrintPhase(std::string(bulk_delete ? "deletes (one bulk request)" : "deletes") + nth, rates,
               created, clients, d);
    const double cr = c.seconds > 0 ? c.done / c.seconds : 0, dr = d.seconds > 0 ? d.done / d.seconds : 0;
    const double p99 = Summarize(c.accept_ms).p99;
    if (c.done != rates || d.done != c.done) rates_ok = false;
    if (min_create_rate > 0 && cr < min_create_rate) {
      std::printf("FAIL: %.1f creates/s, below %.1f\n", cr, min_create_rate);
      rates_ok = false;
    }
    if (min_delete_rate > 0 && dr < min_delete_rate) {
      std::printf("FAIL: %.1f deletes/s, below %.1f\n", dr, min_delete_rate);
      rates_ok = false;
    }
    if (max_create_p99 > 0 && p99 > max_create_p99) {
      std::printf("FAIL: create answered in %.1f ms at p99, above %.1f\n", p99, max_create_p99);
      rates_ok = false;
    }
  }

  // Every one answers a command.
  std::atomic<int> answered{0};
  const auto t1 = Clock::now();
  ForAll(count, parallel, [&](int i) {
    if (ids[i].empty() || left().count() <= 0) return;
    client::Client cl(url, key, opts);
    auto r = cl.Run(ids[i], Json{{"cmd", "echo " + std::to_string(i)}});
    if (r && r->exit_code == 0 && r->out == std::to_string(i) + "\n") {
      ++answered;
    } else {
      error("run in " + ids[i] + ": " + (r ? r->out + r->err : r.error().message));
    }
  });
  const double run_s = Ms(Clock::now() - t1) / 1000;
  std::printf("%d of %d answered a command in %.1f s\n", answered.load(), created, run_s);
  const Sample after_run = Measure(pid);

  std::atomic<int> deleted{0};
  const auto t2 = Clock::now();
  ForAll(count, parallel, [&](int i) {
    if (ids[i].empty()) return;
    client::Client cl(url, key, opts);
    auto st = cl.DeleteSandboxAndWait(ids[i], std::max<std::chrono::milliseconds>(
                                                  std::min<std::chrono::milliseconds>(left(), 120s), 30s));
    if (st) {
      ++deleted;
    } else {
      error("delete " + ids[i] + ": " + st.error().message);
    }
  });
  const double delete_s = Ms(Clock::now() - t2) / 1000;
  std::printf("deleted %d in %.1f s\n", deleted.load(), delete_s);
  std::this_thread::sleep_for(std::chrono::seconds(settle_s));
  const Sample gone = Measure(pid);
  auto list = c.ListSandboxes();
  if (!list || !list->empty()) error("sandboxes still listed after the deletes");

  const double n = std::max(created, 1);
  std::printf("\n| | idle | %d idle sandboxes | after a command each | after deleting all |\n",
              created);
  std::printf("|---|---|---|---|---|\n");
  std::printf("| spaced RSS | %s | %s | %s | %s |\n", MiB(idle.rss).c_str(), MiB(full.rss).c_str(),
              MiB(after_run.rss).c_str(), MiB(gone.rss).c_str());
  std::printf("| of it anonymous | %s | %s | %s | %s |\n", MiB(idle.anon).c_str(),
              MiB(full.anon).c_str(), MiB(after_run.anon).c_str(), MiB(gone.anon).c_str());
  std::printf("| spaced threads | %zu | %zu | %zu | %zu |\n", idle.threads, full.threads,
              after_run.threads, gone.threads);
  std::printf("| spaced fds | %zu | %zu | %zu | %zu |\n", idle.fds, full.fds, after_run.fds,
              gone.fds);
  std::printf("| host MemAvailable | %s | %s | %s | %s |\n", MiB(idle.avail).c_str(),
              MiB(full.avail).c_str(), MiB(after_run.avail).c_str(), MiB(gone.avail).c_str());
  std::printf("\nper sandbox: spaced RSS %s (after a command: %s), host memory %s (after a "
              "command: %s)\n",
              KiB((full.rss - idle.rss) / n).c_str(), KiB((after_run.rss - idle.rss) / n).c_str(),
              KiB((idle.avail - full.avail) / n).c_str(),
              KiB((idle.avail - after_run.avail) / n).c_str());
  // Both: with --rates the second also holds what the timed creates and deletes left
  // (e.g. parked memory cgroups).
  auto parts = [&](const char* what, const Sample& s) {
    std::printf("per sandbox, by /proc/meminfo (idle -> %d %s):", created, what);
    for (size_t i = 0; i < kParts; ++i)
      std::printf(" %s %s%s", kMeminfoParts[i], KiB((s.parts[i] - idle.parts[i]) / n).c_str(),
                  i + 1 < kParts ? "," : "\n");
  };
  parts("idle sandboxes", full);
  parts("sandboxes after a command", after_run);
  const double growth = idle.rss > 0 ? static_cast<double>(gone.rss - idle.rss) / idle.rss : 0;
  std::printf("spaced RSS after the deletes: %+.1f %% of idle\n", growth * 100);
  if (!create_ms.empty()) {
    auto st = Summarize(create_ms);
    std::printf("create p50 %.0f ms, p99 %.0f ms\n", st.p50, st.p99);
  }
  for (const auto& s : samples) std::printf("error: %s\n", s.c_str());
  bool ok = rates_ok && errors == 0 && created == count && answered == created && deleted == created;
  if (max_rss_growth > 0 && !pid.empty() && growth > max_rss_growth) {
    std::printf("FAIL: spaced's RSS grew by more than %.0f %%\n", max_rss_growth * 100);
    ok = false;
  }
  std::printf("%s\n", ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}
