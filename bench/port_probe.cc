// port_probe: a tiny static HTTP/1.1 client that times N sequential GETs and prints
// {"n","p50_us","p90_us","p99_us","mean_us"}. The same binary runs on the host (through
// spaced's port, Host {port}-{id}.localhost) and inside the sandbox (straight to
// 127.0.0.1:port), so the two figures of space_ports_bench differ only by the path.
//
// Usage: port_probe IPV4 PORT N HOST [--keepalive] [--header "Name: value"]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/dial.h"

namespace {

using space::bench::Dial;

// Reads one response (head + Content-Length body, or until EOF); returns its status.
int ReadResponse(int fd, bool* closed) {
  std::string data;
  char buf[16384];
  size_t head_end = std::string::npos, need = 0;
  bool sized = false;
  for (;;) {
    if (head_end != std::string::npos && sized && data.size() >= head_end + 4 + need) break;
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) {
      *closed = true;
      break;
    }
    data.append(buf, static_cast<size_t>(n));
    if (head_end == std::string::npos && (head_end = data.find("\r\n\r\n")) != std::string::npos) {
      std::string head = data.substr(0, head_end);
      for (auto& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      size_t cl = head.find("\r\ncontent-length:");
      if (cl != std::string::npos) {
        need = std::strtoull(head.c_str() + cl + 17, nullptr, 10);
        sized = true;
      }
      if (head.find("\r\nconnection: close") != std::string::npos) *closed = true;
    }
  }
  return data.size() > 12 ? std::atoi(data.c_str() + 9) : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: port_probe IPV4 PORT N HOST [--keepalive] [--header H]\n");
    return 2;
  }
  const char* ip = argv[1];
  int port = std::atoi(argv[2]);
  int n = std::atoi(argv[3]);
  std::string host = argv[4];
  bool keepalive = false;
  std::string extra;
  for (int i = 5; i < argc; ++i) {
    if (std::strcmp(argv[i], "--keepalive") == 0) keepalive = true;
    if (std::strcmp(argv[i], "--header") == 0 && i + 1 < argc) extra += std::string(argv[++i]) + "\r\n";
  }
  std::string req = "GET / HTTP/1.1\r\nHost: " + host + "\r\n" + extra +
                    (keepalive ? "" : "Connection: close\r\n") + "\r\n";
  std::vector<double> us;
  int fd = -1;
  for (int i = 0; i < n + 5; ++i) {  // 5 warm-up requests
    auto t0 = std::chrono::steady_clock::now();
    if (fd < 0) fd = Dial(ip, port);
    if (::write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) return 1;
    bool closed = false;
    int status = ReadResponse(fd, &closed);
    if (status != 200) {
      std::fprintf(stderr, "request %d: status %d\n", i, status);
      return 1;
    }
    if (closed || !keepalive) {
      ::close(fd);
      fd = -1;
    }
    auto t1 = std::chrono::steady_clock::now();
    if (i >= 5) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::sort(us.begin(), us.end());
  double sum = 0;
  for (double v : us) sum += v;
  auto pct = [&](double p) { return us[std::min(us.size() - 1, static_cast<size_t>(p * us.size()))]; };
  std::printf("{\"n\":%zu,\"p50_us\":%.0f,\"p90_us\":%.0f,\"p99_us\":%.0f,\"mean_us\":%.0f}\n", us.size(),
              pct(0.50), pct(0.90), pct(0.99), sum / us.size());
  return 0;
}
