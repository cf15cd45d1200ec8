// spaced: wiring only — parses flags, opens the store, storage and runtimes, recovers,
// and serves the HTTP API until SIGINT/SIGTERM. Sandboxes keep running after it exits.
#include <malloc.h>
#include <signal.h>
#include <sodium.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <cstdio>
#include <climits>
#include <cstring>
#include <filesystem>

#include "api/api.h"
#include "auth/auth.h"
#include "core/core.h"
#include "daemon/cluster_role.h"
#include "daemon/datadir_lock.h"
#include "daemon/tls_setup.h"
#include "net/net.h"
#include "runtime/microvm/microvm.h"
#include "runtime/oci/oci.h"
#include "runtime/plugin/plugin.h"
#include "storage/storage.h"
#include "store/store.h"
#include "sys/cgroups.h"
#include "sys/sys.h"

namespace {

using namespace space;

Result<std::string> LoadOrCreateApiKey(const std::string& data_dir, std::string path) {
  if (path.empty()) path = data_dir + "/api-key";
  if (sys::Exists(path)) {
    auto key = sys::ReadFile(path);
    if (!key) return key;
    while (!key->empty() && (key->back() == '\n' || key->back() == ' ')) key->pop_back();
    if (key->size() < 16) return Fail(Errc::kInvalidArgument, path + " holds a key shorter than 16 bytes");
    return key;
  }
  unsigned char raw[24];
  randombytes_buf(raw, sizeof raw);
  std::string key = "sk-" + HexEncode(std::string_view(reinterpret_cast<char*>(raw), sizeof raw));
  SPACE_TRY(sys::WriteFileAtomic(path, key + "\n", 0600));
  return key;
}

// The token signing keys, DATA_DIR/token-keys (mode 0600), created on first start.
// --rotate-token-key adds a key that signs from now on; --drop-token-key retires one (its
// tokens stop verifying). Both rewrite the file before spaced serves.
Result<auth::SigningKeys> LoadSigningKeys(const std::string& data_dir, std::string path, bool rotate,
                                          const std::vector<std::string>& drop) {
  if (path.empty()) path = data_dir + "/token-keys";
  auth::SigningKeys keys;
  bool changed = false;
  if (sys::Exists(path)) {
    auto text = sys::ReadFile(path);
    if (!text) return tl::unexpected(text.error());
    auto parsed = auth::SigningKeys::Parse(*text);
    if (!parsed) return tl::unexpected(parsed.error().Wrap(path));
    keys = std::move(*parsed);
  } else {
    keys = auth::SigningKeys::Generate();
    changed = true;
  }
  if (rotate) {
    std::string id = keys.Rotate();
    spdlog::info("token signing key rotated: {} signs from now on", id);
    changed = true;
  }
  for (const auto& id : drop) {
    SPACE_TRY_WRAP(keys.Drop(id), "--drop-token-key");
    spdlog::info("token signing key {} dropped: its tokens no longer verify", id);
    changed = true;
  }
  if (changed) SPACE_TRY(sys::WriteFileAtomic(path, keys.Serialize(), 0600));
  return keys;
}

int Fatal(const std::string& what, const Error& e) {
  spdlog::critical("{}: {}", what, e.message);
  std::fprintf(stderr, "spaced: %s: %s\n", what.c_str(), e.message.c_str());
  return 1;
}

}  // namespace

// The web console's files (docs/console.md), built into share/space/console beside the
// binary: path under /ui ("/index.html") -> bytes. Empty when it was not built.
std::map<std::string, std::string> LoadConsoleAssets(const std::string& dir) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(dir + "/index.html", ec)) return out;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    std::string rel = it->path().lexically_relative(dir).generic_string();
    if (auto text = sys::ReadFile(it->path().string())) out["/" + rel] = std::move(*text);
  }
  return out;
}

// glibc gives threads that allocate at the same time arenas of their own, up to 8 per core.
// spaced's ~30 threads spread the short-lived allocations of creates and deletes over 16
// arenas on 2 cores, and pages there that still hold one live chunk stay resident after
// the sandboxes are gone: 200 sandboxes left +2.7 MB of anonymous RSS with the default,
// +1.8 MB with one arena per core (docs/benchmarks-density.md). MALLOC_ARENA_MAX in the
// environment still wins.
static void LimitMallocArenas() {
  if (std::getenv("MALLOC_ARENA_MAX")) return;
  long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  ::mallopt(M_ARENA_MAX, static_cast<int>(std::max(2L, cores)));
}

// glibc raises its thresholds as the program runs: freeing a chunk it had mapped of its own
// (any allocation over 128 KiB at first, e.g. the 2.9 MB copy of the agent binary) lifts the
// size served by mmap to that chunk's size and the free space an arena keeps at its top to
// twice that. malloc_trim does not shrink the top of a thread's arena (only free() does,
// past the trim threshold), so after sandboxes came and went the second arena often kept
// ~6 MB: spaced's RSS after deleting 1,000 sandboxes was +34-35 % of idle in three runs of
// four. Fixed thresholds keep the 1 MiB output chunks in the arenas (no mmap per chunk:
// output throughput unchanged) and trim any top beyond 1 MiB: +5.8 and +6.0 % after 1,000
// (docs/benchmarks-density.md). MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_ or a
// threshold in GLIBC_TUNABLES still win.
static void FixMallocThresholds() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") || std::getenv("MALLOC_TRIM_THRESHOLD_") ||
      (tunables && std::strstr(tunables, "threshold")))
    return;
  ::mallopt(M_MMAP_THRESHOLD, 2 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 1 << 20);
}

// glibc also keeps a cache of freed chunks per thread (tcache: up to 7 of each of 64
// sizes), which malloc_trim does not empty; across spaced's ~30 threads those chunks pin
// pages all over the heap after a burst of creates and deletes. After 1,000 sandboxes
// created and deleted, spaced's RSS stayed +31 % above idle with them and +4.4–5.6 %
// without; create and delete rates did not move (docs/benchmarks-density.md). Only a
// tunable read by the dynamic loader turns them off, so spaced executes itself once more
// with GLIBC_TUNABLES=glibc.malloc.tcache_count=0 (same pid and arguments), then drops
// the variable so the programs it starts (crun, QEMU, ...) keep glibc's defaults. A
// GLIBC_TUNABLES already in the environment wins.
static void NoMallocThreadCaches(char** argv) {
  constexpr const char* kTunables = "glibc.malloc.tcache_count=0";
  constexpr const char* kMarker = "SPACED_GLIBC_TUNABLES_SET";
  if (std::getenv(kMarker)) {
    ::unsetenv(kMarker);
    if (const char* t = std::getenv("GLIBC_TUNABLES"); t && std::strcmp(t, kTunables) == 0)
      ::unsetenv("GLIBC_TUNABLES");
    return;
  }
  if (std::getenv("GLIBC_TUNABLES")) return;
  ::setenv("GLIBC_TUNABLES", kTunables, 1);
  ::setenv(kMarker, "1", 1);
  // By its own path, not /proc/self/exe: the process name (comm) comes from the path's last
  // part, and `pgrep spaced`, top and the like should keep finding "spaced", not "exe".
  char self[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = '\0';
    if (::access(self, X_OK) == 0) ::execv(self, argv);
  }
  ::execv("/proc/self/exe", argv);
  // Not fatal: run with glibc's defaults.
  ::unsetenv("GLIBC_TUNABLES");
  ::unsetenv(kMarker);
}

int main(int argc, char** argv) {
  NoMallocThreadCaches(argv);
  LimitMallocArenas();
  FixMallocThresholds();
  CLI::App app{"spaced — the SPACE sandbox daemon"};
  std::string listen = "127.0.0.1:7070";
  std::string data_dir = "/var/lib/space";
  std::string oci_binary = "crun";
  std::string agent_binary;
  std::string storage_kind = "auto";
  std::string busybox = "/bin/busybox";
  std::string log_level = "info";
  int64_t max_file_bytes = 1ll << 30;
  bool no_userns = false;
  bool no_cgroup_favordynmods = false;
  runtime::OciOptions oci;
  std::vector<std::string> warm_pools;
  std::string crash_point;
  std::string fail_point;
  std::string pause_point;
  int max_inflight = 1024;
  int max_creating = 32;
  int job_workers = 4;
  bool no_auth = false, behind_tls_proxy = false, rotate_token_key = false;
  std::vector<std::string> drop_token_keys;
  int64_t token_ttl_s = 24 * 3600;
  std::string default_runtime = "oci";
  std::string default_template = "base:latest";
  std::string template_cache = core::Config{}.template_cache_dir;
  std::string builtin_templates;
  for (const char* rel : {"/../share/space/templates", "/../../templates"}) {
    std::string d = sys::SelfExeDir() + rel;
    if (builtin_templates.empty() && ::access((d + "/python/Spacefile").c_str(), R_OK) == 0)
      builtin_templates = d;
  }
  std::vector<std::string> prepare_templates;
  std::vector<std::string> mcp_origins;
  std::string sandbox_domain = "localhost";
  runtime::MicrovmOptions mvm;
  std::string guest_dir = sys::SelfExeDir() + "/../share/space/microvm";
  mvm.kernel = guest_dir + "/vmlinux";
  mvm.initrd = guest_dir + "/initrd.cpio";
  bool no_template_snapshots = false;
  core::Config guard_defaults;
  int64_t max_output_bytes = guard_defaults.max_output_bytes;
  int64_t default_disk_bytes = guard_defaults.default_disk_bytes;
  int64_t min_free_bytes = -1, max_memory_commit = -1;
  int64_t output_retention_s = 0, output_retention_bytes = 0;
  // Sizes: plain byte counts, or with a unit (512M, 10G; K/M/G/T are powers of 1024).
  auto size = CLI::AsSizeValue(false);
  app.add_option("--max-output-bytes", max_output_bytes,
                 "stored output per sandbox unless its limits.output_bytes says otherwise; "
                 "beyond it commands are held (0 = unlimited)")
      ->capture_default_str()->transform(size);
  app.add_option("--default-disk-bytes", default_disk_bytes,
                 "disk of a sandbox that asks for none (0 = unlimited)")
      ->capture_default_str()->transform(size);
  app.add_option("--min-free-bytes", min_free_bytes,
                 "free space kept in the data dir's filesystem: below it creates, snapshots, "
                 "forks and builds get 507 and output is held (default: max(2G, 5%))")
      ->transform(size);
  app.add_option("--max-memory-commit", max_memory_commit,
                 "sum of sandboxes' memory limits beyond which creates get 507 "
                 "(default: RAM x 1.5; 0 = no limit)")
      ->transform(size);
  app.add_option("--output-retention", output_retention_s,
                 "delete finished commands' output after this many seconds (0 = keep)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--output-retention-bytes", output_retention_bytes,
                 "per sandbox, delete finished commands' output, oldest first, beyond this "
                 "size (0 = no budget)")
      ->capture_default_str()->transform(size);
  app.add_option("--default-runtime", default_runtime, "runtime of sandboxes that name none (oci, microvm, or a plugin's name)")
      ->capture_default_str();
  app.add_option("--default-template", default_template,
                 "template of sandboxes that name none")->capture_default_str();
  app.add_option("--template-cache", template_cache,
                 "cache of built built-in templates, shared by data dirs (\"\" = none)")
      ->capture_default_str();
  app.add_option("--builtin-templates", builtin_templates,
                 "directory of the built-in templates' Spacefiles (default: shipped beside spaced)")
      ->capture_default_str();
  app.add_option("--prepare-template", prepare_templates,
                 "build (or import from the cache) this built-in template at start, its progress "
                 "in the log (repeatable: python, code-interpreter)");
  app.add_option("--mcp-allow-origin", mcp_origins,
                 "a browser origin (scheme://host[:port], exact) allowed to use POST /mcp besides "
                 "loopback (repeatable)");
  app.add_option("--microvm-kernel", mvm.kernel, "microVM guest kernel (vmlinux)")->capture_default_str();
  app.add_option("--microvm-initrd", mvm.initrd, "microVM initramfs with space-agent")->capture_default_str();
  app.add_option("--microvm-accel", mvm.accel, "auto (probe KVM, else TCG), kvm or tcg")->capture_default_str();
  app.add_option("--microvm-boot-timeout-ms", mvm.boot_timeout_ms, "QEMU start -> guest agent up")
      ->capture_default_str();
  app.add_flag("--no-microvm-template-snapshots", no_template_snapshots,
               "boot every microVM instead of restoring a per-template snapshot");
  app.add_option("--microvm-restore-pool", mvm.restore_pool,
                 "restored microVMs kept stopped and ready per template snapshot (0: none)")
      ->capture_default_str()
      ->check(CLI::Range(0, 16));
  app.add_option("--listen", listen, "address:port to serve the API on")->capture_default_str();
  app.add_option("--data-dir", data_dir, "where state, templates and sandboxes live")
      ->capture_default_str();
  app.add_option("--oci-runtime", oci_binary, "OCI runtime binary (crun or runc)")
      ->capture_default_str();
  app.add_option("--agent-binary", agent_binary, "space-agent to run as PID 1 (default: beside spaced)");
  app.add_option("--storage", storage_kind, "storage driver: auto, btrfs or overlay")
      ->capture_default_str();
  app.add_option("--busybox", busybox, "static busybox for the built-in base template")
      ->capture_default_str();
  app.add_option("--max-file-bytes", max_file_bytes, "largest file upload")->capture_default_str();
  app.add_flag("--no-userns", no_userns, "run sandboxes without a user namespace");
  app.add_flag("--no-cgroup-favordynmods", no_cgroup_favordynmods,
               "leave the host's cgroup2 favordynmods as it is (default: turned on, so a "
               "sandbox's start does not wait for an RCU grace period)");
  app.add_option("--parked-memory-cgroups", oci.parked_memory_cgroups,
                 "memory cgroups of deleted sandboxes kept for new ones (crun, cgroup v1; 0: none)")
      ->capture_default_str()->check(CLI::Range(0, 100000));
  app.add_option("--max-inflight", max_inflight,
                 "requests served at once; beyond it clients get 429 + Retry-After (0 = no limit)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--max-creating", max_creating,
                 "sandbox creations in progress at once; beyond it 429 + Retry-After (0 = no limit)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--job-workers", job_workers,
                 "operations (creates, deletes, snapshots, ...) carried out at once")
      ->capture_default_str()->check(CLI::Range(1, 256));
  // Test-only: exit abruptly at a named point of an operation (crash-recovery tests).
  app.add_option("--crash-at", crash_point)->group("");
  // Test-only: fail an operation at a named point (failure-path tests).
  app.add_option("--fail-at", fail_point)->group("");
  // Test-only: wait 2 s at a named point of an operation (tests of what readers see then).
  app.add_option("--pause-at", pause_point)->group("");
  app.add_option("--warm-pool", warm_pools,
                 "keep N started sandboxes of a template ready: TEMPLATE=N (repeatable)");
  app.add_flag("--no-auth", no_auth,
               "serve without authentication: every request acts as the operator "
               "(refused on non-loopback addresses)");
  app.add_flag("--behind-tls-proxy", behind_tls_proxy,
               "a TLS-terminating proxy fronts spaced (silences the plain-HTTP warning)");
  // HTTPS on the listen port itself, beside plain HTTP (docs/tls.md).
  daemon::TlsFlags tls_flags;
  app.add_option("--tls-cert", tls_flags.cert_file,
                 "serve HTTPS too (same port) with this certificate chain, PEM, the server's own first");
  app.add_option("--tls-key", tls_flags.key_file, "the private key of --tls-cert, PEM, unencrypted");
  app.add_flag("--tls-self-signed", tls_flags.self_signed,
               "serve HTTPS too (same port) with a CA of spaced's own, made once in DATA_DIR/tls "
               "(clients trust DATA_DIR/tls/ca.pem)");
  app.add_flag("--rotate-token-key", rotate_token_key,
               "add a new token signing key at start-up; older keys still verify");
  app.add_option("--drop-token-key", drop_token_keys,
                 "retire a token signing key by id at start-up (repeatable); its tokens die");
  app.add_option("--sandbox-domain", sandbox_domain,
                 "requests to spaced's port with Host {port}-{sandbox_id}.DOMAIN go to that port "
                 "inside the sandbox (*.localhost resolves to loopback)")
      ->capture_default_str()
      ->check([](const std::string& d) -> std::string {
        if (d.empty() || d.size() > 200 || d.front() == '.' || d.back() == '.') return "a DNS name such as localhost";
        for (char c : d) {
          if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.')) return "a DNS name such as localhost";
        }
        return "";
      });
  app.add_option("--token-ttl", token_ttl_s, "lifetime of sandbox and attach tokens, seconds")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{30} * 24 * 3600));
  std::string dns_upstream, egress_ca_file, sandbox_subnet = "10.213.0.0/16";
  std::vector<std::string> egress_allow_private, egress_presets;
  app.add_option("--dns-upstream", dns_upstream,
                 "resolver sandboxes' DNS queries go to, ADDR[:PORT] (default: the host's, from "
                 "/etc/resolv.conf)");
  app.add_option("--egress-ca-file", egress_ca_file,
                 "extra CA certificates (PEM) trusted for upstream TLS the egress proxy terminates");
  app.add_option("--egress-allow-private", egress_allow_private,
                 "open a private range (CIDR) to sandboxes' egress, e.g. a corporate mirror (repeatable)")
      ->allow_extra_args(false);
  app.add_option("--egress-preset", egress_presets,
                 "define or extend an allow_out preset: NAME=DOMAIN[,DOMAIN...] (repeatable)")
      ->allow_extra_args(false);
  app.add_option("--sandbox-subnet", sandbox_subnet,
                 "IPv4 range for networked sandboxes' addresses (one /31 each)")
      ->capture_default_str();
  std::vector<std::string> plugin_dirs;
  app.add_option("--runtime-plugin-dir", plugin_dirs,
                 "directory of runtime plugin executables, space-runtime/v1 (repeatable; "
                 "default DATA_DIR/plugins/runtime; the shipped plugins are always found)")
      ->allow_extra_args(false);
  // Cluster (docs/cluster.md).
  daemon::ClusterFlags cluster;
  std::string etcd_list;
  std::string api_key_file, token_keys_file;
  app.add_option("--role", cluster.role, "single (one machine), node (a cluster's machine) or gateway")
      ->capture_default_str();
  app.add_option("--etcd", etcd_list, "etcd endpoints of the cluster, comma-separated (http://host:2379,...)");
  app.add_option("--cluster-prefix", cluster.prefix, "key prefix of the cluster in etcd")->capture_default_str();
  app.add_option("--node-name", cluster.node_name, "this node's name in the cluster (default: the host name)");
  app.add_option("--advertise", cluster.advertise, "host:port gateways dial to reach this node (default: --listen)");
  app.add_option("--node-label", cluster.node_labels, "key=value label placement can ask for (repeatable)");
  app.add_option("--lease-ttl", cluster.lease_ttl_s, "seconds a node stays registered without renewing")
      ->capture_default_str();
  app.add_option("--lost-after", cluster.lost_after_s,
                 "gateway: seconds after which a sandbox whose node is gone is marked lost")
      ->capture_default_str();
  app.add_option("--api-key-file", api_key_file, "the operator key file (default: DATA_DIR/api-key; a cluster's nodes share one)");
  app.add_option("--token-keys-file", token_keys_file,
                 "the token signing keys (default: DATA_DIR/token-keys; a cluster's nodes share them)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  spdlog::set_level(spdlog::level::from_str(log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  if (sodium_init() < 0) return Fatal("init", Error{Errc::kInternal, 0, "libsodium"});

  size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return Fatal("--listen", Error{Errc::kInvalidArgument, 0, "want ADDRESS:PORT"});
  std::string address = listen.substr(0, colon);
  int port = std::atoi(listen.c_str() + colon + 1);
  if (port < 0 || port > 65535) return Fatal("--listen", Error{Errc::kInvalidArgument, 0, "bad port"});
  if (address.size() > 2 && address.front() == '[') address = address.substr(1, address.size() - 2);
  if (auto st = daemon::ValidateTlsFlags(tls_flags); !st) return Fatal("TLS", st.error());
  // With TLS of its own, spaced needs no proxy in front for keys to cross the network safely.
  auto policy = auth::CheckListenPolicy(address, no_auth, behind_tls_proxy || tls_flags.any());
  if (!policy) return Fatal("--listen", policy.error());
  for (const auto& w : *policy) {
    spdlog::warn("{}", w);
    std::fprintf(stderr, "spaced: WARNING: %s\n", w.c_str());
  }

  // Block the stop signals before any thread starts, so sigwait() below gets them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  signal(SIGPIPE, SIG_IGN);
  // A descriptor per running sandbox: a shell's soft limit of 1,024 would stop creates at
  // about a thousand.
  spdlog::debug("open files: up to {}", sys::RaiseOpenFileLimit());

  for (size_t at = 0; at < etcd_list.size();) {
    size_t comma = etcd_list.find(',', at);
    if (comma == std::string::npos) comma = etcd_list.size();
    if (comma > at) cluster.etcd.push_back(etcd_list.substr(at, comma - at));
    at = comma + 1;
  }
  if (auto st = daemon::ValidateClusterFlags(cluster, listen); !st) return Fatal("cluster", st.error());
  // A gateway keeps no state: no data dir, runtimes or store.
  if (cluster.role == "gateway") {
    if (tls_flags.any())
      return Fatal("TLS", Error{Errc::kInvalidArgument, 0,
                                "--tls-* is not served by a gateway yet: put a TLS-terminating proxy in "
                                "front of it (docs/tls.md)"});
    return daemon::RunGateway(cluster, address, port, sandbox_domain, &stop);
  }

  if (auto st = sys::MkdirAll(data_dir, 0711); !st) return Fatal("data dir", st.error());
  auto abs = sys::RealPath(data_dir);
  if (!abs) return Fatal("data dir", abs.error());
  data_dir = *abs;
  // Before anything else touches the data dir: a second spaced must not run recovery
  // against live state or take over the first one's agent connections.
  auto dir_lock = daemon::LockDataDir(data_dir);
  if (!dir_lock) return Fatal("data dir", dir_lock.error());
  // Searchable, not listable: the sandboxes' unprivileged root must reach its files below.
  ::chmod(data_dir.c_str(), 0711);
  if (agent_binary.empty()) agent_binary = sys::SelfExeDir() + "/space-agent";

  // Sandboxes run the agent from a copy inside the data dir: the build tree may sit below a
  // directory the sandboxes' unprivileged root cannot traverse, and a rebuild must not
  // swap the binary under running sandboxes.
  {
    auto bin = sys::ReadFile(agent_binary);
    if (!bin) return Fatal("agent binary", bin.error());
    std::string copy = data_dir + "/bin/space-agent";
    auto old = sys::ReadFile(copy);
    if (!old || *old != *bin) {
      if (auto st = sys::MkdirAll(data_dir + "/bin", 0755); !st) return Fatal("agent copy", st.error());
      ::chmod((data_dir + "/bin").c_str(), 0755);
      if (auto st = sys::WriteFileAtomic(copy, *bin, 0755); !st) return Fatal("agent copy", st.error());
    }
    agent_binary = copy;
  }

  // Before the slow start-up: bad certificate files stop spaced at once.
  auto tls = daemon::SetupTls(tls_flags, data_dir, address, sandbox_domain);
  if (!tls) return Fatal("TLS", tls.error());

  auto key = LoadOrCreateApiKey(data_dir, api_key_file);
  if (!key) return Fatal("api key", key.error());
  auto signing = LoadSigningKeys(data_dir, token_keys_file, rotate_token_key, drop_token_keys);
  if (!signing) return Fatal("token signing keys", signing.error());
  auto store = store::Store::Open(data_dir + "/space.db");
  if (!store) return Fatal("open database", store.error());
  auto storage = storage::Driver::Open(data_dir, storage_kind,
                                       {.spare_dirs = runtime::OciRootMountPoints()});
  if (!storage) return Fatal("open storage", storage.error());
  spdlog::info("storage driver: {}", (*storage)->Name());

  // Before the runtimes: each start moves processes into new cgroups (docs/design-notes.md).
  if (!no_cgroup_favordynmods) {
    auto favored = sys::SetCgroupFavorDynmods(true);
    if (!favored)
      spdlog::warn("cgroup2 favordynmods not turned on ({}): each sandbox start may wait for "
                   "an RCU grace period", favored.error().message);
    else if (!*favored)
      spdlog::info("cgroup2 favordynmods is off (no cgroup2 hierarchy, or not the host's "
                   "cgroup namespace): each sandbox start may wait for an RCU grace period");
  }
  oci.state_dir = data_dir + "/runtime/oci";
  oci.runtime_binary = oci_binary;
  oci.agent_binary = agent_binary;
  oci.user_namespace = !no_userns;
  auto oci_rt = runtime::CreateOciRuntime(oci);
  if (!oci_rt) return Fatal("oci runtime", oci_rt.error());
  std::map<std::string, std::unique_ptr<runtime::Runtime>> runtimes;
  runtimes["oci"] = std::move(*oci_rt);
  mvm.state_dir = data_dir + "/runtime/microvm";
  mvm.template_uid_shift = no_userns ? 0 : storage::kDefaultUidShift;
  mvm.template_snapshots = !no_template_snapshots;
  if (auto rp = sys::RealPath(mvm.kernel)) mvm.kernel = *rp;
  if (auto rp = sys::RealPath(mvm.initrd)) mvm.initrd = *rp;
  auto mvm_rt = runtime::CreateMicrovmRuntime(mvm);
  if (!mvm_rt) return Fatal("microvm runtime", mvm_rt.error());
  runtimes["microvm"] = std::move(*mvm_rt);
  // Runtime plugins (docs/runtime-plugins.md): the given dirs, then the shipped ones.
  if (plugin_dirs.empty()) plugin_dirs.push_back(data_dir + "/plugins/runtime");
  plugin_dirs.push_back(sys::SelfExeDir() + "/../share/space/plugins/runtime");
  for (const auto& exe : runtime::FindPlugins(plugin_dirs)) {
    runtime::PluginOptions po;
    po.name = exe.substr(exe.find_last_of('/') + 1);
    if (runtimes.count(po.name)) {
      spdlog::warn("runtime plugin {} ignored: a built-in runtime has that name", exe);
      continue;
    }
    auto rp = sys::RealPath(exe);
    po.executable = rp ? *rp : exe;
    po.state_dir = data_dir + "/runtime/" + po.name;
    po.handle_dir = data_dir + "/runtime-plugins/" + po.name;
    po.agent_binary = agent_binary;
    po.uid_shift = no_userns ? 0 : storage::kDefaultUidShift;
    auto prt = runtime::CreatePluginRuntime(po);
    if (!prt) return Fatal("runtime plugin " + exe, prt.error());
    runtimes[po.name] = std::move(*prt);
  }

  net::Options nopts;
  nopts.state_dir = data_dir + "/net";
  nopts.tag = net::TagForDataDir(data_dir);
  nopts.dns_upstream = dns_upstream;
  nopts.egress_ca_file = egress_ca_file;
  {
    auto subnet = net::ParseCidr(sandbox_subnet);
    if (!subnet) return Fatal("--sandbox-subnet", subnet.error());
    nopts.subnet = *subnet;
    for (const auto& c : egress_allow_private) {
      auto cidr = net::ParseCidr(c);
      if (!cidr) return Fatal("--egress-allow-private", cidr.error());
      nopts.allow_private.push_back(*cidr);
    }
  }
  nopts.presets = net::ResolvePresets(egress_presets);
  auto network = net::Network::Create(nopts);
  if (!network) return Fatal("network", network.error());

  core::Config config;
  config.data_dir = data_dir;
  config.max_file_bytes = max_file_bytes;
  config.uid_shift = no_userns ? 0 : storage::kDefaultUidShift;
  config.crash_point = crash_point;
  config.fail_point = fail_point;
  config.pause_point = pause_point;
  config.max_creating = max_creating;
  config.worker_threads = job_workers;
  config.default_runtime = default_runtime;
  config.default_template = default_template.find(':') == std::string::npos
                                ? default_template + ":latest"
                                : default_template;
  config.template_cache_dir = template_cache;
  config.builtin_templates_dir = builtin_templates;
  config.max_output_bytes = max_output_bytes;
  config.default_disk_bytes = default_disk_bytes;
  config.min_free_bytes = min_free_bytes;
  config.max_memory_commit = max_memory_commit;
  config.output_retention_s = output_retention_s;
  config.output_retention_bytes = output_retention_bytes;
  for (const auto& wp : warm_pools) {
    size_t eq = wp.rfind('=');
    int n = eq == std::string::npos ? -1 : std::atoi(wp.c_str() + eq + 1);
    if (n < 0 || n > 256) return Fatal("--warm-pool", Error{Errc::kInvalidArgument, 0, "want TEMPLATE=N (0..256): " + wp});
    std::string ref = wp.substr(0, eq);
    if (ref.find(':') == std::string::npos) ref += ":latest";
    config.warm_pools[ref] = n;
  }
  std::unique_ptr<daemon::NodeRole> node_role;
  if (cluster.role == "node") {
    node_role = std::make_unique<daemon::NodeRole>(cluster);
    node_role->Hook(config, *key);
  }
  auto platform = core::Platform::Create(config, std::move(*store), std::move(*storage),
                                         std::move(runtimes), std::move(*network));
  if (!platform) return Fatal("start", platform.error());
  // The key file is the first operator key, named "default" (docs/security.md).
  if (auto st = (*platform)->ImportApiKey("default", *key); !st) {
    if (st.error().code != Errc::kPermissionDenied) return Fatal("api key", st.error());
    spdlog::warn("{}/api-key: {}", data_dir, st.error().message);
  }
  if (auto st = (*platform)->EnsureBaseTemplate(busybox); !st) return Fatal("base template", st.error());
  if (auto st = (*platform)->Recover(); !st) return Fatal("recovery", st.error());
  (*platform)->FillPools();
  for (const auto& t : prepare_templates) {
    auto op = (*platform)->EnsureBuiltinTemplate(t, true);
    if (!op) return Fatal("--prepare-template " + t, op.error());
    spdlog::info("template {}: operation {} prepares it (progress below; GET /v1/operations/{})", t,
                 op->id, op->id);
  }

  if (node_role) {
    if (auto st = node_role->StartJoining(platform->get()); !st) return Fatal("cluster", st.error());
  }

  api::ServerOptions sopts;
  sopts.address = address;
  sopts.port = static_cast<uint16_t>(port);
  sopts.max_inflight = max_inflight;
  sopts.signing_keys = std::make_shared<const auth::SigningKeys>(std::move(*signing));
  sopts.no_auth = no_auth;
  sopts.token_ttl_s = token_ttl_s;
  sopts.sandbox_domain = sandbox_domain;
  for (const auto& o : mcp_origins) {
    if (o.find("://") == std::string::npos || o.back() == '/')
      return Fatal("--mcp-allow-origin", Error{Errc::kInvalidArgument, 0, "want scheme://host[:port], got " + o});
  }
  sopts.mcp_allowed_origins = mcp_origins;
  sopts.console_assets = LoadConsoleAssets(sys::SelfExeDir() + "/../share/space/console");
  sopts.console_secure_cookies = behind_tls_proxy;
  sopts.tls = *tls;
  if (node_role) {
    sopts.not_ready = [role = node_role.get()] { return role->NotReady(); };
    sopts.console_session_backing = node_role->sessions();
  }
  auto server = api::Server::Start(platform->get(), sopts);
  if (!server) return Fatal("listen", server.error());
  std::string host = address.find(':') != std::string::npos ? "[" + address + "]" : address;
  std::string url = "http://" + host + ":" + std::to_string((*server)->port());
  // Plain HTTP, which the CLI speaks, is served on the port with or without TLS.
  (void)sys::WriteFileAtomic(data_dir + "/url", url + "\n", 0644);
  spdlog::info("spaced listening on {} (data dir {})", url, data_dir);
  const std::string key_path = api_key_file.empty() ? data_dir + "/api-key" : api_key_file;
  std::printf(
      "\nSPACE is running at %s\n"
      "  API key:   %s\n"
      "  Try:       build/bin/space --data-dir %s create\n"
      "             build/bin/space --data-dir %s exec <id> -- echo hello\n"
      "  or:        export SPACE_URL=%s SPACE_API_KEY=$(cat %s)\n",
      url.c_str(), key_path.c_str(), data_dir.c_str(), data_dir.c_str(), url.c_str(),
      key_path.c_str());
  if (*tls) {
    std::string https = "https://" + host + ":" + std::to_string((*server)->port());
    if (!(*tls)->ca_file().empty()) {
      std::printf("  HTTPS:     %s (same port; trust %s: curl --cacert, NODE_EXTRA_CA_CERTS, SSL_CERT_FILE)\n",
                  https.c_str(), (*tls)->ca_file().c_str());
    } else {
      std::printf("  HTTPS:     %s (same port, --tls-cert %s)\n", https.c_str(), tls_flags.cert_file.c_str());
    }
  }
  if (!sopts.console_assets.empty()) {
    std::printf("  Console:   %s/ui/ (log in with the API key above)\n", url.c_str());
  } else {
    std::printf("  Console:   not built (the space_console target needs node and npm)\n");
  }
  std::printf("  Template:  new sandboxes start from %s", config.default_template.c_str());
  if (!prepare_templates.empty())
    std::printf(" (built-ins being prepared: a create waits for them; progress below)");
  std::printf("\n\n");
  std::fflush(stdout);

  int sig = 0;
  sigwait(&stop, &sig);
  spdlog::info("signal {}: shutting down (sandboxes keep running)", sig);
  (*server)->Stop();
  server->reset();
  node_role.reset();  // leaves the cluster: its routes go at once
  (*platform)->Shutdown();
  return 0;
}
