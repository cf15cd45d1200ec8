// The egress proxy. Every TCP connection a networked sandbox opens is redirected here by
// the nftables table (docs/networking.md): the proxy finds the sandbox by the source
// address, reads where the connection was going (SO_ORIGINAL_DST), peeks the name the
// client asks for (HTTP Host, TLS SNI, CONNECT target), decides under the sandbox's policy,
// dials the destination itself — by the name when the name is what allowed it, so
// /etc/hosts or a forged Host cannot steer it elsewhere — and relays bytes both ways.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/netfilter_ipv4.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include <spdlog/spdlog.h>

#include "net/internal.h"
#include "net/sniff.h"
#include "sys/sys.h"

namespace space::net {
namespace {

constexpr size_t kPeekMax = 16 * 1024;
constexpr int kPeekTimeoutMs = 5000;
constexpr int kConnectTimeoutMs = 10000;
constexpr int kMaxFlowsPerSandbox = 512;
constexpr int kMaxFlows = 8192;

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Peeks at the client's first bytes until `sniff` is done with them (or the timeout).
Sniffed PeekName(int fd, Sniffed (*sniff)(std::string_view)) {
  std::string buf(kPeekMax, '\0');
  int64_t deadline = MonotonicNanos() + int64_t{kPeekTimeoutMs} * 1000000;
  size_t have = 0;
  for (;;) {
    int left = static_cast<int>((deadline - MonotonicNanos()) / 1000000);
    if (left <= 0) return {Sniffed::State::kNotThisProtocol};
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, left);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return {Sniffed::State::kNotThisProtocol};
    ssize_t n = ::recv(fd, buf.data(), buf.size(), MSG_PEEK);
    if (n <= 0) return {Sniffed::State::kNotThisProtocol};
    Sniffed s = sniff(std::string_view(buf.data(), static_cast<size_t>(n)));
    if (s.state != Sniffed::State::kNeedMore) return s;
    if (static_cast<size_t>(n) >= buf.size()) return {Sniffed::State::kNotThisProtocol};
    if (static_cast<size_t>(n) == have) ::usleep(1000);  // more of the head is on its way
    have = static_cast<size_t>(n);
  }
}

Result<int> DialAddr(uint32_t addr, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return ErrnoFail("socket");
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 && errno != EINPROGRESS) {
    int e = errno;
    ::close(fd);
    return ErrnoFail("connect " + Ipv4ToString(addr) + ":" + std::to_string(port), e);
  }
  pollfd p{fd, POLLOUT, 0};
  int r;
  do {
    r = ::poll(&p, 1, kConnectTimeoutMs);
  } while (r < 0 && errno == EINTR);
  int err = 0;
  socklen_t len = sizeof err;
  if (r == 0) err = ETIMEDOUT;
  else if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  if (err != 0) {
    ::close(fd);
    return ErrnoFail("connect " + Ipv4ToString(addr) + ":" + std::to_string(port), err);
  }
  int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

bool SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// A refusal the client can read: only where the proxy speaks HTTP to it already.
void SendForbidden(int fd, const std::string& reason) {
  std::string body = "space egress proxy: blocked: " + reason + "\n";
  std::string resp = "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nX-Space-Proxy-Error: " +
                     reason + "\r\nContent-Length: " + std::to_string(body.size()) +
                     "\r\nConnection: close\r\n\r\n" + body;
  (void)SendAll(fd, resp);
}

void SendBadGateway(int fd, const std::string& reason) {
  std::string body = "space egress proxy: " + reason + "\n";
  std::string resp = "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nX-Space-Proxy-Error: " +
                     reason + "\r\nContent-Length: " + std::to_string(body.size()) +
                     "\r\nConnection: close\r\n\r\n" + body;
  (void)SendAll(fd, resp);
}

// Waits until `fd` is ready for `events`; false when it never will be (an error or hang-up
// with nothing left to read).
bool WaitFor(int fd, short events) {
  for (;;) {
    pollfd pf{fd, events, 0};
    int r = ::poll(&pf, 1, -1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return false;
    if (pf.revents & events) return true;
    if (pf.revents & (POLLERR | POLLHUP | POLLNVAL)) return (events & POLLIN) && (pf.revents & POLLHUP);
  }
}

// Moves bytes from one socket to the other through a pipe with splice(2) (no copy through
// user space) until `from` ends; then half-closes `to`. A failure ends the flow both ways.
// Filling the pipe and draining it run in two threads, so reading the source never waits
// for the destination to take the last chunk (docs/benchmarks.md, "Networking"). Both
// splice without blocking (the sockets are O_NONBLOCK) and wait in poll(2): a splice that
// sleeps on a socket holds the pipe's lock, and would stall the other thread.
uint64_t Pump(int from, int to) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return 0;
  (void)::fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
  constexpr unsigned kFlags = SPLICE_F_MOVE | SPLICE_F_NONBLOCK;
  std::atomic<bool> failed{false};
  std::thread drain([&] {
    for (;;) {
      ssize_t m = ::splice(p[0], nullptr, to, nullptr, 1 << 20, kFlags);
      if (m > 0) continue;
      if (m == 0) return;  // the filler closed the pipe and all of it went out
      if (errno == EINTR) continue;
      // EAGAIN: the pipe is empty or `to` is full; wait for whichever it is.
      // (A pipe whose filler is gone polls as ready: the next splice answers 0.)
      if (errno == EAGAIN && WaitFor(p[0], POLLIN) && WaitFor(to, POLLOUT)) continue;
      failed = true;
      ::shutdown(from, SHUT_RDWR);  // wakes the filler waiting for the source
      return;
    }
  });
  uint64_t total = 0;
  for (;;) {
    ssize_t n = ::splice(from, nullptr, p[1], nullptr, 1 << 20, kFlags);
    if (n > 0) {
      total += static_cast<uint64_t>(n);
      continue;
    }
    if (n == 0) break;
    if (errno == EINTR) continue;
    if (errno == EAGAIN && WaitFor(p[1], POLLOUT) && WaitFor(from, POLLIN)) continue;
    failed = true;
    break;
  }
  if (failed) ::shutdown(to, SHUT_RDWR);  // a drain waiting for room in `to` ends too
  ::close(p[1]);
  drain.join();
  ::close(p[0]);
  if (failed) {
    ::shutdown(from, SHUT_RDWR);
    ::shutdown(to, SHUT_RDWR);
  } else {
    ::shutdown(to, SHUT_WR);
  }
  return total;
}

// RFC 7766 framing: a two-byte length before each message. At most 32 queries per
// connection, each read within 10 s.
void ServeDnsOverTcp(Shared& shared, SandboxNet& sb, int fd) {
  auto read_all = [fd](char* p, size_t n) {
    while (n > 0) {
      pollfd pf{fd, POLLIN, 0};
      if (::poll(&pf, 1, 10000) <= 0) return false;
      ssize_t r = ::recv(fd, p, n, 0);
      if (r <= 0) return false;
      p += r;
      n -= static_cast<size_t>(r);
    }
    return true;
  };
  for (int i = 0; i < 32; ++i) {
    unsigned char len[2];
    if (!read_all(reinterpret_cast<char*>(len), 2)) return;
    size_t n = (size_t{len[0]} << 8) | len[1];
    if (n < 12) return;
    std::string msg(n, '\0');
    if (!read_all(msg.data(), n)) return;
    std::string reply = AnswerDnsQueryBlocking(shared, sb, msg);
    if (reply.empty() || reply.size() > 65535) return;
    std::string framed;
    framed.push_back(static_cast<char>(reply.size() >> 8));
    framed.push_back(static_cast<char>(reply.size() & 0xff));
    framed += reply;
    if (!sys::WriteAll(fd, framed)) return;
  }
}

// Copies bytes both ways until both directions are closed (or the flow is cut: Recheck
// shuts the sockets down, which ends both splices).
void Relay(Flow& f, uint64_t* out, uint64_t* in) {
  // Pump waits in poll(2), never in a splice: a splice sleeping on a blocking socket holds
  // its pipe's lock.
  for (int fd : {f.upstream_fd, f.client_fd}) {
    int fl = ::fcntl(fd, F_GETFL);
    if (fl >= 0) (void)::fcntl(fd, F_SETFL, fl | O_NONBLOCK);
  }
  std::thread down([&] { *in = Pump(f.upstream_fd, f.client_fd); });
  *out += Pump(f.client_fd, f.upstream_fd);
  down.join();
}

}  // namespace

Proxy::~Proxy() {
  for (int& fd : fds_) {
    if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
  }
  for (auto& t : threads_) t.join();
  for (int& fd : fds_) {
    if (fd >= 0) ::close(fd);
  }
}

Status Proxy::Start() {
  for (int k = 0; k < 3; ++k) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return ErrnoFail("proxy: socket");
    fds_[k] = fd;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_ANY);  // nftables admits only sandbox interfaces
    if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) return ErrnoFail("proxy: bind");
    if (::listen(fd, 1024) != 0) return ErrnoFail("proxy: listen");
    socklen_t len = sizeof sa;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
    ports_[k] = ntohs(sa.sin_port);
  }
  for (int k = 0; k < 3; ++k) {
    threads_.emplace_back([this, k] { AcceptLoop(static_cast<Kind>(k), fds_[k]); });
  }
  return Ok();
}

void Proxy::AcceptLoop(Kind kind, int lfd) {
  for (;;) {
    int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (shared_->stopping.load() || errno == EINVAL || errno == EBADF) return;
      if (errno == EMFILE || errno == ENFILE) ::usleep(10000);
      continue;
    }
    if (shared_->flows.fetch_add(1) >= kMaxFlows) {
      shared_->flows.fetch_sub(1);
      ::close(fd);
      continue;
    }
    std::thread([this, kind, fd] {
      Serve(kind, fd);
      ::close(fd);
      shared_->flows.fetch_sub(1);
    }).detach();
  }
}

void Proxy::Serve(Kind kind, int client_fd) {
  sockaddr_in peer{}, orig{};
  socklen_t len = sizeof peer;
  if (::getpeername(client_fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) return;
  auto sb = shared_->ByAddr(ntohl(peer.sin_addr.s_addr));
  if (!sb) return;  // not one of our sandboxes
  len = sizeof orig;
  if (::getsockopt(client_fd, SOL_IP, SO_ORIGINAL_DST, &orig, &len) != 0) return;
  uint32_t dst = ntohl(orig.sin_addr.s_addr);
  int port = ntohs(orig.sin_port);
  int one = 1;
  ::setsockopt(client_fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);

  DecisionRecord rec;
  rec.time_ms = NowUnixMillis();
  rec.destination = Ipv4ToString(dst);
  rec.port = port;
  rec.proto = kind == kHttp ? "http" : kind == kTls ? "tls" : "tcp";

  // DNS over TCP, to whatever server (every TCP port is redirected here): answered under
  // the same rules as over UDP, never relayed as a flow.
  if (kind == kOther && port == 53) {
    ServeDnsOverTcp(*shared_, *sb, client_fd);
    return;
  }

  // The explicit proxy (HTTP_PROXY) lives on the gateway's port 3128.
  bool explicit_proxy = kind == kOther && dst == sb->gateway && port == kExplicitPort;
  std::string consumed_reply;  // what to answer a CONNECT with once dialled
  std::string forward_head;    // a rewritten request head to send upstream first
  bool connect = false;        // the explicit proxy's CONNECT: TLS follows
  Sniffed s;
  if (explicit_proxy) {
    rec.proto = "connect";
    s = PeekName(client_fd, SniffHttp);
    if (s.state != Sniffed::State::kDone) return;
    std::string head(s.head_bytes, '\0');
    if (::recv(client_fd, head.data(), head.size(), MSG_WAITALL) != static_cast<ssize_t>(head.size()))
      return;
    connect = StartsWith(head, "CONNECT ");
    if (s.port == 0) {
      SendForbidden(client_fd, "the explicit proxy takes CONNECT or absolute URLs");
      return;
    }
    port = s.port;
    rec.port = port;
    std::string target = !s.name.empty() ? s.name : s.literal;
    rec.destination = target;
    auto ip = ParseIpv4(target);
    if (s.name.empty() && !ip) {
      SendForbidden(client_fd, "bad target host");
      return;
    }
    dst = ip ? *ip : 0;
    if (connect) {
      consumed_reply = "HTTP/1.1 200 Connection established\r\n\r\n";
    } else {
      // Origin-form for the server: "GET http://h/p HTTP/1.1" -> "GET /p HTTP/1.1".
      size_t sp = head.find(' ');
      size_t scheme = head.find("//", sp);
      size_t path = head.find_first_of("/ ", scheme + 2);
      if (path != std::string::npos && head[path] == ' ') {
        head.insert(path, "/");
      }
      head.erase(sp + 1, path - sp - 1);
      forward_head = head;
    }
  } else if (kind == kHttp) {
    s = PeekName(client_fd, SniffHttp);
  } else if (kind == kTls) {
    s = PeekName(client_fd, SniffTls);
  }
  rec.name = s.state == Sniffed::State::kDone ? s.name : "";

  Policy::Decision d;
  {
    std::lock_guard l(sb->mu);
    d = sb->policy.Decide(dst, rec.name);
  }
  std::vector<uint32_t> named;  // the explicit proxy's target, resolved
  if (explicit_proxy && dst == 0 && !d.by_name) {
    // A name the domain rules did not allow: judge it by the addresses it resolves to.
    auto addrs = shared_->Resolve(rec.name);
    if (!addrs) {
      d = {Policy::Verdict::kDeny, "cannot resolve " + rec.name + ": " + addrs.error().message, false};
    } else {
      dst = addrs->front();
      std::lock_guard l(sb->mu);
      d = sb->policy.Decide(dst, "");
      named = *addrs;
    }
  }
  // Addresses are judged as well when the name did not decide (the name of an IP literal).
  if (d.verdict == Policy::Verdict::kAllow && !d.by_name && !shared_->Reachable(dst)) {
    d = {Policy::Verdict::kDeny, "always denied (" + Ipv4ToString(dst) + ")", false};
  }
  std::vector<uint32_t> targets;
  if (d.verdict == Policy::Verdict::kAllow) {
    if (!named.empty()) {
      for (uint32_t a : named) {
        if (shared_->Reachable(a)) targets.push_back(a);
      }
      if (targets.empty())
        d = {Policy::Verdict::kDeny, rec.name + " resolves only to always-denied addresses", false};
    } else if (d.by_name) {
      auto addrs = shared_->Resolve(rec.name);
      if (!addrs) {
        d = {Policy::Verdict::kDeny, "cannot resolve " + rec.name + ": " + addrs.error().message, false};
      } else {
        for (uint32_t a : *addrs) {
          if (shared_->Reachable(a)) targets.push_back(a);
        }
        if (targets.empty())
          d = {Policy::Verdict::kDeny, rec.name + " resolves only to always-denied addresses", false};
      }
    } else {
      targets.push_back(dst);
    }
  }
  rec.allowed = d.verdict == Policy::Verdict::kAllow;
  rec.reason = d.reason;
  if (!rec.allowed) {
    spdlog::info("egress {} {} {}:{} name={} denied: {}", sb->id, rec.proto, rec.destination, port,
                 rec.name, rec.reason);
    sb->Record(rec);
    if (explicit_proxy || kind == kHttp) SendForbidden(client_fd, rec.reason);
    return;
  }

  Fd up;
  std::string dial_error;
  for (uint32_t a : targets) {
    auto fd = DialAddr(a, port);
    if (fd) {
      up.fd = *fd;
      rec.destination = rec.name.empty() ? Ipv4ToString(a) : rec.destination;
      break;
    }
    dial_error = fd.error().message;
  }
  if (up.fd < 0) {
    rec.allowed = true;
    rec.reason += "; dial failed: " + dial_error;
    sb->Record(rec);
    if (explicit_proxy || kind == kHttp) SendBadGateway(client_fd, "dial failed: " + dial_error);
    return;
  }
  uint64_t seq = sb->Record(rec);
  spdlog::debug("egress {} {} {}:{} name={} allowed: {}", sb->id, rec.proto, rec.destination, port,
                rec.name, rec.reason);

  Flow f;
  f.client_fd = client_fd;
  f.upstream_fd = up.fd;
  f.addr = targets.front();
  f.port = port;
  f.name = rec.name;
  {
    std::lock_guard l(sb->mu);
    if (static_cast<int>(sb->flows.size()) >= kMaxFlowsPerSandbox) return;
    sb->flows.insert(&f);
  }
  uint64_t out = 0, in = 0;
  bool ok = true;
  if (!consumed_reply.empty()) ok = SendAll(client_fd, consumed_reply);
  if (ok && !forward_head.empty()) {
    ok = SendAll(up.fd, forward_head);
    out += forward_head.size();
  }
  // TLS to a host some secret may be sent to is terminated (the sandbox trusts its CA) so
  // the placeholders can be swapped; everything else is spliced untouched.
  std::vector<tls::Secret> secrets;
  std::shared_ptr<tls::SandboxCa> ca;
  if (!rec.name.empty() && (kind == kTls || (explicit_proxy && connect && port == 443))) {
    std::lock_guard l(sb->mu);
    for (const auto& s : sb->policy.secrets)
      secrets.push_back({s.name, s.value, s.hosts, s.placeholder});
    ca = sb->ca;
  }
  if (ok && ca && shared_->trust && tls::AnySecretAppliesTo(secrets, rec.name)) {
    tls::MitmOptions mo;
    mo.host = rec.name;
    mo.secrets = std::move(secrets);
    mo.trust = shared_->trust;
    tls::MitmResult m = tls::RunMitm(*ca, client_fd, up.fd, mo);
    out += m.bytes_up;
    in += m.bytes_down;
    DecisionRecord note = rec;
    note.proto = "tls-secrets";
    note.reason = m.outcome + " (" + std::to_string(m.substitutions) + " substitutions)";
    note.allowed = true;
    sb->Record(std::move(note));
  } else if (ok) {
    uint64_t up_bytes = 0;
    Relay(f, &up_bytes, &in);
    out += up_bytes;
  }
  {
    std::lock_guard l(sb->mu);
    sb->flows.erase(&f);
  }
  sb->AddBytes(seq, out, in);
}

void Proxy::Recheck(SandboxNet& sb) {
  std::lock_guard l(sb.mu);
  for (Flow* f : sb.flows) {
    auto d = sb.policy.Decide(f->addr, f->name);
    if (d.verdict == Policy::Verdict::kAllow) continue;
    f->cut.store(true);
    ::shutdown(f->client_fd, SHUT_RDWR);
    ::shutdown(f->upstream_fd, SHUT_RDWR);
    spdlog::info("egress {}: cut {}:{} name={}: {}", sb.id, Ipv4ToString(f->addr), f->port, f->name,
                 d.reason);
  }
}

}  // namespace space::net
