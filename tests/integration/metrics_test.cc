// GET /metrics (Prometheus text format, checked by promtool) and a sandbox's figures
// (GET /v1/sandboxes/{id}/metrics) against a real spaced.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <map>
#include <optional>
#include <regex>

#include "tests/integration/harness.h"

namespace space::testing {
namespace {

using namespace std::chrono_literals;

// One sample line: name, labels, value.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

std::vector<Sample> Parse(const std::string& text) {
  std::vector<Sample> out;
  static const std::regex line_re(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$)");
  static const std::regex label_re(R"re(([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)")re");
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.empty() || line[0] == '#') continue;
    std::smatch m;
    if (!std::regex_match(line, m, line_re)) {
      ADD_FAILURE() << "unparsable line: " << line;
      continue;
    }
    Sample s;
    s.name = m[1];
    std::string labels = m[3];
    for (std::sregex_iterator it(labels.begin(), labels.end(), label_re), end; it != end; ++it) {
      s.labels[(*it)[1]] = (*it)[2];
    }
    s.value = m[4] == "+Inf" ? INFINITY : std::stod(m[4]);
    out.push_back(std::move(s));
  }
  return out;
}

// The sum of the samples called `name` whose labels include `want`; -1 if there are none.
double Value(const std::vector<Sample>& all, const std::string& name,
             const std::map<std::string, std::string>& want = {}) {
  double sum = -1;
  for (const auto& s : all) {
    if (s.name != name) continue;
    bool match = true;
    for (const auto& [k, v] : want) {
      auto it = s.labels.find(k);
      if (it == s.labels.end() || it->second != v) match = false;
    }
    if (match) sum = (sum < 0 ? 0 : sum) + s.value;
  }
  return sum;
}

// `promtool check metrics` on the text: its exit code and what it said.
std::pair<int, std::string> Promtool(const std::string& text) {
  auto tmp = sys::TempDir::Create();
  EXPECT_TRUE(tmp);
  const std::string file = tmp->path() + "/metrics.txt";
  EXPECT_TRUE(sys::WriteFileAtomic(file, text));
  auto in = sys::Open(file, O_RDONLY);
  EXPECT_TRUE(in);
  auto r = sys::Run({.argv = {"/usr/bin/promtool", "check", "metrics"}, .stdin_fd = in->get()}, 60000);
  if (!r) return {-1, r.error().message};
  return {r->exit_code, r->out + r->err};
}

class MetricsTest : public SharedDaemonTest<MetricsTest> {
 public:
  static std::vector<std::string> DaemonArgs() { return {"--warm-pool", "base=1"}; }

 protected:
  std::string Metrics(const std::string& query = "") {
    auto r = c().Request("GET", "/metrics" + query);
    EXPECT_TRUE(r) << (r ? "" : r.error().message);
    if (!r) return "";
    EXPECT_EQ(r->status, 200) << r->body;
    auto ct = r->Header("content-type");
    EXPECT_TRUE(ct && ct->find("text/plain; version=0.0.4") == 0) << ct.value_or("(none)");
    return r->body;
  }
};

TEST_F(MetricsTest, PrometheusTextValidatedByPromtool) {
  ASSERT_TRUE(sys::Exists("/usr/bin/promtool")) << "promtool is missing: run scripts/install-deps.sh";
  // The warm pool fills up (its gauge says so); a default create then claims its member.
  double pooled = -1;
  for (int i = 0; i < 600 && pooled < 1; ++i) {
    pooled = Value(Parse(Metrics()), "spaced_warm_pool_sandboxes", {{"template", "base:latest"}});
    if (pooled < 1) std::this_thread::sleep_for(100ms);
  }
  ASSERT_EQ(pooled, 1);
  std::string warm = CreateSandbox(c());
  ASSERT_FALSE(warm.empty());
  // Other limits than a member's: a cold create from the template.
  std::string id = CreateSandbox(c(), {{"limits", {{"cpus", 0.5}}}});
  ASSERT_FALSE(id.empty());
  auto run = c().Run(id, std::vector<std::string>{"sh", "-c", "head -c 12345 /dev/zero; echo err >&2"});
  ASSERT_TRUE(run) << run.error().message;
  ASSERT_EQ(run->out.size(), 12345u);
  // A path no route serves: counted as "unmatched", not under its own name.
  auto nowhere = c().Request("GET", "/v1/no/such/route-xyz");
  ASSERT_TRUE(nowhere);
  EXPECT_EQ(nowhere->status, 404);

  std::string text = Metrics();
  auto [rc, said] = Promtool(text);
  EXPECT_EQ(rc, 0) << said << "\n" << text;
  auto m = Parse(text);

  EXPECT_GE(Value(m, "spaced_sandboxes", {{"state", "running"}, {"runtime", "oci"}}), 2);
  EXPECT_GE(Value(m, "spaced_sandbox_creates_total",
                  {{"runtime", "oci"}, {"source", "warm_pool"}, {"result", "succeeded"}}), 1);
  EXPECT_GE(Value(m, "spaced_sandbox_create_duration_seconds_count",
                  {{"runtime", "oci"}, {"source", "warm_pool"}}), 1);
  EXPECT_GE(Value(m, "spaced_sandbox_creates_total",
                  {{"runtime", "oci"}, {"source", "template"}, {"result", "succeeded"}}), 1);
  EXPECT_GE(Value(m, "spaced_sandbox_create_duration_seconds_count", {{"runtime", "oci"}}), 1);
  EXPECT_GT(Value(m, "spaced_sandbox_create_duration_seconds_sum", {{"runtime", "oci"}}), 0);
  EXPECT_GE(Value(m, "spaced_sandbox_create_duration_seconds_bucket", {{"le", "+Inf"}}), 1);
  EXPECT_GE(Value(m, "spaced_commands_started_total"), 1);
  EXPECT_GE(Value(m, "spaced_command_output_bytes_total", {{"stream", "stdout"}}), 12345);
  EXPECT_GE(Value(m, "spaced_command_output_bytes_total", {{"stream", "stderr"}}), 4);
  EXPECT_EQ(Value(m, "spaced_warm_pool_target_sandboxes", {{"template", "base:latest"}}), 1);
  EXPECT_GE(Value(m, "spaced_warm_pool_sandboxes", {{"template", "base:latest"}}), 0);
  EXPECT_EQ(Value(m, "spaced_http_too_many_requests_total"), 0);
  EXPECT_EQ(Value(m, "spaced_http_insufficient_storage_total"), 0);
  EXPECT_GT(Value(m, "spaced_data_dir_free_bytes"), 0);
  // Requests by route pattern and status: the command start went through the pattern.
  EXPECT_GE(Value(m, "spaced_http_requests_total",
                  {{"method", "POST"}, {"route", "/v1/sandboxes/{id}/commands"}}), 1);
  EXPECT_GE(Value(m, "spaced_http_requests_total",
                  {{"method", "POST"}, {"route", "/v1/sandboxes"}, {"status", "201"}}), 1);
  EXPECT_GE(Value(m, "spaced_http_requests_total", {{"route", "unmatched"}, {"status", "404"}}), 1);
  EXPECT_GE(Value(m, "spaced_http_request_duration_seconds_count", {{"route", "/healthz"}}), 1);
  // Bounded cardinality: no raw path, no sandbox id anywhere without ?sandboxes=1.
  EXPECT_EQ(text.find("route-xyz"), std::string::npos);
  EXPECT_EQ(text.find(id), std::string::npos);
  EXPECT_EQ(text.find(warm), std::string::npos);
  EXPECT_EQ(Value(m, "spaced_sandbox_memory_bytes"), -1);

  // Counters only go up between two scrapes.
  auto m2 = Parse(Metrics());
  EXPECT_GE(Value(m2, "spaced_http_requests_total"), Value(m, "spaced_http_requests_total") + 1);
}

TEST_F(MetricsTest, PerSandboxFiguresInMetricsAndV1AndE2b) {
  std::string id = CreateSandbox(c(), {{"limits", {{"memory_bytes", 256 << 20}, {"cpus", 1}}}});
  ASSERT_FALSE(id.empty());
  // Burn some CPU, write 6 MB to the disk, and hold ~40 MB of memory while we look.
  auto burn = c().Run(id, std::vector<std::string>{
                              "sh", "-c",
                              "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; "
                              "head -c 6000000 /dev/urandom > /root/blob; sync"});
  ASSERT_TRUE(burn) << burn.error().message;
  ASSERT_EQ(burn->exit_code, 0) << burn->err;
  auto hold = c().StartCommand(
      id, {{"argv", {"sh", "-c", "x=$(head -c 40000000 /dev/zero | tr '\\0' a); echo held; sleep 60; echo done"}}});
  ASSERT_TRUE(hold) << hold.error().message;
  const std::string hold_id = (*hold)["id"];
  // Wait until the shell holds its 40 MB.
  std::string said_so;
  for (int i = 0; i < 300 && said_so.find("held") == std::string::npos; ++i) {
    if (auto out = c().ReadOutput(id, hold_id, "stdout", 0)) said_so = out->bytes;
    if (auto err = c().ReadOutput(id, hold_id, "stderr", 0)) said_so += err->bytes;
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_NE(said_so.find("held"), std::string::npos) << said_so;

  std::string text = Metrics("?sandboxes=1");
  auto [rc, said] = Promtool(text);
  EXPECT_EQ(rc, 0) << said << "\n" << text;
  auto m = Parse(text);
  const std::map<std::string, std::string> who = {{"sandbox", id}, {"runtime", "oci"}};
  const double cpu = Value(m, "spaced_sandbox_cpu_seconds_total", who);
  EXPECT_GT(cpu, 0.05);
  EXPECT_GT(Value(m, "spaced_sandbox_memory_bytes", who), 30e6) << said_so;
  EXPECT_EQ(Value(m, "spaced_sandbox_memory_limit_bytes", who), 256 << 20);
  EXPECT_GE(Value(m, "spaced_sandbox_disk_bytes", who), 6e6);
  EXPECT_EQ(Value(m, "spaced_sandbox_cpu_limit_cores", who), 1);

  // The v1 API: the same figures for this sandbox.
  auto v1 = c().Call("GET", "/v1/sandboxes/" + id + "/metrics");
  ASSERT_TRUE(v1) << v1.error().message;
  EXPECT_EQ((*v1)["sandbox_id"], id);
  EXPECT_EQ((*v1)["state"], "running");
  EXPECT_GE((*v1)["cpu_seconds"].get<double>(), cpu);
  EXPECT_GE((*v1)["cpu_used_pct"].get<double>(), 0);
  EXPECT_LE((*v1)["cpu_used_pct"].get<double>(), 100);
  EXPECT_EQ((*v1)["cpu_count"], 1);
  EXPECT_GT((*v1)["memory_bytes"].get<double>(), 30e6);
  EXPECT_EQ((*v1)["memory_limit_bytes"], 256 << 20);
  EXPECT_GE((*v1)["disk_bytes"].get<double>(), 6e6);
  EXPECT_TRUE((*v1)["timestamp"].is_string());

  // The sandbox's own token may read its figures, not the daemon's.
  auto tok = c().MintToken(id);
  ASSERT_TRUE(tok) << tok.error().message;
  client::Client as_sandbox(daemon_->url(), (*tok)["token"]);
  auto mine = as_sandbox.Call("GET", "/v1/sandboxes/" + id + "/metrics");
  EXPECT_TRUE(mine) << mine.error().message;
  auto all = as_sandbox.Request("GET", "/metrics");
  ASSERT_TRUE(all);
  EXPECT_EQ(all->status, 403) << all->body;
  client::Client nobody(daemon_->url(), "");
  auto anon = nobody.Request("GET", "/metrics");
  ASSERT_TRUE(anon);
  EXPECT_EQ(anon->status, 401) << anon->body;

  // E2B's GET /sandboxes/{id}/metrics (the SDK's getMetrics): one sample, same figures.
  // (E2B authenticates with X-API-KEY; curl sends it.)
  auto e2b = sys::Run({.argv = {"/usr/bin/curl", "-sS", "-f", "-H", "X-API-KEY: " + daemon_->api_key(),
                                daemon_->url() + "/sandboxes/" + id + "/metrics"}},
                      30000);
  ASSERT_TRUE(e2b) << e2b.error().message;
  ASSERT_EQ(e2b->exit_code, 0) << e2b->err;
  auto samples = ParseJson(e2b->out);
  ASSERT_TRUE(samples && samples->is_array() && samples->size() == 1) << e2b->out;
  const Json& s = (*samples)[0];
  EXPECT_EQ(s["cpuCount"], 1);
  EXPECT_GT(s["memUsed"].get<double>(), 30e6);
  EXPECT_EQ(s["memTotal"], 256 << 20);
  EXPECT_GE(s["diskUsed"].get<double>(), 6e6);
  EXPECT_TRUE(s["timestamp"].is_string());

  // Errors: an unknown sandbox, and a bad ?sandboxes=.
  auto missing = c().Request("GET", "/v1/sandboxes/sb-doesnotexist00/metrics");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  auto bad = c().Request("GET", "/metrics?sandboxes=maybe");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  (void)c().Signal(id, hold_id, "KILL");
}

// 429 (the concurrent request limit) and 507 (the disk reserve) are counted.
class MetricsRefusalTest : public SharedDaemonTest<MetricsRefusalTest> {
 public:
  static std::vector<std::string> DaemonArgs() {
    return {"--max-inflight", "2", "--min-free-bytes", "1000000000000000"};
  }
};

TEST_F(MetricsRefusalTest, TooManyRequestsAndInsufficientStorageAreCounted) {
  client::ClientOptions no_retry;
  no_retry.retry_busy_for = 0ms;
  client::Client c0(daemon_->url(), daemon_->api_key(), no_retry);
  // 507: no create fits below a reserve of 1 PB.
  auto created = c0.Request("POST", "/v1/sandboxes", "{}", "application/json");
  ASSERT_TRUE(created);
  EXPECT_EQ(created->status, 507) << created->body;
  // 429: two requests whose bodies never come hold both request slots; a third is refused.
  const std::string url = daemon_->url();
  const int port = std::stoi(url.substr(url.rfind(':') + 1));
  std::vector<sys::UniqueFd> holders;
  for (int i = 0; i < 2; ++i) {
    sys::UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    const std::string head = "POST /v1/keys HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                             daemon_->api_key() +
                             "\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n";
    ASSERT_TRUE(sys::WriteAll(fd.get(), head));
    holders.push_back(std::move(fd));
  }
  int refused = 0;
  for (int i = 0; i < 40 && refused == 0; ++i) {
    std::this_thread::sleep_for(50ms);
    auto r = c0.Request("GET", "/v1/whoami");
    if (r && r->status == 429) refused++;
  }
  EXPECT_EQ(refused, 1);
  holders.clear();  // the slots are released as their connections close
  std::optional<client::HttpResponse> r;
  for (int i = 0; i < 100; ++i) {
    auto got = c0.Request("GET", "/metrics");
    ASSERT_TRUE(got);
    if (got->status != 429) {
      r = *got;
      break;
    }
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  auto m = Parse(r->body);
  EXPECT_EQ(Value(m, "spaced_http_insufficient_storage_total"), 1);
  // The /metrics requests refused while the slots were being released count too.
  EXPECT_GE(Value(m, "spaced_http_too_many_requests_total"), refused);
  EXPECT_EQ(Value(m, "spaced_http_requests_total", {{"route", "/v1/sandboxes"}, {"status", "507"}}), 1);
  EXPECT_EQ(Value(m, "spaced_data_dir_low"), 1);
  auto [rc, said] = Promtool(r->body);
  EXPECT_EQ(rc, 0) << said;
}

}  // namespace
}  // namespace space::testing
