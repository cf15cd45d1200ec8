// The route table and openapi.json describe the same routes, both ways; the router's
// matching of paths to entries.
#include "api/route_table.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "common/json.h"

namespace space::api {
namespace {

std::set<std::string> TableRoutes() {
  std::set<std::string> out;
  for (const RouteEntry& r : RouteTable()) out.insert(std::string(r.method) + " " + r.pattern);
  return out;
}

std::set<std::string> SpecRoutes(const Json& spec) {
  static const std::set<std::string> kMethods = {"get", "put", "post", "delete", "options", "head", "patch", "trace"};
  std::set<std::string> out;
  for (const auto& [path, item] : spec["paths"].items()) {
    for (const auto& [method, op] : item.items()) {
      if (!kMethods.count(method)) continue;
      std::string m = method;
      for (char& c : m) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      out.insert(m + " " + path);
    }
  }
  return out;
}

TEST(ApiRoutesTest, EmbeddedSpecIsTheFileAndValidJson) {
  std::ifstream f(SPACE_OPENAPI_JSON);
  std::stringstream text;
  text << f.rdbuf();
  EXPECT_EQ(text.str(), std::string(OpenApiJson())) << "rebuild: the embedded spec is stale";
  auto spec = ParseJson(OpenApiJson());
  ASSERT_TRUE(spec.has_value());
  EXPECT_EQ((*spec)["openapi"].get<std::string>().substr(0, 4), "3.1.");
  EXPECT_EQ(OpenApiEtag().size(), 18u);
}

TEST(ApiRoutesTest, EveryServedRouteIsInTheSpecAndEverySpecRouteIsServed) {
  auto spec = ParseJson(OpenApiJson());
  ASSERT_TRUE(spec.has_value());
  std::set<std::string> table = TableRoutes(), described = SpecRoutes(*spec);
  for (const auto& r : table) EXPECT_TRUE(described.count(r)) << "served but not in openapi.json: " << r;
  for (const auto& r : described) EXPECT_TRUE(table.count(r)) << "in openapi.json but not served: " << r;
  EXPECT_EQ(table.size(), std::size(RouteTable())) << "duplicate entries in the route table";
}

TEST(ApiRoutesTest, EveryOperationHasAnIdAndResponses) {
  auto spec = ParseJson(OpenApiJson());
  ASSERT_TRUE(spec.has_value());
  std::set<std::string> ids;
  for (const auto& [path, item] : (*spec)["paths"].items()) {
    for (const auto& [method, op] : item.items()) {
      if (!op.is_object() || !op.contains("responses")) continue;
      ASSERT_TRUE(op.contains("operationId")) << method << " " << path;
      EXPECT_TRUE(ids.insert(op["operationId"].get<std::string>()).second) << op["operationId"];
      EXPECT_FALSE(op["responses"].empty()) << method << " " << path;
    }
  }
}

std::vector<std::string> Segs(std::initializer_list<const char*> s) { return {s.begin(), s.end()}; }

TEST(ApiRoutesTest, Matching) {
  std::vector<std::string> allowed;
  const RouteEntry* r = MatchRoute("GET", Segs({"v1", "sandboxes", "sb-1"}), &allowed);
  ASSERT_NE(r, nullptr);
  EXPECT_STREQ(r->pattern, "/v1/sandboxes/{id}");
  // Wrong method: no entry, and the methods the path has.
  EXPECT_EQ(MatchRoute("POST", Segs({"v1", "sandboxes", "sb-1"}), &allowed), nullptr);
  EXPECT_EQ(std::set<std::string>(allowed.begin(), allowed.end()),
            (std::set<std::string>{"GET", "PATCH", "DELETE"}));
  // Unknown path.
  EXPECT_EQ(MatchRoute("GET", Segs({"v1", "nope"}), &allowed), nullptr);
  EXPECT_TRUE(allowed.empty());
  EXPECT_EQ(MatchRoute("GET", Segs({"v1", "sandboxes", "sb-1", "commands", "c", "output", "x"}), &allowed), nullptr);
  // A final {path} takes the rest, one segment or more.
  r = MatchRoute("PUT", Segs({"v1", "sandboxes", "sb-1", "ports", "8080", "a", "b"}), &allowed);
  ASSERT_NE(r, nullptr);
  EXPECT_STREQ(r->pattern, "/v1/sandboxes/{id}/ports/{port}/{path}");
  r = MatchRoute("GET", Segs({"v1", "sandboxes", "sb-1", "ports", "8080"}), &allowed);
  ASSERT_NE(r, nullptr);
  EXPECT_STREQ(r->pattern, "/v1/sandboxes/{id}/ports/{port}");
  r = MatchRoute("GET", Segs({"healthz"}), &allowed);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->surface, Surface::kHealth);
  EXPECT_EQ(MatchRoute("GET", Segs({}), &allowed), nullptr);
}

}  // namespace
}  // namespace space::api
