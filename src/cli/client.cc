#include "cli/client.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "cli/client_internal.h"
#include "sys/sys.h"

namespace space::client {

namespace {

constexpr char kDefaultUrl[] = "http://127.0.0.1:7070";
constexpr size_t kMaxIdleHandles = 8;
constexpr size_t kMaxErrorBody = 1 << 20;
constexpr long kStreamBufferSize = 512L << 10;
// The server caps `wait` at 5 minutes; longer waits are loops of this.
constexpr milliseconds kMaxServerWait{300000};

std::once_flag g_curl_once;

void EnsureCurlInitialized() {
  // curl_global_init is not thread-safe; run it once, before the first handle.
  std::call_once(g_curl_once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string NormalizeUrl(std::string_view url) {
  std::string u(Trim(url));
  if (u.find("://") == std::string::npos) u = "http://" + u;
  while (!u.empty() && u.back() == '/') u.pop_back();
  return u;
}

// Percent-encodes everything but unreserved characters and `keep`.
std::string Escape(std::string_view s, std::string_view keep) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        keep.find(static_cast<char>(c)) != std::string_view::npos) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

Errc ErrcFromStatus(int status) {
  switch (status) {
    case 400:
    case 405:
      return Errc::kInvalidArgument;
    case 401:
      return Errc::kUnauthenticated;
    case 403:
      return Errc::kPermissionDenied;
    case 404:
      return Errc::kNotFound;
    case 409:
      return Errc::kConflict;
    case 413:
      return Errc::kTooLarge;
    case 429:
      return Errc::kResourceExhausted;
    case 502:
    case 503:
      return Errc::kUnavailable;
    case 504:
      return Errc::kDeadlineExceeded;
    default:
      return status >= 400 && status < 500 ? Errc::kInvalidArgument : Errc::kInternal;
  }
}

// The sandbox object in a create answer: {"sandbox":{...}} or the SANDBOX itself.
const Json* SandboxOf(const Json& answer) {
  if (const Json* s = JsonField(answer, "sandbox"); s && s->is_object()) return s;
  if (JsonString(answer, "id") && JsonString(answer, "state")) return &answer;
  return nullptr;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Helpers shared with client_lifecycle.cc (client_internal.h)

namespace internal {

std::string PathEscape(std::string_view segment) { return Escape(segment, ""); }

Result<Json> ParseAnswer(const HttpResponse& r, std::string_view what) {
  if (Trim(r.body).empty()) return Json::object();
  auto j = ParseJson(r.body);
  if (!j)
    return Fail(Errc::kInternal, "spaced answered " + std::string(what) + " with invalid JSON");
  return *j;
}

std::string FormatMode(int mode) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04o", mode & 07777);
  return buf;
}

Result<Json> ArrayField(const Json& answer, const char* key) {
  const Json* f = JsonField(answer, key);
  if (!f || !f->is_array()) {
    return Fail(Errc::kInternal, std::string("spaced's answer has no \"") + key + "\" array");
  }
  return *f;
}

bool OperationFinished(const Json& op) {
  std::string s = JsonStringOr(op, "state", "");
  return s == "succeeded" || s == "failed";
}

Deadline DeadlineFor(milliseconds timeout) {
  if (timeout.count() <= 0) return std::nullopt;
  return std::chrono::steady_clock::now() + timeout;
}

milliseconds NextWait(Deadline deadline) {
  if (!deadline) return kMaxServerWait;
  auto left =
      std::chrono::duration_cast<milliseconds>(*deadline - std::chrono::steady_clock::now());
  return std::clamp(left, milliseconds{0}, kMaxServerWait);
}

milliseconds FirstWait(const WaitOptions& options, Deadline deadline) {
  return std::max(std::min(options.first_wait, NextWait(deadline)), milliseconds{1});
}

Result<Json> FinishOperation(Client& client, const Json& op, const WaitOptions& options,
                             Deadline deadline) {
  if (OperationFinished(op)) return op;
  std::string op_id = JsonStringOr(op, "id", "");
  if (op_id.empty()) return Fail(Errc::kInternal, "spaced's answer has an operation without id");
  if (options.on_pending) options.on_pending(op);
  // With a deadline, what is left of it (at least one poll); without, no limit.
  milliseconds left = deadline ? std::max(NextWait(deadline), milliseconds{1}) : milliseconds{0};
  return client.WaitOperation(op_id, left);
}

}  // namespace internal

using internal::ArrayField;
using internal::DeadlineFor;
using internal::FinishOperation;
using internal::FirstWait;
using internal::NextWait;
using internal::OperationFinished;
using internal::ParseAnswer;
using internal::PathEscape;

// ---------------------------------------------------------------------------------------------
// HttpResponse, errors

std::optional<std::string> HttpResponse::Header(std::string_view name) const {
  std::string want = Lower(name);
  for (const auto& [k, v] : headers) {
    if (k == want) return v;
  }
  return std::nullopt;
}

Error ErrorFromResponse(const HttpResponse& r) {
  if (auto j = ParseJson(r.body)) {
    if (const Json* e = JsonField(*j, "error"); e && e->is_object()) {
      auto code = JsonString(*e, "code");
      auto message = JsonString(*e, "message");
      Errc c = code ? ErrcFromName(*code) : ErrcFromStatus(r.status);
      return Error{c, 0,
                   message && !message->empty()
                       ? *message
                       : "spaced answered HTTP " + std::to_string(r.status)};
    }
  }
  std::string msg = "spaced answered HTTP " + std::to_string(r.status);
  std::string_view body = Trim(r.body);
  if (!body.empty()) msg += ": " + std::string(body.substr(0, 200));
  return Error{ErrcFromStatus(r.status), 0, std::move(msg)};
}

// ---------------------------------------------------------------------------------------------
// MuxParser

Result<bool> MuxParser::Feed(std::string_view data, const MuxCallback& callback) {
  size_t i = 0;
  while (i < data.size()) {
    if (saw_exit_) {
      return Fail(Errc::kInvalidArgument, "output stream: data after the exit record");
    }
    if (remaining_ == 0) {
      // Reading a record header.
      size_t take = std::min(sizeof header_ - header_have_, data.size() - i);
      std::memcpy(header_ + header_have_, data.data() + i, take);
      header_have_ += take;
      i += take;
      if (header_have_ < sizeof header_) break;
      header_have_ = 0;
      uint8_t kind = header_[0];
      uint32_t len = static_cast<uint32_t>(header_[1]) | static_cast<uint32_t>(header_[2]) << 8 |
                     static_cast<uint32_t>(header_[3]) << 16 |
                     static_cast<uint32_t>(header_[4]) << 24;
      if (kind < 1 || kind > 3) {
        return Fail(Errc::kInvalidArgument,
                    "output stream: unknown record kind " + std::to_string(kind));
      }
      kind_ = static_cast<MuxKind>(kind);
      if (kind_ == MuxKind::kExit) {
        if (len > kMaxExitRecord) {
          return Fail(Errc::kInvalidArgument,
                      "output stream: exit record of " + std::to_string(len) + " bytes");
        }
        exit_payload_.clear();
        exit_payload_.reserve(len);
      }
      remaining_ = len;
      if (len == 0 && kind_ == MuxKind::kExit) {
        saw_exit_ = true;
        if (!callback(kind_, exit_payload_)) return false;
      }
      continue;
    }
    size_t take = std::min<size_t>(remaining_, data.size() - i);
    std::string_view piece = data.substr(i, take);
    i += take;
    remaining_ -= static_cast<uint32_t>(take);
    if (kind_ == MuxKind::kExit) {
      exit_payload_.append(piece);
      if (remaining_ == 0) {
        saw_exit_ = true;
        if (!callback(kind_, exit_payload_)) return false;
      }
      continue;
    }
    (kind_ == MuxKind::kStdout ? stdout_bytes_ : stderr_bytes_) += take;
    if (!callback(kind_, piece)) return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Transport

struct Client::Impl {
  std::string url;
  std::string key;
  ClientOptions options;
  std::mutex mu;
  std::vector<CURL*> idle;  // handles keep their connections across curl_easy_reset

  ~Impl() {
    for (CURL* h : idle) curl_easy_cleanup(h);
  }

  CURL* Acquire() {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!idle.empty()) {
        CURL* h = idle.back();
        idle.pop_back();
        return h;
      }
    }
    EnsureCurlInitialized();
    return curl_easy_init();
  }

  void Release(CURL* h) {
    std::lock_guard<std::mutex> lock(mu);
    if (idle.size() < kMaxIdleHandles) {
      idle.push_back(h);
    } else {
      curl_easy_cleanup(h);
    }
  }
};


namespace {

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<HttpResponse*>(user);
  std::string_view line(data, size * n);
  line = Trim(line);
  if (StartsWith(line, "HTTP/")) {
    // A new status line (e.g. after "100 Continue"): start over.
    t->headers.clear();
    size_t sp = line.find(' ');
    t->status =
        sp == std::string_view::npos ? 0 : std::atoi(std::string(line.substr(sp + 1, 3)).c_str());
    return size * n;
  }
  size_t colon = line.find(':');
  if (colon != std::string_view::npos) {
    t->headers.emplace_back(Lower(Trim(line.substr(0, colon))),
                            std::string(Trim(line.substr(colon + 1))));
  }
  return size * n;
}

}  // namespace

Result<HttpResponse> Client::Perform(Transfer& t) {
  // spaced answers 429 before doing anything when it is at a limit; wait what its
  // Retry-After says and ask again, for up to options.retry_busy_for. Streaming uploads
  // cannot be replayed and are not retried.
  const auto until = std::chrono::steady_clock::now() + impl_->options.retry_busy_for;
  for (;;) {
    auto r = PerformOnce(t);
    if (!r || r->status != 429 || t.reader || std::chrono::steady_clock::now() >= until) return r;
    long secs = 1;
    if (auto v = r->Header("Retry-After")) secs = std::clamp(std::atol(v->c_str()), 1L, 10L);
    auto left = std::chrono::duration_cast<milliseconds>(until - std::chrono::steady_clock::now());
    std::this_thread::sleep_for(std::min<milliseconds>(std::chrono::seconds(secs), left));
    t.response = HttpResponse{};
    t.sink_stopped = false;
    t.errbuf[0] = '\0';
  }
}

Result<HttpResponse> Client::PerformOnce(Transfer& t) {
  CURL* h = impl_->Acquire();
  if (!h) return Fail(Errc::kResourceExhausted, "curl_easy_init failed");
  struct Lease {
    Impl* impl;
    CURL* h;
    ~Lease() { impl->Release(h); }
  } lease{impl_.get(), h};

  std::string url = impl_->url + t.path;
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  // spaced is addressed directly; an http_proxy in the environment must not capture
  // long-lived output streams.
  curl_easy_setopt(h, CURLOPT_PROXY, "");
  curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(impl_->options.connect_timeout.count()));
  if (impl_->options.request_timeout.count() > 0) {
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS,
                     static_cast<long>(impl_->options.request_timeout.count()));
  }
  curl_easy_setopt(h, CURLOPT_USERAGENT, "space-client/1");
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, t.errbuf);
  curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, &OnHeader);
  curl_easy_setopt(h, CURLOPT_HEADERDATA, &t.response);

  auto on_write = +[](char* data, size_t size, size_t n, void* user) -> size_t {
    auto* t = static_cast<Transfer*>(user);
    size_t len = size * n;
    if (t->sink && t->response.ok()) {
      if (!t->sink(std::string_view(data, len))) {
        t->sink_stopped = true;
        return len == 0 ? 1 : 0;  // anything but len aborts the transfer
      }
      return len;
    }
    if (t->response.body.size() < kMaxErrorBody || !t->sink) t->response.body.append(data, len);
    return len;
  };
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
  // Streamed bodies (command output, file downloads) can run at GB/s: curl's default
  // 16 KiB buffer would make that a recv and a callback every 16 KiB.
  if (t.sink) curl_easy_setopt(h, CURLOPT_BUFFERSIZE, kStreamBufferSize);

  curl_slist* headers = nullptr;
  if (!impl_->key.empty()) {
    headers = curl_slist_append(headers, ("Authorization: Bearer " + impl_->key).c_str());
  }
  if (!t.content_type.empty()) {
    headers = curl_slist_append(headers, ("Content-Type: " + t.content_type).c_str());
  } else if (t.send_body || t.reader) {
    // Not curl's default "application/x-www-form-urlencoded" for a body we did not type.
    headers = curl_slist_append(headers, "Content-Type:");
  }
  // curl would otherwise send "Expect: 100-continue" for big uploads and stall a second
  // waiting for a "100 Continue" the server need not send.
  headers = curl_slist_append(headers, "Expect:");
  for (const std::string& line : t.headers) headers = curl_slist_append(headers, line.c_str());
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);

  if (t.reader) {
    curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
    auto on_read = +[](char* buf, size_t size, size_t n, void* user) -> size_t {
      auto* t = static_cast<Transfer*>(user);
      auto got = t->reader(buf, size * n);
      if (!got) return CURL_READFUNC_ABORT;
      return *got;
    };
    curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(h, CURLOPT_READDATA, &t);
    if (t.upload_size >= 0) {
      curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(t.upload_size));
    }
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, t.method.c_str());
  } else if (t.send_body) {
    // POSTFIELDS(nullptr) would mean "read the body from READFUNCTION": pass "" when empty.
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, t.body.empty() ? "" : t.body.data());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(t.body.size()));
    if (t.method != "POST") curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, t.method.c_str());
  } else if (t.method == "GET") {
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
  } else if (t.method == "HEAD") {
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
  } else {
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, t.method.c_str());
  }

  CURLcode rc = curl_easy_perform(h);
  long code = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
  // The handle goes back to the pool holding its connection; it must not keep pointers
  // into this stack frame (error buffer, header list, callback data).
  curl_easy_reset(h);
  curl_slist_free_all(headers);

  if (rc == CURLE_WRITE_ERROR && t.sink_stopped) return std::move(t.response);
  if ((rc == CURLE_ABORTED_BY_CALLBACK || rc == CURLE_READ_ERROR) && t.read_error) {
    return tl::unexpected(*t.read_error);
  }
  if (rc != CURLE_OK) {
    std::string detail = t.errbuf[0] ? std::string(Trim(t.errbuf)) : curl_easy_strerror(rc);
    const std::string& base = impl_->url;
    switch (rc) {
      case CURLE_COULDNT_CONNECT:
      case CURLE_COULDNT_RESOLVE_HOST:
      case CURLE_COULDNT_RESOLVE_PROXY:
      case CURLE_UNSUPPORTED_PROTOCOL:
      case CURLE_URL_MALFORMAT:
        return Fail(Errc::kUnavailable, "cannot reach spaced at " + base + ": " + detail);
      case CURLE_OPERATION_TIMEDOUT:
        return Fail(Errc::kDeadlineExceeded,
                    t.method + " " + t.path + " to spaced at " + base + " timed out: " + detail);
      case CURLE_GOT_NOTHING:
      case CURLE_RECV_ERROR:
      case CURLE_SEND_ERROR:
      case CURLE_PARTIAL_FILE:
      case CURLE_HTTP2_STREAM:
        return Fail(Errc::kUnavailable, "connection to spaced at " + base + " broke during " +
                                            t.method + " " + t.path + ": " + detail);
      default:
        return Fail(Errc::kInternal,
                    t.method + " " + t.path + " to spaced at " + base + " failed: " + detail);
    }
  }
  t.response.status = static_cast<int>(code);
  return std::move(t.response);
}

// ---------------------------------------------------------------------------------------------
// Construction

Client::Client(std::string base_url, std::string api_key, ClientOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->url = NormalizeUrl(base_url);
  impl_->key = std::string(Trim(api_key));
  impl_->options = options;
}
Client::~Client() = default;
Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;

const std::string& Client::url() const { return impl_->url; }
const std::string& Client::api_key() const { return impl_->key; }

std::string Client::ResolveDataDir(std::string_view data_dir_override) {
  if (!data_dir_override.empty()) return std::string(data_dir_override);
  if (const char* env = std::getenv("SPACE_DATA_DIR"); env && *env) return env;
  return "./.space-data";
}

Result<Client> Client::FromEnvironment(std::string_view data_dir_override, ClientOptions options) {
  std::string dir = ResolveDataDir(data_dir_override);
  auto from_file = [&](const char* name) -> Result<std::optional<std::string>> {
    std::string path = dir + "/" + name;
    auto text = sys::ReadFile(path);
    if (!text) {
      if (text.error().sys_errno == ENOENT || text.error().sys_errno == ENOTDIR) {
        return std::optional<std::string>();
      }
      return tl::unexpected(text.error().Wrap("read " + path));
    }
    std::string v(Trim(*text));
    if (v.empty()) return std::optional<std::string>();
    return std::optional<std::string>(std::move(v));
  };

  std::string url = kDefaultUrl;
  if (const char* env = std::getenv("SPACE_URL"); env && !Trim(env).empty()) {
    url = env;
  } else {
    auto f = from_file("url");
    if (!f) return tl::unexpected(f.error());
    if (*f) url = **f;
  }
  std::string key;
  if (const char* env = std::getenv("SPACE_API_KEY"); env && !Trim(env).empty()) {
    key = env;
  } else {
    auto f = from_file("api-key");
    if (!f) return tl::unexpected(f.error());
    if (*f) key = **f;
  }
  return Client(std::move(url), std::move(key), options);
}

// ---------------------------------------------------------------------------------------------
// Generic

std::string Client::QueryEscape(std::string_view s) { return Escape(s, "/:"); }

std::string Client::FormatWait(milliseconds wait) {
  int64_t ms = std::max<int64_t>(wait.count(), 0);
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

Error Client::OperationError(const Json& op) {
  std::string id = JsonStringOr(op, "id", "operation");
  std::string kind = JsonStringOr(op, "kind", "");
  std::string what = kind.empty() ? id : kind + " " + id;
  if (const Json* e = JsonField(op, "error"); e && e->is_object()) {
    return Error{ErrcFromName(JsonStringOr(*e, "code", "internal")), 0,
                 what + " failed: " + JsonStringOr(*e, "message", "unknown error")};
  }
  return Error{Errc::kInternal, 0, what + " failed"};
}

int Client::ExitCodeOf(const Json& command) {
  if (JsonBoolOr(command, "timed_out", false)) return 124;
  std::string state = JsonStringOr(command, "state", "");
  if (state == "failed") return 127;
  if (auto sig = JsonInt(command, "signal"); sig && *sig > 0) return 128 + static_cast<int>(*sig);
  if (auto code = JsonInt(command, "exit_code")) return static_cast<int>(*code);
  return 255;
}

std::string Client::SandboxPath(std::string_view id) const {
  return "/v1/sandboxes/" + PathEscape(id);
}

Result<HttpResponse> Client::Request(std::string_view method, std::string_view path_with_query,
                                     std::string_view body, std::string_view content_type) {
  Transfer t;
  t.method = std::string(method);
  t.path = std::string(path_with_query);
  t.body = body;
  t.send_body = !body.empty() || method == "POST" || method == "PUT" || method == "PATCH";
  t.content_type = std::string(content_type);
  return Perform(t);
}

Result<Json> Client::Call(std::string_view method, std::string_view path_with_query,
                          const std::optional<Json>& body) {
  std::string text;
  if (body) text = body->dump(-1, ' ', false, Json::error_handler_t::replace);
  auto r = Request(method, path_with_query, text, body ? "application/json" : "");
  if (!r) return tl::unexpected(r.error());
  if (!r->ok()) return tl::unexpected(ErrorFromResponse(*r));
  return ParseAnswer(*r, std::string(method) + " " + std::string(path_with_query));
}

Status Client::Health() {
  auto r = Request("GET", "/healthz");
  if (!r) return tl::unexpected(r.error());
  if (!r->ok()) return tl::unexpected(ErrorFromResponse(*r));
  return Ok();
}

// ---------------------------------------------------------------------------------------------
// Sandboxes

Result<Json> Client::CreateSandbox(const Json& body, milliseconds wait) {
  std::string path = "/v1/sandboxes";
  if (wait.count() > 0) path += "?wait=" + FormatWait(wait);
  auto r = Call("POST", path, body);
  if (!r) return r;
  if (const Json* op = JsonField(*r, "operation");
      op && JsonStringOr(*op, "state", "") == "failed") {
    return tl::unexpected(OperationError(*op));
  }
  if (const Json* sb = SandboxOf(*r); sb && JsonStringOr(*sb, "state", "") == "error") {
    return Fail(Errc::kInternal, "sandbox " + JsonStringOr(*sb, "id", "") +
                                     " failed: " + JsonStringOr(*sb, "reason", "unknown reason"));
  }
  return r;
}

Result<Json> Client::CreateSandboxAndWait(const Json& body, milliseconds timeout) {
  return CreateSandboxAndWait(body, WaitOptions{.timeout = timeout});
}

Result<Json> Client::CreateSandboxAndWait(const Json& body, const WaitOptions& options) {
  auto deadline = DeadlineFor(options.timeout);
  auto r = CreateSandbox(body, FirstWait(options, deadline));
  if (!r) return r;
  const Json* sb = SandboxOf(*r);
  if (sb && JsonStringOr(*sb, "state", "") == "running") return *sb;
  std::string sandbox_id = sb ? JsonStringOr(*sb, "id", "") : "";
  if (const Json* op = JsonField(*r, "operation"); op && op->is_object()) {
    auto done = FinishOperation(*this, *op, options, deadline);
    if (!done) return tl::unexpected(done.error());
    if (JsonStringOr(*done, "state", "") == "failed") return tl::unexpected(OperationError(*done));
    if (sandbox_id.empty()) sandbox_id = JsonStringOr(*done, "target", "");
  }
  if (sandbox_id.empty()) return Fail(Errc::kInternal, "create answer names no sandbox");
  return GetSandbox(sandbox_id);
}

namespace {

// "?label=K=V&...&state=S" (empty when neither is given).
std::string SandboxFilterQuery(const std::vector<std::pair<std::string, std::string>>& labels,
                               std::string_view state) {
  std::string query;
  for (const auto& [k, v] : labels) {
    query += query.empty() ? '?' : '&';
    query += "label=" + Client::QueryEscape(k) + "=" + Client::QueryEscape(v);
  }
  if (!state.empty()) {
    query += query.empty() ? '?' : '&';
    query += "state=" + Client::QueryEscape(state);
  }
  return query;
}

}  // namespace

Result<Json> Client::ListSandboxes(const std::vector<std::pair<std::string, std::string>>& labels,
                                   std::string_view state) {
  auto r = Call("GET", "/v1/sandboxes" + SandboxFilterQuery(labels, state));
  if (!r) return r;
  return ArrayField(*r, "sandboxes");
}

Result<Json> Client::DeleteSandboxesByLabel(const std::vector<std::pair<std::string, std::string>>& labels) {
  if (labels.empty()) return Fail(Errc::kInvalidArgument, "a bulk delete needs at least one label");
  return Call("DELETE", "/v1/sandboxes" + SandboxFilterQuery(labels, {}));
}

Result<Json> Client::GetSandbox(std::string_view id) { return Call("GET", SandboxPath(id)); }

Result<Json> Client::DeleteSandbox(std::string_view id, milliseconds wait) {
  std::string path = SandboxPath(id);
  if (wait.count() > 0) path += "?wait=" + FormatWait(wait);
  return Call("DELETE", path);
}

Status Client::DeleteSandboxAndWait(std::string_view id, milliseconds timeout) {
  return DeleteSandboxAndWait(id, WaitOptions{.timeout = timeout});
}

Status Client::DeleteSandboxAndWait(std::string_view id, const WaitOptions& options) {
  auto r = StartAndFollow("DELETE", SandboxPath(id), std::nullopt, options);
  if (!r) return tl::unexpected(r.error());
  const Json& op = r->second;
  if (op.is_null()) return Ok();  // answered synchronously
  if (JsonStringOr(op, "state", "") == "failed") return tl::unexpected(OperationError(op));
  return Ok();
}

Result<Json> Client::SandboxAction(std::string_view id, std::string_view action, const Json& body) {
  return Call("POST", SandboxPath(id) + "/" + PathEscape(action), body);
}

}  // namespace space::client
