// test_http_server: a tiny HTTP/1.1 server on 127.0.0.1 for client_test only.
//
// It stands at the network boundary so the client's wire handling (status and error
// bodies, headers, chunked transfer, abrupt closes, keep-alive) can be tested before and
// independently of spaced; it knows nothing of SPACE's semantics beyond what each test's
// handler writes. One thread accepts; one thread per connection reads requests (Content-Length
// or chunked bodies) and calls the handler, which writes raw bytes. Requests are recorded.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace space::testing {

struct FakeRequest {
  std::string method;
  std::string target;                          // path?query as sent
  std::map<std::string, std::string> headers;  // lower-cased names
  std::string body;                            // decoded (chunked or not)
  int connection = 0;                          // index of the connection it came on

  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
  std::string Path() const { return target.substr(0, target.find('?')); }
};

class FakeConn {
 public:
  explicit FakeConn(int fd) : fd_(fd) {}
  // Sends all bytes; false if the peer is gone.
  bool Write(std::string_view data) {
    while (!data.empty()) {
      ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  // Closes the connection after the handler returns (no keep-alive).
  void Close() { closed_ = true; }
  bool closed() const { return closed_; }

 private:
  int fd_;
  bool closed_ = false;
};

// A complete response with Content-Length.
inline std::string ResponseText(int status, std::string_view body,
                                const std::vector<std::string>& headers = {},
                                std::string_view content_type = "application/json") {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " X\r\n";
  if (!content_type.empty()) out += "Content-Type: " + std::string(content_type) + "\r\n";
  for (const std::string& h : headers) out += h + "\r\n";
  out += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  out += body;
  return out;
}

inline std::string ChunkText(std::string_view piece) {
  char size[32];
  std::snprintf(size, sizeof size, "%zx\r\n", piece.size());
  return std::string(size) + std::string(piece) + "\r\n";
}

using FakeHandler = std::function<void(const FakeRequest&, FakeConn&)>;

class FakeHttpServer {
 public:
  explicit FakeHttpServer(FakeHandler handler) : handler_(std::move(handler)) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(listen_fd_, 64) != 0) {
      std::perror("fake server bind/listen");
      std::abort();
    }
    socklen_t len = sizeof addr;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }

  ~FakeHttpServer() {
    stop_ = true;
    acceptor_.join();
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int fd : conn_fds_) ::shutdown(fd, SHUT_RDWR);
    }
    for (std::thread& t : conn_threads_) t.join();
    for (int fd : conn_fds_) ::close(fd);
    ::close(listen_fd_);
  }

  int port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<FakeRequest> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  int connections() {
    std::lock_guard<std::mutex> lock(mu_);
    return connections_;
  }

 private:
  void AcceptLoop() {
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      std::lock_guard<std::mutex> lock(mu_);
      int index = connections_++;
      conn_fds_.push_back(fd);
      conn_threads_.emplace_back([this, fd, index] { Serve(fd, index); });
    }
  }

  // Reads more bytes into buf; false on EOF/error.
  static bool Fill(int fd, std::string& buf) {
    char tmp[65536];
    for (;;) {
      ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      buf.append(tmp, static_cast<size_t>(n));
      return true;
    }
  }

  static bool ReadLine(int fd, std::string& buf, std::string& line) {
    size_t eol;
    while ((eol = buf.find("\r\n")) == std::string::npos) {
      if (!Fill(fd, buf)) return false;
    }
    line = buf.substr(0, eol);
    buf.erase(0, eol + 2);
    return true;
  }

  static bool ReadExact(int fd, std::string& buf, size_t n, std::string& out) {
    while (buf.size() < n) {
      if (!Fill(fd, buf)) return false;
    }
    out.append(buf, 0, n);
    buf.erase(0, n);
    return true;
  }

  void Serve(int fd, int index) {
    std::string buf;
    for (;;) {
      FakeRequest req;
      req.connection = index;
      std::string line;
      if (!ReadLine(fd, buf, line)) break;
      size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
      if (sp1 == std::string::npos || sp2 == sp1) break;
      req.method = line.substr(0, sp1);
      req.target = line.substr(sp1 + 1, sp2 - sp1 - 1);
      bool ok = true;
      for (;;) {
        if (!ReadLine(fd, buf, line)) {
          ok = false;
          break;
        }
        if (line.empty()) break;
        size_t colon = line.find(':');
        if (colon == std::string::npos) continue;
        std::string name = line.substr(0, colon);
        std::transform(name.begin(), name.end(), name.begin(),
                       [](unsigned char c) { return std::tolower(c); });
        size_t v = colon + 1;
        while (v < line.size() && line[v] == ' ') ++v;
        req.headers[name] = line.substr(v);
      }
      if (!ok) break;
      if (req.Header("transfer-encoding") == "chunked") {
        for (;;) {
          if (!ReadLine(fd, buf, line)) {
            ok = false;
            break;
          }
          size_t size = std::stoul(line, nullptr, 16);
          if (size == 0) {
            ReadLine(fd, buf, line);  // the empty line after the last chunk
            break;
          }
          if (!ReadExact(fd, buf, size, req.body) || !ReadLine(fd, buf, line)) {
            ok = false;
            break;
          }
        }
      } else if (!req.Header("content-length").empty()) {
        ok = ReadExact(fd, buf, std::stoul(req.Header("content-length")), req.body);
      }
      if (!ok) break;
      {
        std::lock_guard<std::mutex> lock(mu_);
        requests_.push_back(req);
      }
      FakeConn conn(fd);
      handler_(req, conn);
      if (conn.closed()) break;
    }
    ::shutdown(fd, SHUT_RDWR);
    // The fd itself is closed when the server is destroyed (its number stays reserved
    // so the shutdown() in the destructor cannot hit a reused descriptor).
  }

  FakeHandler handler_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<int> conn_fds_;
  std::vector<std::thread> conn_threads_;
  std::vector<FakeRequest> requests_;
  int connections_ = 0;
};

}  // namespace space::testing
