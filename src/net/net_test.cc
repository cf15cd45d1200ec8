// Unit tests of the pure parts of net/: policy parsing and decisions, the SNI / Host
// sniffers and the DNS codec. The data plane itself is tested end to end in
// tests/integration/network_test.cc against a namespace the test makes.
#include <gtest/gtest.h>

#include "net/dns.h"
#include "net/net.h"
#include "net/policy.h"
#include "net/sniff.h"

namespace space::net {
namespace {

Presets TestPresets() { return {{"pypi", {"pkgs.example.test", "*.files.example.test"}}, {"npm", {}}}; }

Policy Parse(const Json& j) {
  auto p = ParsePolicy(j, TestPresets());
  EXPECT_TRUE(p) << (p ? "" : p.error().message);
  return p ? *p : Policy{};
}

std::string ParseError(const Json& j) {
  auto p = ParsePolicy(j, TestPresets());
  return p ? "" : p.error().message;
}

// scripts/space-down.sh derives the same tag with `printf %s DIR | b2sum -l 128 | cut -c1-6`.
TEST(Tag, IsBlake2b128OfTheDataDir) { EXPECT_EQ(TagForDataDir("/tmp/x"), "1834b6"); }

TEST(Cidr, ParsesAndRefuses) {
  auto c = ParseCidr("203.0.113.0/24");
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->Contains(*ParseIpv4("203.0.113.77")));
  EXPECT_FALSE(c->Contains(*ParseIpv4("203.0.114.1")));
  EXPECT_EQ(ParseCidr("1.2.3.4")->prefix, 32);
  EXPECT_TRUE(ParseCidr("0.0.0.0/0")->Contains(*ParseIpv4("8.8.8.8")));
  for (const char* bad : {"1.2.3.4/33", "1.2.3/24", "1.2.3.4/", "256.1.1.1", "1.2.3.4/24",
                          "01.2.3.4", "::1/128", "1.2.3.4/-1", "a.b.c.d"}) {
    EXPECT_FALSE(ParseCidr(bad)) << bad;
  }
  EXPECT_NE(ParseCidr("10.1.2.3/8").error().message.find("10.0.0.0/8"), std::string::npos);
}

TEST(Policy, DefaultsAndBoolForm) {
  EXPECT_FALSE(Parse(nullptr).internet());
  EXPECT_TRUE(Parse(true).internet());
  EXPECT_FALSE(Parse(false).internet());
  EXPECT_TRUE(Parse({{"mode", "internet"}}).internet());
  EXPECT_TRUE(Parse({{"allow_out", {"203.0.113.0/24"}}}).internet());
}

TEST(Policy, BadInputIsRefusedWithTheEntry) {
  EXPECT_NE(ParseError({{"mode", "wifi"}}).find("wifi"), std::string::npos);
  EXPECT_NE(ParseError({{"allow_out", {"300.1.1.1/8"}}}).find("300.1.1.1"), std::string::npos);
  EXPECT_NE(ParseError({{"allow_out", {"not a domain"}}}).find("not a domain"), std::string::npos);
  EXPECT_NE(ParseError({{"allow_out", {"*.com"}}}).find("*.com"), std::string::npos);
  EXPECT_NE(ParseError({{"deny_out", {"example.com"}}}).find("CIDR"), std::string::npos);
  EXPECT_NE(ParseError({{"bogus", 1}}).find("network.bogus"), std::string::npos);
  EXPECT_NE(ParseError({{"mode", "none"}, {"allow_out", {"1.2.3.4"}}}).find("internet"),
            std::string::npos);
  Json many = Json::array();
  for (int i = 0; i < 65; ++i) many.push_back("203.0.113." + std::to_string(i));
  EXPECT_NE(ParseError({{"allow_out", many}}).find("at most 64"), std::string::npos);
  EXPECT_NE(ParseError({{"secrets", {{{"name", "K"}, {"value", "v"}}}}}).find("no hosts"),
            std::string::npos);
  EXPECT_NE(ParseError({{"secrets", {{{"name", "K"}, {"value", "v"}, {"hosts", Json::array()}}}}})
                .find("no hosts"),
            std::string::npos);
  EXPECT_NE(ParseError({{"allow_out", {"npm"}}}).find("not configured"), std::string::npos);
  EXPECT_NE(ParseError("yes").find("object"), std::string::npos);
}

TEST(Policy, DecisionOrder) {
  Policy open = Parse({{"mode", "internet"}, {"deny_out", {"203.0.113.0/24"}}});
  uint32_t a10 = *ParseIpv4("203.0.113.10"), b = *ParseIpv4("198.51.100.7");
  EXPECT_EQ(open.Decide(a10, "").verdict, Policy::Verdict::kDeny);
  EXPECT_EQ(open.Decide(b, "").verdict, Policy::Verdict::kAllow);
  // An allowed CIDR beats a denied one.
  Policy both = Parse({{"allow_out", {"203.0.113.10/32"}}, {"deny_out", {"0.0.0.0/0"}}});
  EXPECT_EQ(both.Decide(a10, "").verdict, Policy::Verdict::kAllow);
  EXPECT_EQ(both.Decide(b, "").verdict, Policy::Verdict::kDeny);
  // A non-empty allow list allows only what it lists.
  Policy names = Parse({{"allow_out", {"api.example.test", "*.cdn.example.test", "pypi"}}});
  EXPECT_TRUE(names.restricted());
  EXPECT_EQ(names.Decide(b, "api.example.test").verdict, Policy::Verdict::kAllow);
  EXPECT_TRUE(names.Decide(b, "api.example.test").by_name);
  EXPECT_EQ(names.Decide(b, "evil.example.test").verdict, Policy::Verdict::kDeny);
  EXPECT_EQ(names.Decide(b, "").verdict, Policy::Verdict::kDeny);
  EXPECT_EQ(names.Decide(b, "x.cdn.example.test").verdict, Policy::Verdict::kAllow);
  EXPECT_EQ(names.Decide(b, "cdn.example.test").verdict, Policy::Verdict::kDeny);  // wildcard: below only
  EXPECT_EQ(names.Decide(b, "pkgs.example.test").verdict, Policy::Verdict::kAllow);  // preset
  EXPECT_TRUE(names.AllowsName("a.files.example.test"));
  EXPECT_FALSE(names.AllowsName("evil.example.test"));
  EXPECT_FALSE(Parse(nullptr).AllowsName("api.example.test"));
}

TEST(Policy, NormalisesAndRoundTripsStored) {
  Policy p = Parse({{"allow_out", {"API.Example.Test.", "203.0.113.0/24", "203.0.113.0/24"}},
                    {"secrets", {{{"name", "TOKEN"}, {"value", "s3cret"}, {"hosts", {"api.example.test"}}}}}});
  EXPECT_EQ(p.allow_out, (std::vector<std::string>{"api.example.test", "203.0.113.0/24"}));
  AssignPlaceholders(p);
  ASSERT_EQ(p.secrets.size(), 1u);
  EXPECT_TRUE(StartsWith(p.secrets[0].placeholder, "space_secret_TOKEN_"));
  Json shown = p.ToJson(false);
  EXPECT_EQ(shown.dump().find("s3cret"), std::string::npos);
  auto back = ParsePolicy(p.ToJson(true), TestPresets(), /*stored=*/true);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->secrets[0].value, "s3cret");
  EXPECT_EQ(back->secrets[0].placeholder, p.secrets[0].placeholder);
  auto upd = ParsePolicyUpdate({{"allow_out", {"198.51.100.0/24"}}}, *back, TestPresets());
  ASSERT_TRUE(upd);
  EXPECT_EQ(upd->secrets.size(), 1u);
  EXPECT_FALSE(ParsePolicyUpdate({{"secrets", Json::array()}}, *back, TestPresets()));
}

TEST(Policy, MaskRequestHost) {
  EXPECT_EQ(Parse(nullptr).RequestHostFor(3000), "");
  EXPECT_FALSE(Parse(nullptr).ToJson(false).contains("mask_request_host"));
  Policy p = Parse({{"mask_request_host", "custom-host.example.com:${PORT}"}});
  EXPECT_EQ(p.RequestHostFor(8080), "custom-host.example.com:8080");
  EXPECT_EQ(Parse({{"mask_request_host", "localhost"}}).RequestHostFor(1), "localhost");
  EXPECT_EQ(Parse({{"mask_request_host", "${PORT}.${PORT}.test"}}).RequestHostFor(7), "7.7.test");
  auto back = ParsePolicy(p.ToJson(true), TestPresets(), /*stored=*/true);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->mask_request_host, "custom-host.example.com:${PORT}");
  auto upd = ParsePolicyUpdate({{"allow_out", {"198.51.100.0/24"}}}, *back, TestPresets());
  ASSERT_TRUE(upd);
  EXPECT_EQ(upd->mask_request_host, p.mask_request_host);
  // Only what a Host header may hold: no spaces, line breaks, slashes or other text.
  for (const Json& bad : {Json(""), Json("a b"), Json("evil\r\nX-Injected: 1"), Json("a/b"), Json(7),
                          Json(std::string(300, 'a'))})
    EXPECT_NE(ParseError({{"mask_request_host", bad}}).find("mask_request_host"), std::string::npos)
        << bad.dump();
}

TEST(AlwaysDenied, CoversPrivateRanges) {
  auto denied = [](const char* ip) {
    for (const auto& c : AlwaysDeniedRanges()) {
      if (c.Contains(*ParseIpv4(ip))) return true;
    }
    return false;
  };
  for (const char* ip : {"10.1.2.3", "127.0.0.1", "169.254.169.254", "172.16.5.4", "192.168.1.1",
                         "100.64.0.1", "0.0.0.0", "224.0.0.1", "255.255.255.255"})
    EXPECT_TRUE(denied(ip)) << ip;
  for (const char* ip : {"203.0.113.10", "198.51.100.7", "8.8.8.8", "172.32.0.1"})
    EXPECT_FALSE(denied(ip)) << ip;
}

// A minimal TLS 1.2 ClientHello carrying server_name.
std::string ClientHello(const std::string& sni) {
  std::string ext_sn;
  std::string name_entry = std::string("\x00", 1) + char(sni.size() >> 8) + char(sni.size() & 255) + sni;
  std::string list = std::string(1, char(name_entry.size() >> 8)) + char(name_entry.size() & 255) + name_entry;
  ext_sn = std::string("\x00\x00", 2) + char(list.size() >> 8) + char(list.size() & 255) + list;
  std::string exts = std::string(1, char(ext_sn.size() >> 8)) + char(ext_sn.size() & 255) + ext_sn;
  std::string body = std::string("\x03\x03", 2) + std::string(32, 'r') + std::string("\x00", 1) +
                     std::string("\x00\x02\x13\x01", 4) + std::string("\x01\x00", 2) + exts;
  std::string hs = std::string("\x01", 1) + char(0) + char(body.size() >> 8) + char(body.size() & 255) + body;
  return std::string("\x16\x03\x01", 3) + char(hs.size() >> 8) + char(hs.size() & 255) + hs;
}

TEST(Sniff, TlsServerName) {
  std::string hello = ClientHello("API.example.test");
  auto s = SniffTls(hello);
  EXPECT_EQ(s.state, Sniffed::State::kDone);
  EXPECT_EQ(s.name, "api.example.test");
  for (size_t cut = 0; cut < hello.size(); cut += 7) {
    EXPECT_EQ(SniffTls(hello.substr(0, cut)).state, Sniffed::State::kNeedMore) << cut;
  }
  EXPECT_EQ(SniffTls("GET / HTTP/1.1\r\n").state, Sniffed::State::kNotThisProtocol);
  auto ip = SniffTls(ClientHello("203.0.113.10"));
  EXPECT_EQ(ip.name, "");
  EXPECT_EQ(ip.literal, "203.0.113.10");
}

TEST(Sniff, HttpHostAndConnect) {
  auto s = SniffHttp("GET /x HTTP/1.1\r\nUser-Agent: t\r\nhOsT: Api.Example.Test:8080\r\n\r\nbody");
  EXPECT_EQ(s.state, Sniffed::State::kDone);
  EXPECT_EQ(s.name, "api.example.test");
  EXPECT_EQ(s.head_bytes, std::string("GET /x HTTP/1.1\r\nUser-Agent: t\r\nhOsT: Api.Example.Test:8080\r\n\r\n").size());
  EXPECT_EQ(SniffHttp("GET / HTTP/1.1\r\nHost: a").state, Sniffed::State::kNeedMore);
  EXPECT_EQ(SniffHttp("\x16\x03\x01").state, Sniffed::State::kNotThisProtocol);
  auto c = SniffHttp("CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n");
  EXPECT_EQ(c.name, "api.example.test");
  EXPECT_EQ(c.port, 443);
  auto abs = SniffHttp("GET http://evil.example.test/p HTTP/1.1\r\nHost: api.example.test\r\n\r\n");
  EXPECT_EQ(abs.name, "evil.example.test");  // the absolute URI wins over Host (RFC 9112)
  EXPECT_EQ(abs.port, 80);
  EXPECT_EQ(SniffHttp("CONNECT nope HTTP/1.1\r\n\r\n").state, Sniffed::State::kNotThisProtocol);
}

TEST(Dns, QueryAnswerRoundTrip) {
  std::string q = dns::MakeQuery(0x1234, "Api.Example.Test", dns::kTypeA);
  auto parsed = dns::ParseQuery(q);
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->id, 0x1234);
  EXPECT_EQ(parsed->name, "api.example.test");
  EXPECT_EQ(parsed->qtype, dns::kTypeA);
  std::string nx = dns::MakeEmptyReply(q, *parsed, dns::kRcodeNxDomain);
  auto a = dns::ParseAnswer(nx);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->rcode, dns::kRcodeNxDomain);
  EXPECT_TRUE(a->a.empty());
  // An answer with a compressed name pointing at the question, and one A record.
  std::string ans = nx;
  ans[3] = static_cast<char>(0x80);  // rcode 0
  ans[7] = 1;                        // ancount 1
  ans += std::string("\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04\xcb\x00\x71\x0a", 16);
  auto b = dns::ParseAnswer(ans);
  ASSERT_TRUE(b);
  ASSERT_EQ(b->a.size(), 1u);
  EXPECT_EQ(Ipv4ToString(b->a[0]), "203.0.113.10");
  EXPECT_EQ(b->min_ttl, 60u);
  // Truncations never read past the message.
  for (size_t cut = 0; cut < ans.size(); ++cut) (void)dns::ParseAnswer(ans.substr(0, cut));
  // A pointer loop is refused.
  std::string loop = ans;
  loop[ans.size() - 16] = static_cast<char>(0xc0);
  loop[ans.size() - 15] = static_cast<char>(ans.size() - 16);
  EXPECT_FALSE(dns::ParseAnswer(loop).has_value() && !dns::ParseAnswer(loop)->a.empty());
  EXPECT_FALSE(dns::ParseQuery(ans));  // a response is not a query
}

TEST(Dns, UpstreamAndResolvConf) {
  EXPECT_EQ(dns::ParseUpstream("198.51.100.53")->port, 53);
  EXPECT_EQ(dns::ParseUpstream("198.51.100.53:5353")->port, 5353);
  EXPECT_FALSE(dns::ParseUpstream("dns.example:53"));
  EXPECT_FALSE(dns::ParseUpstream("1.2.3.4:0"));
  auto r = dns::FromResolvConf("# x\nsearch a\nnameserver ::1\nnameserver 192.0.2.53\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(Ipv4ToString(r->addr), "192.0.2.53");
}

}  // namespace
}  // namespace space::net
