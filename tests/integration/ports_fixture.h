// ports_fixture: what ports_test and https_test share: the servers a sandbox runs for them
// (busybox httpd on its loopback, shell servers under busybox nc), raw loopback sockets, and
// a parsed HTTP/1.1 answer as spaced sent it.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include "tests/integration/harness.h"

namespace space::testing {

using namespace std::chrono_literals;

// In the sandbox: a page, a CGI that streams, and three nc servers.
inline const char kSetup[] = R"SH(
set -e
mkdir -p /www/cgi-bin
echo "hello from the sandbox" > /www/index.html
cat > /www/cgi-bin/slow <<'EOF'
#!/bin/sh
printf 'Content-Type: text/plain\r\n\r\n'
echo one
sleep 1
echo two
sleep 1
echo three
EOF
chmod +x /www/cgi-bin/slow
# Echo: answers with the request it got (head only), as its body.
cat > /tmp/echo.sh <<'EOF'
#!/bin/sh
req=""
while read -r line; do
  line=$(printf '%s' "$line" | tr -d '\r')
  [ -z "$line" ] && break
  req="$req$line
"
done
printf 'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' "${#req}" "$req"
EOF
# Chunked: three pieces a second apart.
cat > /tmp/chunked.sh <<'EOF'
#!/bin/sh
while read -r line; do
  line=$(printf '%s' "$line" | tr -d '\r')
  [ -z "$line" ] && break
done
printf 'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n'
printf '6\r\npiece1\r\n'
sleep 1
printf '6\r\npiece2\r\n'
sleep 1
printf '6\r\npiece3\r\n0\r\n\r\n'
EOF
# Upgrade: 101, then echoes every byte (a WebSocket-shaped tunnel).
cat > /tmp/ws.sh <<'EOF'
#!/bin/sh
while read -r line; do
  line=$(printf '%s' "$line" | tr -d '\r')
  [ -z "$line" ] && break
done
printf 'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n'
exec cat
EOF
chmod +x /tmp/echo.sh /tmp/chunked.sh /tmp/ws.sh
)SH";

struct Response {
  int status = 0;
  std::string head;  // status line and headers
  std::string body;  // as sent (chunked framing kept)
  std::string Header(const std::string& name) const {
    std::string lower_head = head, lower_name = name + ":";
    for (auto& c : lower_head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (auto& c : lower_name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    size_t pos = lower_head.find("\r\n" + lower_name);
    if (pos == std::string::npos) return "";
    pos += 2 + lower_name.size();
    size_t end = head.find("\r\n", pos);
    std::string v = head.substr(pos, end - pos);
    while (!v.empty() && v.front() == ' ') v.erase(0, 1);
    return v;
  }
};

inline int Dial(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Reads what arrives within `ms` (or until EOF); "" on timeout with nothing.
inline std::string ReadSome(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, ms) != 1) return "";
  char buf[65536];
  ssize_t n = ::read(fd, buf, sizeof buf);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

inline Response Parse(const std::string& raw) {
  Response r;
  size_t end = raw.find("\r\n\r\n");
  r.head = raw.substr(0, end == std::string::npos ? raw.size() : end);
  if (end != std::string::npos) r.body = raw.substr(end + 4);
  if (r.head.size() > 12 && r.head.compare(0, 5, "HTTP/") == 0) r.status = std::atoi(r.head.c_str() + 9);
  return r;
}

// A sandbox (created with `body`) with the servers of kSetup running: busybox httpd on its
// 127.0.0.1:8080, nc servers on 8081 (echo), 8082 (chunked), 8083 (101, then a tunnel).
inline std::string StartPortServers(client::Client& c, const Json& body) {
  std::string id = CreateSandbox(c, body);
  if (id.empty()) return id;
  auto setup = c.Run(id, std::vector<std::string>{"sh", "-c", kSetup});
  if (!setup || setup->exit_code != 0) {
    ADD_FAILURE() << "setup: " << (setup ? setup->err : setup.error().message);
    return id;
  }
  for (std::vector<std::string> argv :
       {std::vector<std::string>{"busybox", "httpd", "-f", "-p", "127.0.0.1:8080", "-h", "/www"},
        {"busybox", "nc", "-ll", "-p", "8081", "-e", "/tmp/echo.sh"},
        {"busybox", "nc", "-ll", "-p", "8082", "-e", "/tmp/chunked.sh"},
        {"busybox", "nc", "-ll", "-p", "8083", "-e", "/tmp/ws.sh"}}) {
    auto started = c.StartCommand(id, Json{{"argv", argv}});
    if (!started) ADD_FAILURE() << "start " << argv[1] << ": " << started.error().message;
  }
  // Wait until all four listen (netstat is in busybox).
  for (int i = 0; i < 100; ++i) {
    auto r = c.Run(id, std::vector<std::string>{"sh", "-c", "netstat -ltn | grep -cE ':(8080|8081|8082|8083) '"});
    if (r && Daemon::Trim(r->out) == "4") return id;
    std::this_thread::sleep_for(50ms);
  }
  ADD_FAILURE() << "the servers in " << id << " did not start listening";
  return id;
}

}  // namespace space::testing
