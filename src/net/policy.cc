#include "net/policy.h"

#include <sodium.h>

#include <algorithm>
#include <cctype>
#include <set>

namespace space::net {

std::optional<uint32_t> ParseIpv4(std::string_view s) {
  uint32_t out = 0;
  int parts = 0;
  size_t i = 0;
  while (parts < 4) {
    if (i >= s.size() || s[i] < '0' || s[i] > '9') return std::nullopt;
    uint32_t v = 0;
    size_t digits = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      v = v * 10 + static_cast<uint32_t>(s[i] - '0');
      if (++digits > 3 || v > 255) return std::nullopt;
      ++i;
    }
    // No leading zeros ("010" is octal to inet_aton): refuse rather than guess.
    if (digits > 1 && s[i - digits] == '0') return std::nullopt;
    out = (out << 8) | v;
    ++parts;
    if (parts < 4) {
      if (i >= s.size() || s[i] != '.') return std::nullopt;
      ++i;
    }
  }
  if (i != s.size()) return std::nullopt;
  return out;
}

std::string Ipv4ToString(uint32_t ip) {
  return std::to_string(ip >> 24) + "." + std::to_string((ip >> 16) & 255) + "." +
         std::to_string((ip >> 8) & 255) + "." + std::to_string(ip & 255);
}

std::string Cidr::ToString() const { return Ipv4ToString(addr) + "/" + std::to_string(prefix); }

Result<Cidr> ParseCidr(std::string_view s) {
  std::string_view ip = s;
  int prefix = 32;
  if (size_t slash = s.find('/'); slash != std::string_view::npos) {
    ip = s.substr(0, slash);
    std::string_view p = s.substr(slash + 1);
    if (p.empty() || p.size() > 2 || !std::all_of(p.begin(), p.end(), [](char c) {
          return c >= '0' && c <= '9';
        }))
      return Fail(Errc::kInvalidArgument, "bad CIDR \"" + std::string(s) + "\": prefix must be 0-32");
    prefix = std::stoi(std::string(p));
    if (prefix > 32)
      return Fail(Errc::kInvalidArgument, "bad CIDR \"" + std::string(s) + "\": prefix must be 0-32");
  }
  if (ip.find(':') != std::string_view::npos)
    return Fail(Errc::kInvalidArgument,
                "\"" + std::string(s) + "\": IPv6 is not supported (sandboxes have IPv4 only)");
  auto addr = ParseIpv4(ip);
  if (!addr) return Fail(Errc::kInvalidArgument, "bad CIDR \"" + std::string(s) + "\"");
  uint32_t mask = prefix == 0 ? 0 : ~uint32_t{0} << (32 - prefix);
  if ((*addr & ~mask) != 0)
    return Fail(Errc::kInvalidArgument, "bad CIDR \"" + std::string(s) +
                                            "\": host bits set (did you mean " +
                                            Cidr{*addr & mask, prefix}.ToString() + "?)");
  return Cidr{*addr & mask, prefix};
}

namespace {

bool ValidLabel(std::string_view l) {
  if (l.empty() || l.size() > 63 || l.front() == '-' || l.back() == '-') return false;
  return std::all_of(l.begin(), l.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  });
}

bool ValidName(std::string_view n) {
  if (n.empty() || n.size() > 253) return false;
  size_t start = 0;
  for (;;) {
    size_t dot = n.find('.', start);
    if (!ValidLabel(n.substr(start, dot == std::string_view::npos ? dot : dot - start)))
      return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

}  // namespace

std::string NormaliseHostName(std::string_view name) {
  std::string n = Lower(name);
  if (!n.empty() && n.back() == '.') n.pop_back();
  return ValidName(n) ? n : std::string();
}

Result<std::string> NormaliseDomainPattern(std::string_view s) {
  std::string p = Lower(s);
  if (!p.empty() && p.back() == '.') p.pop_back();
  std::string_view rest = p;
  if (StartsWith(rest, "*.")) rest = rest.substr(2);
  // A bare TLD or a wildcard over one ("*.com") would open everything below it.
  if (!ValidName(rest) || rest.find('.') == std::string_view::npos ||
      ParseIpv4(rest).has_value())
    return Fail(Errc::kInvalidArgument,
                "bad domain \"" + std::string(s) +
                    "\": give a name with at least two labels, optionally prefixed by \"*.\"");
  return p;
}

bool DomainMatches(std::string_view pattern, std::string_view name) {
  if (StartsWith(pattern, "*.")) {
    std::string_view suffix = pattern.substr(1);  // ".example.com"
    return name.size() > suffix.size() && name.substr(name.size() - suffix.size()) == suffix;
  }
  return pattern == name;
}

bool Policy::AllowsName(std::string_view name) const {
  if (!internet() || name.empty()) return false;
  if (!restricted()) return true;
  return std::any_of(allow_domains.begin(), allow_domains.end(),
                     [&](const std::string& p) { return DomainMatches(p, name); });
}

Policy::Decision Policy::Decide(uint32_t addr, std::string_view name) const {
  if (!internet()) return {Verdict::kDeny, "network mode is none", false};
  if (!name.empty()) {
    for (const auto& p : allow_domains) {
      if (DomainMatches(p, name)) return {Verdict::kAllow, "allow_out " + p, true};
    }
  }
  for (const auto& c : allow_cidrs) {
    if (c.Contains(addr)) return {Verdict::kAllow, "allow_out " + c.ToString(), false};
  }
  for (const auto& c : deny_cidrs) {
    if (c.Contains(addr)) return {Verdict::kDeny, "deny_out " + c.ToString(), false};
  }
  if (restricted()) return {Verdict::kDeny, "not in allow_out", false};
  return {Verdict::kAllow, "internet", false};
}

Json Policy::ToJson(bool with_secret_values) const {
  Json secrets_json = Json::array();
  for (const auto& s : secrets) {
    Json e = {{"name", s.name}, {"hosts", s.hosts}};
    if (with_secret_values) {
      e["value"] = s.value;
      e["placeholder"] = s.placeholder;
    }
    secrets_json.push_back(std::move(e));
  }
  Json out = {{"mode", internet() ? "internet" : "none"},
              {"allow_out", allow_out},
              {"deny_out", deny_out},
              {"public_traffic", public_traffic},
              {"secrets", std::move(secrets_json)}};
  if (!mask_request_host.empty()) out["mask_request_host"] = mask_request_host;
  return out;
}

std::string Policy::RequestHostFor(int port) const {
  std::string host = mask_request_host;
  const std::string token = "${PORT}";
  for (size_t at = host.find(token); at != std::string::npos; at = host.find(token, at))
    host.replace(at, token.size(), std::to_string(port));
  return host;
}

namespace {

Result<std::vector<std::string>> StringList(const Json& j, const char* key, size_t max) {
  std::vector<std::string> out;
  const Json* f = JsonField(j, key);
  if (!f || f->is_null()) return out;
  if (!f->is_array())
    return Fail(Errc::kInvalidArgument, std::string("network.") + key + " must be an array of strings");
  if (f->size() > max)
    return Fail(Errc::kInvalidArgument, std::string("network.") + key + " has " +
                                            std::to_string(f->size()) + " entries (at most " +
                                            std::to_string(max) + ")");
  for (const auto& e : *f) {
    if (!e.is_string() || e.get<std::string>().empty() || e.get<std::string>().size() > 255)
      return Fail(Errc::kInvalidArgument,
                  std::string("network.") + key + " entries must be non-empty strings (<= 255 bytes)");
    out.push_back(e.get<std::string>());
  }
  return out;
}

// Resolves allow_out/deny_out entries into the derived lists.
Status Derive(Policy& p, const Presets& presets, bool stored) {
  p.allow_cidrs.clear();
  p.deny_cidrs.clear();
  p.allow_domains.clear();
  std::vector<std::string> normalised;
  std::set<std::string> seen;
  for (const auto& e : p.allow_out) {
    std::string norm;
    if (auto preset = presets.find(Lower(e)); preset != presets.end()) {
      if (preset->second.empty() && !stored)
        return Fail(Errc::kUnavailable,
                    "network.allow_out: preset \"" + preset->first +
                        "\" is not configured on this host (spaced --egress-preset " +
                        preset->first + "=DOMAINS)");
      norm = preset->first;
      for (const auto& d : preset->second) p.allow_domains.push_back(d);
    } else if (!e.empty() && ((e[0] >= '0' && e[0] <= '9') || e.find('/') != std::string::npos ||
                              e.find(':') != std::string::npos)) {
      auto c = ParseCidr(e);
      if (!c) return tl::unexpected(std::move(c.error()).Wrap("network.allow_out"));
      p.allow_cidrs.push_back(*c);
      norm = c->ToString();
    } else {
      auto d = NormaliseDomainPattern(e);
      if (!d && stored) {
        // A preset this reader does not know (core reads records without presets): keep
        // the name; the data plane expands it with the daemon's presets.
        norm = Lower(e);
      } else if (!d) {
        return Fail(Errc::kInvalidArgument,
                    "network.allow_out: \"" + e +
                        "\" is not a CIDR, a domain, a *.domain or a preset (presets: " + [&] {
                          std::string names;
                          for (const auto& [k, v] : presets) names += (names.empty() ? "" : ", ") + k;
                          return names;
                        }() + ")");
      }
      if (d) {
        p.allow_domains.push_back(*d);
        norm = *d;
      }
    }
    if (seen.insert(norm).second) normalised.push_back(norm);
  }
  p.allow_out = std::move(normalised);
  normalised.clear();
  seen.clear();
  for (const auto& e : p.deny_out) {
    auto c = ParseCidr(e);
    if (!c) return tl::unexpected(std::move(c.error()).Wrap("network.deny_out (CIDRs only)"));
    p.deny_cidrs.push_back(*c);
    if (seen.insert(c->ToString()).second) normalised.push_back(c->ToString());
  }
  p.deny_out = std::move(normalised);
  if (!p.internet() && (!p.allow_out.empty() || !p.deny_out.empty() || !p.secrets.empty()))
    return Fail(Errc::kInvalidArgument,
                "network.allow_out, deny_out and secrets need network.mode \"internet\"");
  return Ok();
}

Status ParseMode(const Json& j, Policy& p) {
  if (const Json* m = JsonField(j, "mode")) {
    if (!m->is_string()) return Fail(Errc::kInvalidArgument, "network.mode must be \"none\" or \"internet\"");
    std::string mode = m->get<std::string>();
    if (mode == "none") {
      p.mode = Policy::Mode::kNone;
    } else if (mode == "internet") {
      p.mode = Policy::Mode::kInternet;
    } else {
      return Fail(Errc::kInvalidArgument,
                  "network.mode must be \"none\" or \"internet\", not \"" + mode + "\"");
    }
  }
  return Ok();
}

bool ValidEnvName(std::string_view n) {
  if (n.empty() || n.size() > 128 || (n[0] >= '0' && n[0] <= '9')) return false;
  return std::all_of(n.begin(), n.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

}  // namespace

Result<Policy> ParsePolicy(const Json& j, const Presets& presets, bool stored) {
  Policy p;
  if (j.is_null()) return p;
  if (j.is_boolean()) {
    p.mode = j.get<bool>() ? Policy::Mode::kInternet : Policy::Mode::kNone;
    return p;
  }
  if (!j.is_object())
    return Fail(Errc::kInvalidArgument,
                "network must be an object {mode, allow_out, deny_out, public_traffic, secrets}");
  static const std::set<std::string> kKnown = {"mode", "allow_out", "deny_out", "public_traffic",
                                               "mask_request_host", "secrets"};
  for (const auto& [k, v] : j.items()) {
    if (!kKnown.count(k)) return Fail(Errc::kInvalidArgument, "unknown field \"network." + k + "\"");
  }
  SPACE_TRY(ParseMode(j, p));
  auto allow = StringList(j, "allow_out", kMaxAllowEntries);
  if (!allow) return tl::unexpected(allow.error());
  auto deny = StringList(j, "deny_out", kMaxDenyEntries);
  if (!deny) return tl::unexpected(deny.error());
  p.allow_out = std::move(*allow);
  p.deny_out = std::move(*deny);
  // Asking for rules implies the internet: {"allow_out":[...]} alone means what it says.
  if (!JsonField(j, "mode") && (!p.allow_out.empty() || !p.deny_out.empty()))
    p.mode = Policy::Mode::kInternet;
  if (const Json* t = JsonField(j, "public_traffic")) {
    if (!t->is_boolean()) return Fail(Errc::kInvalidArgument, "network.public_traffic must be a boolean");
    p.public_traffic = t->get<bool>();
  }
  if (const Json* m = JsonField(j, "mask_request_host"); m && !m->is_null()) {
    // A host[:port] for a Host header: letters, digits, '.', '-', ':', '[', ']' and ${PORT}.
    const bool text = m->is_string();
    std::string host = text ? m->get<std::string>() : "";
    std::string bare = host;
    for (size_t at = bare.find("${PORT}"); at != std::string::npos; at = bare.find("${PORT}"))
      bare.replace(at, 7, "1");
    const bool ok = text && !bare.empty() && bare.size() <= 261 &&
                    std::all_of(bare.begin(), bare.end(), [](char c) {
                      return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' ||
                             c == ':' || c == '[' || c == ']' || c == '_';
                    });
    if (!ok)
      return Fail(Errc::kInvalidArgument,
                  "network.mask_request_host must be a host[:port] (letters, digits, . - : [ ] _ and "
                  "${PORT}), at most 261 bytes");
    p.mask_request_host = host;
  }
  if (const Json* s = JsonField(j, "secrets"); s && !s->is_null()) {
    if (!s->is_array()) return Fail(Errc::kInvalidArgument, "network.secrets must be an array");
    if (s->size() > kMaxSecrets)
      return Fail(Errc::kInvalidArgument, "at most " + std::to_string(kMaxSecrets) + " secrets");
    std::set<std::string> names;
    for (const auto& e : *s) {
      if (!e.is_object()) return Fail(Errc::kInvalidArgument, "network.secrets entries must be objects");
      for (const auto& [k, v] : e.items()) {
        if (k != "name" && k != "value" && k != "hosts" && !(stored && k == "placeholder"))
          return Fail(Errc::kInvalidArgument, "unknown field \"network.secrets[]." + k + "\"");
      }
      Secret sec;
      sec.name = JsonStringOr(e, "name", "");
      if (!ValidEnvName(sec.name))
        return Fail(Errc::kInvalidArgument,
                    "network.secrets[].name must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*)");
      if (!names.insert(sec.name).second)
        return Fail(Errc::kInvalidArgument, "secret " + sec.name + " is given twice");
      const Json* v = JsonField(e, "value");
      if (!v || !v->is_string() || v->get<std::string>().empty() ||
          v->get<std::string>().size() > kMaxSecretValueBytes)
        return Fail(Errc::kInvalidArgument, "secret " + sec.name + ": value must be a string of 1-" +
                                                std::to_string(kMaxSecretValueBytes) + " bytes");
      sec.value = v->get<std::string>();
      for (char c : sec.value) {
        if (c == '\0' || c == '\r' || c == '\n')
          return Fail(Errc::kInvalidArgument,
                      "secret " + sec.name + ": value must not contain NUL or line breaks");
      }
      const Json* h = JsonField(e, "hosts");
      if (!h || !h->is_array() || h->empty())
        return Fail(Errc::kInvalidArgument,
                    "secret " + sec.name + " has no hosts: name the hosts it may be sent to");
      if (h->size() > 16) return Fail(Errc::kInvalidArgument, "secret " + sec.name + ": at most 16 hosts");
      for (const auto& host : *h) {
        if (!host.is_string()) return Fail(Errc::kInvalidArgument, "secret " + sec.name + ": hosts must be strings");
        auto d = NormaliseDomainPattern(host.get<std::string>());
        if (!d) return tl::unexpected(std::move(d.error()).Wrap("secret " + sec.name));
        sec.hosts.push_back(*d);
      }
      if (stored) sec.placeholder = JsonStringOr(e, "placeholder", "");
      p.secrets.push_back(std::move(sec));
    }
    if (!p.secrets.empty() && !JsonField(j, "mode")) p.mode = Policy::Mode::kInternet;
  }
  SPACE_TRY(Derive(p, presets, stored));
  return p;
}

void AssignPlaceholders(Policy& p) {
  for (auto& s : p.secrets) {
    if (!s.placeholder.empty()) continue;
    unsigned char raw[16];
    randombytes_buf(raw, sizeof raw);
    s.placeholder = "space_secret_" + s.name + "_" +
                    HexEncode(std::string_view(reinterpret_cast<char*>(raw), sizeof raw));
  }
}

Result<Policy> ParsePolicyUpdate(const Json& j, const Policy& current, const Presets& presets) {
  if (!j.is_object())
    return Fail(Errc::kInvalidArgument, "the body must be an object {mode, allow_out, deny_out}");
  for (const auto& [k, v] : j.items()) {
    if (k != "mode" && k != "allow_out" && k != "deny_out")
      return Fail(Errc::kInvalidArgument,
                  "\"" + k + "\" cannot be changed on a running sandbox (only mode, allow_out, deny_out)");
  }
  Policy p = current;
  p.mode = Policy::Mode::kInternet;
  SPACE_TRY(ParseMode(j, p));
  auto allow = StringList(j, "allow_out", kMaxAllowEntries);
  if (!allow) return tl::unexpected(allow.error());
  auto deny = StringList(j, "deny_out", kMaxDenyEntries);
  if (!deny) return tl::unexpected(deny.error());
  p.allow_out = std::move(*allow);
  p.deny_out = std::move(*deny);
  if (!p.internet() && !p.secrets.empty())
    return Fail(Errc::kInvalidArgument, "a sandbox with secrets keeps network.mode \"internet\"");
  SPACE_TRY(Derive(p, presets, false));
  return p;
}

const std::vector<Cidr>& AlwaysDeniedRanges() {
  static const std::vector<Cidr> kRanges = [] {
    std::vector<Cidr> v;
    for (const char* s :
         {"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
          "172.16.0.0/12", "192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15", "224.0.0.0/3"}) {
      v.push_back(*ParseCidr(s));
    }
    return v;
  }();
  return kRanges;
}

}  // namespace space::net
