// cluster/etcd: Store (store.h) on etcd v3's JSON gateway, with libcurl.
//
// Every request is a POST of a JSON message to /v3/...; keys and values travel base64,
// int64s as strings. An endpoint that does not answer (connect or transfer failure) is
// skipped for the next; gRPC errors come back as non-200 answers {code, message}. A watch
// is a long POST whose answer is a stream of JSON messages, one per line.
#include <curl/curl.h>
#include <sodium.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "cluster/store.h"
#include "common/json.h"

namespace space::cluster {
namespace {

std::string B64(std::string_view s) {
  std::string out(sodium_base64_ENCODED_LEN(s.size(), sodium_base64_VARIANT_ORIGINAL), '\0');
  sodium_bin2base64(out.data(), out.size(), reinterpret_cast<const unsigned char*>(s.data()), s.size(),
                    sodium_base64_VARIANT_ORIGINAL);
  out.resize(out.size() - 1);  // the terminating NUL
  return out;
}

Result<std::string> UnB64(std::string_view s) {
  std::string out(s.size(), '\0');
  size_t len = 0;
  if (sodium_base642bin(reinterpret_cast<unsigned char*>(out.data()), out.size(), s.data(), s.size(),
                        nullptr, &len, nullptr, sodium_base64_VARIANT_ORIGINAL) != 0)
    return Fail(Errc::kInternal, "etcd: bad base64 in an answer");
  out.resize(len);
  return out;
}

// grpc-gateway writes int64 as strings; absent fields are zero.
int64_t I64(const Json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) {
    try {
      return std::stoll(it->get<std::string>());
    } catch (...) {
      return 0;
    }
  }
  return 0;
}

// The key range of a prefix: [prefix, prefix with its last byte below 0xff incremented).
std::string RangeEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xff) {
      end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

Result<KeyValue> ParseKv(const Json& j) {
  KeyValue kv;
  auto key = UnB64(JsonStringOr(j, "key", ""));
  if (!key) return tl::unexpected(key.error());
  auto value = UnB64(JsonStringOr(j, "value", ""));
  if (!value) return tl::unexpected(value.error());
  kv.key = std::move(*key);
  kv.value = std::move(*value);
  kv.create_revision = I64(j, "create_revision");
  kv.mod_revision = I64(j, "mod_revision");
  kv.version = I64(j, "version");
  kv.lease = I64(j, "lease");
  return kv;
}

// gRPC codes of the answers we tell apart.
Errc ErrcOfGrpc(int64_t code) {
  switch (code) {
    case 3: return Errc::kInvalidArgument;
    case 5: return Errc::kNotFound;
    case 4:   // deadline exceeded: no quorum in time
    case 14:  // unavailable
      return Errc::kUnavailable;
    case 8: return Errc::kResourceExhausted;
    case 9: return Errc::kConflict;
    default: return Errc::kInternal;
  }
}

size_t Append(char* p, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(p, size * n);
  return size * n;
}

struct CurlDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
using CurlPtr = std::unique_ptr<CURL, CurlDeleter>;

void InitCurlOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (sodium_init() < 0) std::abort();  // no entropy source: nothing else would work either
  });
}

class EtcdWatch;

class EtcdStore final : public Store {
 public:
  explicit EtcdStore(EtcdOptions opts) : opts_(std::move(opts)) {}

  // POSTs `body` to `path`, trying the endpoints in turn from the last good one.
  Result<Json> Call(const std::string& path, const Json& body) {
    const std::string payload = body.dump();
    Error last(Errc::kUnavailable, 0, "etcd: no endpoint");
    const size_t n = opts_.endpoints.size();
    const size_t start = preferred_.load();
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (start + k) % n;
      CurlPtr c = TakeHandle();
      std::string out;
      const std::string url = opts_.endpoints[i] + path;
      curl_easy_setopt(c.get(), CURLOPT_URL, url.c_str());
      curl_easy_setopt(c.get(), CURLOPT_POSTFIELDS, payload.c_str());
      curl_easy_setopt(c.get(), CURLOPT_POSTFIELDSIZE, static_cast<long>(payload.size()));
      curl_easy_setopt(c.get(), CURLOPT_WRITEFUNCTION, Append);
      curl_easy_setopt(c.get(), CURLOPT_WRITEDATA, &out);
      curl_easy_setopt(c.get(), CURLOPT_TIMEOUT_MS, static_cast<long>(opts_.request_timeout_ms));
      curl_easy_setopt(c.get(), CURLOPT_CONNECTTIMEOUT_MS, std::min<long>(1000, opts_.request_timeout_ms));
      curl_easy_setopt(c.get(), CURLOPT_NOSIGNAL, 1L);
      curl_easy_setopt(c.get(), CURLOPT_PROXY, "");
      curl_easy_setopt(c.get(), CURLOPT_HTTPHEADER, headers_);
      CURLcode rc = curl_easy_perform(c.get());
      long status = 0;
      curl_easy_getinfo(c.get(), CURLINFO_RESPONSE_CODE, &status);
      if (rc != CURLE_OK) {
        last = Error(Errc::kUnavailable, 0,
                     "etcd " + opts_.endpoints[i] + ": " + curl_easy_strerror(rc));
        continue;  // the handle may hold a broken connection: drop it
      }
      GiveHandle(std::move(c));
      auto j = ParseJson(out);
      if (!j || !j->is_object())
        return Fail(Errc::kInternal, "etcd " + opts_.endpoints[i] + ": unreadable answer (HTTP " +
                                         std::to_string(status) + ")");
      if (status != 200) {
        const Errc code = ErrcOfGrpc(I64(*j, "code"));
        Error e(code, 0, "etcd: " + JsonStringOr(*j, "message", "HTTP " + std::to_string(status)));
        // A member without quorum (or leader) times out or refuses: another may do better.
        if (code == Errc::kUnavailable) {
          last = std::move(e);
          continue;
        }
        return tl::unexpected(std::move(e));
      }
      preferred_ = i;
      return std::move(*j);
    }
    return tl::unexpected(std::move(last));
  }

  Result<std::optional<KeyValue>> Get(const std::string& key) override {
    auto r = Call("/v3/kv/range", Json{{"key", B64(key)}});
    if (!r) return tl::unexpected(r.error());
    auto kvs = r->find("kvs");
    if (kvs == r->end() || !kvs->is_array() || kvs->empty()) return std::optional<KeyValue>();
    auto kv = ParseKv((*kvs)[0]);
    if (!kv) return tl::unexpected(kv.error());
    return std::optional<KeyValue>(std::move(*kv));
  }

  Result<std::vector<KeyValue>> List(const std::string& prefix, int64_t* revision) override {
    if (prefix.empty()) return Fail(Errc::kInvalidArgument, "etcd: List needs a prefix");
    auto r = Call("/v3/kv/range", Json{{"key", B64(prefix)}, {"range_end", B64(RangeEnd(prefix))}});
    if (!r) return tl::unexpected(r.error());
    if (revision) *revision = I64(r->value("header", Json::object()), "revision");
    std::vector<KeyValue> out;
    auto kvs = r->find("kvs");
    if (kvs == r->end() || !kvs->is_array()) return out;
    for (const Json& k : *kvs) {
      auto kv = ParseKv(k);
      if (!kv) return tl::unexpected(kv.error());
      out.push_back(std::move(*kv));
    }
    return out;
  }

  Result<int64_t> Put(const std::string& key, const std::string& value, int64_t lease) override {
    Json req = {{"key", B64(key)}, {"value", B64(value)}};
    if (lease) req["lease"] = std::to_string(lease);
    auto r = Call("/v3/kv/put", req);
    if (!r) return tl::unexpected(r.error());
    return I64(r->value("header", Json::object()), "revision");
  }

  Result<std::optional<int64_t>> CompareAndSet(const std::string& key, int64_t expected,
                                               const std::string& value, int64_t lease) override {
    Json put = {{"key", B64(key)}, {"value", B64(value)}};
    if (lease) put["lease"] = std::to_string(lease);
    Json cmp = {{"key", B64(key)}, {"result", "EQUAL"}, {"target", "MOD"},
                {"mod_revision", std::to_string(expected)}};
    Json req = {{"compare", Json::array({cmp})}, {"success", Json::array({Json{{"request_put", put}}})}};
    auto r = Call("/v3/kv/txn", req);
    if (!r) return tl::unexpected(r.error());
    if (!r->value("succeeded", false)) return std::optional<int64_t>();
    return std::optional<int64_t>(I64(r->value("header", Json::object()), "revision"));
  }

  Result<bool> CompareAndDelete(const std::string& key, int64_t expected) override {
    Json cmp = {{"key", B64(key)}, {"result", "EQUAL"}, {"target", "MOD"},
                {"mod_revision", std::to_string(expected)}};
    Json del = {{"request_delete_range", {{"key", B64(key)}}}};
    Json req = {{"compare", Json::array({cmp})}, {"success", Json::array({del})}};
    auto r = Call("/v3/kv/txn", req);
    if (!r) return tl::unexpected(r.error());
    return r->value("succeeded", false);
  }

  Status Delete(const std::string& key) override {
    auto r = Call("/v3/kv/deleterange", Json{{"key", B64(key)}});
    if (!r) return tl::unexpected(r.error());
    return Ok();
  }

  Result<int64_t> GrantLease(int64_t ttl_s) override {
    if (ttl_s < 1) return Fail(Errc::kInvalidArgument, "etcd: a lease needs a TTL of 1 s or more");
    auto r = Call("/v3/lease/grant", Json{{"TTL", std::to_string(ttl_s)}});
    if (!r) return tl::unexpected(r.error());
    int64_t id = I64(*r, "ID");
    if (id == 0) return Fail(Errc::kInternal, "etcd: lease grant without an id");
    return id;
  }

  Result<int64_t> KeepAlive(int64_t lease) override {
    auto r = Call("/v3/lease/keepalive", Json{{"ID", std::to_string(lease)}});
    if (!r) return tl::unexpected(r.error());
    int64_t ttl = I64(r->value("result", Json::object()), "TTL");
    if (ttl <= 0) return Fail(Errc::kNotFound, "etcd: lease " + std::to_string(lease) + " has expired");
    return ttl;
  }

  Status RevokeLease(int64_t lease) override {
    auto r = Call("/v3/lease/revoke", Json{{"ID", std::to_string(lease)}});
    if (!r) return tl::unexpected(r.error());
    return Ok();
  }

  Result<std::unique_ptr<Watch>> WatchPrefix(const std::string& prefix, int64_t after_revision,
                                             WatchHandlers handlers) override;

  const EtcdOptions& options() const { return opts_; }
  size_t preferred() const { return preferred_.load(); }
  void set_preferred(size_t i) { preferred_ = i; }

  ~EtcdStore() override {
    std::lock_guard l(pool_mu_);
    pool_.clear();
    if (headers_) curl_slist_free_all(headers_);
  }

  void Init() { headers_ = curl_slist_append(nullptr, "Content-Type: application/json"); }

 private:
  CurlPtr TakeHandle() {
    {
      std::lock_guard l(pool_mu_);
      if (!pool_.empty()) {
        CurlPtr c = std::move(pool_.back());
        pool_.pop_back();
        return c;
      }
    }
    return CurlPtr(curl_easy_init());
  }
  void GiveHandle(CurlPtr c) {
    std::lock_guard l(pool_mu_);
    if (pool_.size() < 8) pool_.push_back(std::move(c));
  }

  EtcdOptions opts_;
  curl_slist* headers_ = nullptr;
  std::atomic<size_t> preferred_{0};
  std::mutex pool_mu_;
  std::vector<CurlPtr> pool_;
};

// One thread: POST /v3/watch, read messages line by line, deliver events; when the
// stream ends or fails, start again after the last revision delivered, at the next endpoint.
class EtcdWatch final : public Watch {
 public:
  EtcdWatch(EtcdStore* store, std::string prefix, int64_t after, WatchHandlers h)
      : store_(store), prefix_(std::move(prefix)), next_(after + 1), h_(std::move(h)) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~EtcdWatch() override {
    stop_ = true;
    thread_.join();
  }

 private:
  static size_t OnData(char* p, size_t size, size_t n, void* self) {
    auto* w = static_cast<EtcdWatch*>(self);
    w->buf_.append(p, size * n);
    size_t pos;
    while ((pos = w->buf_.find('\n')) != std::string::npos) {
      std::string line = w->buf_.substr(0, pos);
      w->buf_.erase(0, pos + 1);
      if (!w->OnMessage(line)) return 0;  // aborts the transfer
    }
    return size * n;
  }
  static int OnProgress(void* self, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
    return static_cast<EtcdWatch*>(self)->stop_.load() ? 1 : 0;
  }

  // False ends this stream (lost, or a message we cannot read).
  bool OnMessage(const std::string& line) {
    if (line.find_first_not_of(" \r\t") == std::string::npos) return true;
    auto j = ParseJson(line);
    if (!j || !j->is_object()) return false;
    const Json* res = JsonField(*j, "result");
    if (!res) return false;  // an error message: start again
    if (res->value("canceled", false)) {
      if (I64(*res, "compact_revision") > 0) {
        lost_ = true;
        if (h_.on_lost)
          h_.on_lost(Error(Errc::kNotFound, 0,
                           "etcd watch: revision " + std::to_string(next_) + " was compacted (now " +
                               std::to_string(I64(*res, "compact_revision")) + ")"));
      }
      return false;
    }
    const Json* evs = JsonField(*res, "events");
    if (!evs || !evs->is_array() || evs->empty()) return true;
    std::vector<WatchEvent> batch;
    for (const Json& e : *evs) {
      WatchEvent ev;
      ev.type = JsonStringOr(e, "type", "PUT") == "DELETE" ? WatchEvent::Type::kDelete : WatchEvent::Type::kPut;
      auto kv = ParseKv(e.value("kv", Json::object()));
      if (!kv) return false;
      ev.kv = std::move(*kv);
      next_ = std::max(next_, ev.kv.mod_revision + 1);
      batch.push_back(std::move(ev));
    }
    if (h_.on_events) h_.on_events(batch);
    return true;
  }

  void Loop() {
    const auto& opts = store_->options();
    size_t i = store_->preferred();
    Json create = {{"key", B64(prefix_)}, {"range_end", B64(RangeEnd(prefix_))}};
    curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
    while (!stop_ && !lost_) {
      create["start_revision"] = std::to_string(next_);
      const std::string payload = Json{{"create_request", create}}.dump();
      CurlPtr c(curl_easy_init());
      const std::string url = opts.endpoints[i % opts.endpoints.size()] + "/v3/watch";
      buf_.clear();
      curl_easy_setopt(c.get(), CURLOPT_URL, url.c_str());
      curl_easy_setopt(c.get(), CURLOPT_POSTFIELDS, payload.c_str());
      curl_easy_setopt(c.get(), CURLOPT_POSTFIELDSIZE, static_cast<long>(payload.size()));
      curl_easy_setopt(c.get(), CURLOPT_HTTPHEADER, headers);
      curl_easy_setopt(c.get(), CURLOPT_WRITEFUNCTION, OnData);
      curl_easy_setopt(c.get(), CURLOPT_WRITEDATA, this);
      curl_easy_setopt(c.get(), CURLOPT_NOPROGRESS, 0L);
      curl_easy_setopt(c.get(), CURLOPT_XFERINFOFUNCTION, OnProgress);
      curl_easy_setopt(c.get(), CURLOPT_XFERINFODATA, this);
      curl_easy_setopt(c.get(), CURLOPT_CONNECTTIMEOUT_MS, 1000L);
      curl_easy_setopt(c.get(), CURLOPT_NOSIGNAL, 1L);
      curl_easy_setopt(c.get(), CURLOPT_PROXY, "");
      // A member that vanishes without closing (a cut link) is found by keepalive probes.
      curl_easy_setopt(c.get(), CURLOPT_TCP_KEEPALIVE, 1L);
      curl_easy_setopt(c.get(), CURLOPT_TCP_KEEPIDLE, 2L);
      curl_easy_setopt(c.get(), CURLOPT_TCP_KEEPINTVL, 1L);
      (void)curl_easy_perform(c.get());
      if (stop_ || lost_) break;
      ++i;  // the stream ended: go on at the next member
      for (int k = 0; k < 4 && !stop_; ++k) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    curl_slist_free_all(headers);
  }

  EtcdStore* store_;
  std::string prefix_;
  int64_t next_;  // the first revision not yet delivered
  WatchHandlers h_;
  std::string buf_;
  std::atomic<bool> stop_{false};
  bool lost_ = false;
  std::thread thread_;
};

Result<std::unique_ptr<Watch>> EtcdStore::WatchPrefix(const std::string& prefix, int64_t after_revision,
                                                      WatchHandlers handlers) {
  if (prefix.empty()) return Fail(Errc::kInvalidArgument, "etcd: a watch needs a prefix");
  if (after_revision < 0) return Fail(Errc::kInvalidArgument, "etcd: a watch needs a revision >= 0");
  return std::unique_ptr<Watch>(std::make_unique<EtcdWatch>(this, prefix, after_revision, std::move(handlers)));
}

}  // namespace

Result<std::unique_ptr<Store>> OpenEtcd(const EtcdOptions& opts) {
  InitCurlOnce();
  if (opts.endpoints.empty()) return Fail(Errc::kInvalidArgument, "etcd: no endpoints");
  if (opts.request_timeout_ms < 100) return Fail(Errc::kInvalidArgument, "etcd: request timeout under 100 ms");
  EtcdOptions o = opts;
  for (std::string& e : o.endpoints) {
    if (e.rfind("https://", 0) == 0) return Fail(Errc::kInvalidArgument, "etcd: TLS endpoints are not supported yet: " + e);
    if (e.rfind("http://", 0) != 0) e = "http://" + e;
    while (!e.empty() && e.back() == '/') e.pop_back();
    const std::string hostport = e.substr(7);
    const size_t colon = hostport.rfind(':');
    if (hostport.empty() || colon == std::string::npos || colon == 0 || colon + 1 == hostport.size() ||
        hostport.find('/') != std::string::npos)
      return Fail(Errc::kInvalidArgument, "etcd: endpoint must be host:port: " + e);
  }
  auto s = std::make_unique<EtcdStore>(std::move(o));
  s->Init();
  return std::unique_ptr<Store>(std::move(s));
}

}  // namespace space::cluster
