#include "cluster/peer.h"

#include <curl/curl.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <mutex>

#include "sys/sys.h"

namespace space::cluster {

namespace {

struct Sink {
  int fd = -1;
  long status = 0;
  int64_t written = 0, max = 0;
  bool too_large = false, write_failed = false;
  std::string error_body;
  std::map<std::string, std::string> headers;
  CURL* curl = nullptr;
};

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* s = static_cast<Sink*>(user);
  std::string line(data, size * n);
  auto colon = line.find(':');
  if (colon != std::string::npos) {
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    std::string value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.erase(0, 1);
    while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' ')) value.pop_back();
    s->headers[name] = value;
  } else if (line.rfind("HTTP/", 0) == 0) {
    s->headers.clear();  // a new answer (after a 100 Continue, say)
  }
  return size * n;
}

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  auto* s = static_cast<Sink*>(user);
  const size_t len = size * n;
  if (s->status == 0) curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &s->status);
  if (s->status != 200) {
    if (s->error_body.size() < 4096) s->error_body.append(data, std::min<size_t>(len, 4096 - s->error_body.size()));
    return len;
  }
  if (s->written + static_cast<int64_t>(len) > s->max) {
    s->too_large = true;
    return 0;  // aborts the transfer
  }
  if (!sys::WriteAll(s->fd, std::string_view(data, len))) {
    s->write_failed = true;
    return 0;
  }
  s->written += static_cast<int64_t>(len);
  return len;
}

}  // namespace

Result<PeerFile> FetchToFile(const std::string& url, const std::string& bearer, const std::string& path,
                             int64_t max_bytes, int64_t timeout_ms) {
  static std::once_flag init;
  std::call_once(init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  sys::UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return ErrnoFail("create " + path);
  std::unique_ptr<CURL, void (*)(CURL*)> c(curl_easy_init(), curl_easy_cleanup);
  if (!c) return Fail(Errc::kInternal, "curl_easy_init failed");
  Sink sink;
  sink.fd = fd.get();
  sink.max = max_bytes;
  sink.curl = c.get();
  curl_slist* hdrs = curl_slist_append(nullptr, ("Authorization: Bearer " + bearer).c_str());
  std::unique_ptr<curl_slist, void (*)(curl_slist*)> free_hdrs(hdrs, curl_slist_free_all);
  curl_easy_setopt(c.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(c.get(), CURLOPT_HTTPHEADER, hdrs);
  curl_easy_setopt(c.get(), CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(c.get(), CURLOPT_HEADERDATA, &sink);
  curl_easy_setopt(c.get(), CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(c.get(), CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(c.get(), CURLOPT_TIMEOUT_MS, static_cast<long>(timeout_ms));
  curl_easy_setopt(c.get(), CURLOPT_CONNECTTIMEOUT_MS, 3000L);
  curl_easy_setopt(c.get(), CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(c.get(), CURLOPT_LOW_SPEED_TIME, 10L);
  curl_easy_setopt(c.get(), CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c.get(), CURLOPT_PROXY, "");
  curl_easy_setopt(c.get(), CURLOPT_PROTOCOLS_STR, "http,https");
  CURLcode rc = curl_easy_perform(c.get());
  if (sink.too_large) return Fail(Errc::kTooLarge, url + ": answer larger than " + std::to_string(max_bytes) + " bytes");
  if (sink.write_failed) return ErrnoFail("write " + path);
  if (rc != CURLE_OK) return Fail(Errc::kUnavailable, url + ": " + curl_easy_strerror(rc));
  long status = 0;
  curl_easy_getinfo(c.get(), CURLINFO_RESPONSE_CODE, &status);
  PeerFile out;
  out.status = static_cast<int>(status);
  out.headers = std::move(sink.headers);
  out.size = sink.written;
  out.error_body = std::move(sink.error_body);
  return out;
}

}  // namespace space::cluster
