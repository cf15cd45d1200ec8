#include "net/sniff.h"

#include <cstdint>

#include "net/policy.h"

namespace space::net {
namespace {

constexpr size_t kMaxHead = 16 * 1024;

struct Reader {
  std::string_view d;
  size_t pos = 0;
  bool ok = true;
  size_t left() const { return ok ? d.size() - pos : 0; }
  uint32_t U(int n) {
    if (!ok || left() < static_cast<size_t>(n)) {
      ok = false;
      return 0;
    }
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) v = (v << 8) | static_cast<uint8_t>(d[pos++]);
    return v;
  }
  std::string_view Bytes(size_t n) {
    if (!ok || left() < n) {
      ok = false;
      return {};
    }
    std::string_view s = d.substr(pos, n);
    pos += n;
    return s;
  }
};

void SetHost(Sniffed& s, std::string_view host) {
  if (ParseIpv4(host) || host.find(':') != std::string_view::npos) {
    s.literal = std::string(host);
    return;
  }
  s.name = NormaliseHostName(host);
  if (s.name.empty()) s.literal = std::string(host);
}

char Lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool IEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (Lower(a[i]) != Lower(b[i])) return false;
  }
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

}  // namespace

bool SplitHostPort(std::string_view hp, std::string* host, int* port) {
  *port = 0;
  std::string_view h = hp, p;
  if (!hp.empty() && hp.front() == '[') {
    size_t close = hp.find(']');
    if (close == std::string_view::npos) return false;
    h = hp.substr(1, close - 1);
    std::string_view rest = hp.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return false;
      p = rest.substr(1);
    }
  } else if (size_t colon = hp.rfind(':'); colon != std::string_view::npos) {
    if (hp.find(':') != colon) return false;  // bare IPv6 without brackets
    h = hp.substr(0, colon);
    p = hp.substr(colon + 1);
    if (p.empty()) return false;
  }
  if (h.empty()) return false;
  if (!p.empty()) {
    if (p.size() > 5) return false;
    int v = 0;
    for (char c : p) {
      if (c < '0' || c > '9') return false;
      v = v * 10 + (c - '0');
    }
    if (v < 1 || v > 65535) return false;
    *port = v;
  }
  *host = std::string(h);
  return true;
}

Sniffed SniffTls(std::string_view data) {
  Sniffed out;
  if (data.empty()) return out;
  if (static_cast<uint8_t>(data[0]) != 0x16) {
    out.state = Sniffed::State::kNotThisProtocol;
    return out;
  }
  if (data.size() < 5) return out;
  Reader rec{data};
  rec.U(1);
  uint32_t major = rec.U(1);
  rec.U(1);
  uint32_t rec_len = rec.U(2);
  if (major != 3 || rec_len == 0 || rec_len > 18432) {
    out.state = Sniffed::State::kNotThisProtocol;
    return out;
  }
  // The ClientHello may span several records; gather handshake bytes across them.
  std::string hs;
  size_t pos = 0;
  uint32_t need = 0;
  for (;;) {
    if (data.size() < pos + 5) return out;
    if (static_cast<uint8_t>(data[pos]) != 0x16) {
      out.state = Sniffed::State::kNotThisProtocol;
      return out;
    }
    size_t len = (static_cast<uint8_t>(data[pos + 3]) << 8) | static_cast<uint8_t>(data[pos + 4]);
    if (len == 0 || len > 18432) {
      out.state = Sniffed::State::kNotThisProtocol;
      return out;
    }
    if (data.size() < pos + 5 + len) {
      if (pos + 5 + len > kMaxHead) out.state = Sniffed::State::kNotThisProtocol;
      return out;
    }
    hs.append(data.substr(pos + 5, len));
    pos += 5 + len;
    if (need == 0 && hs.size() >= 4) {
      if (static_cast<uint8_t>(hs[0]) != 1) {  // not a ClientHello
        out.state = Sniffed::State::kNotThisProtocol;
        return out;
      }
      need = 4 + ((static_cast<uint8_t>(hs[1]) << 16) | (static_cast<uint8_t>(hs[2]) << 8) |
                  static_cast<uint8_t>(hs[3]));
      if (need > kMaxHead) {
        out.state = Sniffed::State::kNotThisProtocol;
        return out;
      }
    }
    if (need != 0 && hs.size() >= need) break;
  }
  Reader r{std::string_view(hs).substr(4, need - 4)};
  r.U(2);                      // client_version
  r.Bytes(32);                 // random
  r.Bytes(r.U(1));             // session_id
  r.Bytes(r.U(2));             // cipher_suites
  r.Bytes(r.U(1));             // compression_methods
  out.state = Sniffed::State::kDone;
  if (r.left() == 0) return out;  // no extensions
  Reader ext{r.Bytes(r.U(2))};
  while (ext.ok && ext.left() >= 4) {
    uint32_t type = ext.U(2);
    std::string_view body = ext.Bytes(ext.U(2));
    if (type != 0) continue;
    Reader sn{body};
    Reader list{sn.Bytes(sn.U(2))};
    while (list.ok && list.left() >= 3) {
      uint32_t name_type = list.U(1);
      std::string_view name = list.Bytes(list.U(2));
      if (list.ok && name_type == 0) {
        SetHost(out, name);
        return out;
      }
    }
  }
  if (!r.ok) out.state = Sniffed::State::kNotThisProtocol;
  return out;
}

Sniffed SniffHttp(std::string_view data) {
  Sniffed out;
  // A request line starts with a method token: letters only.
  size_t i = 0;
  while (i < data.size() && i < 16 && data[i] >= 'A' && data[i] <= 'Z') ++i;
  if (i < data.size() && (i == 0 || data[i] != ' ')) {
    out.state = Sniffed::State::kNotThisProtocol;
    return out;
  }
  size_t end = data.find("\r\n\r\n");
  if (end == std::string_view::npos) {
    if (data.size() >= kMaxHead) out.state = Sniffed::State::kNotThisProtocol;
    return out;
  }
  out.head_bytes = end + 4;
  std::string_view head = data.substr(0, end + 2);
  size_t eol = head.find("\r\n");
  std::string_view line = head.substr(0, eol);
  std::string_view method = line.substr(0, line.find(' '));
  std::string_view rest = line.substr(method.size() + 1);
  std::string_view target = rest.substr(0, rest.find(' '));
  std::string host_from_target;
  int port = 0;
  if (method == "CONNECT") {
    std::string h;
    if (!SplitHostPort(target, &h, &port) || port == 0) {
      out.state = Sniffed::State::kNotThisProtocol;
      return out;
    }
    host_from_target = h;
  } else if (StartsWith(target, "http://") || StartsWith(target, "https://")) {
    std::string_view auth = target.substr(target.find("//") + 2);
    auth = auth.substr(0, auth.find_first_of("/?#"));
    if (size_t at = auth.rfind('@'); at != std::string_view::npos) auth = auth.substr(at + 1);
    std::string h;
    if (!SplitHostPort(auth, &h, &port)) {
      out.state = Sniffed::State::kNotThisProtocol;
      return out;
    }
    if (port == 0) port = StartsWith(target, "https://") ? 443 : 80;
    host_from_target = h;
  }
  std::string host_header;
  size_t pos = eol + 2;
  while (pos < head.size()) {
    size_t next = head.find("\r\n", pos);
    std::string_view h = head.substr(pos, next - pos);
    pos = next + 2;
    size_t colon = h.find(':');
    if (colon == std::string_view::npos) continue;
    if (IEquals(h.substr(0, colon), "host")) {
      host_header = std::string(Trim(h.substr(colon + 1)));
      break;
    }
  }
  out.state = Sniffed::State::kDone;
  out.port = port;
  if (!host_from_target.empty()) {
    SetHost(out, host_from_target);
  } else if (!host_header.empty()) {
    std::string h;
    int p = 0;
    if (SplitHostPort(host_header, &h, &p)) SetHost(out, h);
  }
  return out;
}

}  // namespace space::net
