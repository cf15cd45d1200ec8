#include "cluster/placement.h"

#include <gtest/gtest.h>

#include <set>

namespace space::cluster {
namespace {

constexpr int64_t kGiB = 1ll << 30;

NodeLoad Node(const std::string& name, int64_t free_gib, int64_t seq = 1, std::vector<std::string> rt = {"oci"},
              std::map<std::string, std::string> labels = {}) {
  NodeLoad n;
  n.name = name;
  n.free_memory = free_gib * kGiB;
  n.total_memory = 16 * kGiB;
  n.free_cpu_millis = 2000;
  n.cpus = 2;
  n.runtimes = std::move(rt);
  n.labels = std::move(labels);
  n.load_seq = seq;
  return n;
}

TEST(PlacerTest, LeastLoadedOfTheSampleFirst) {
  Placer p(3, 42);
  std::string why;
  auto c = p.Candidates({Node("a", 2), Node("b", 12), Node("c", 6)}, {.memory_bytes = kGiB}, &why);
  ASSERT_EQ(c, (std::vector<std::string>{"b", "c", "a"})) << why;
}

TEST(PlacerTest, SamplesKAndSpreadsOverTheNodes) {
  std::vector<NodeLoad> nodes;
  for (int i = 0; i < 10; ++i) nodes.push_back(Node("n" + std::to_string(i), 8));
  Placer p(3, 7);
  std::set<std::string> firsts;
  for (int i = 0; i < 200; ++i) {
    auto c = p.Candidates(nodes, {.memory_bytes = kGiB}, nullptr);
    ASSERT_EQ(c.size(), 3u);
    firsts.insert(c[0]);
  }
  EXPECT_EQ(firsts.size(), 10u) << "equal nodes must all get sandboxes";
}

TEST(PlacerTest, RuntimeLabelsAndRoomFilterWithAReason) {
  Placer p(3, 1);
  std::string why;
  std::vector<NodeLoad> nodes = {Node("vm", 8, 1, {"oci", "microvm"}, {{"zone", "a"}}), Node("plain", 8, 1, {"oci"}, {{"zone", "b"}}),
                                 Node("full", 0, 1, {"oci", "microvm"}, {{"zone", "a"}})};
  EXPECT_EQ(p.Candidates(nodes, {.memory_bytes = kGiB, .runtime = "microvm"}, &why), std::vector<std::string>{"vm"});
  EXPECT_EQ(p.Candidates(nodes, {.memory_bytes = kGiB, .labels = {{"zone", "b"}}}, &why), std::vector<std::string>{"plain"});
  EXPECT_TRUE(p.Candidates(nodes, {.runtime = "gvisor"}, &why).empty());
  EXPECT_NE(why.find("gvisor"), std::string::npos) << why;
  EXPECT_TRUE(p.Candidates(nodes, {.labels = {{"zone", "c"}}}, &why).empty());
  EXPECT_NE(why.find("labels"), std::string::npos) << why;
  EXPECT_TRUE(p.Candidates(nodes, {.memory_bytes = 9 * kGiB}, &why).empty());
  EXPECT_NE(why.find("room"), std::string::npos) << why;
  nodes[0].accepting = nodes[1].accepting = nodes[2].accepting = false;  // all fenced
  EXPECT_TRUE(p.Candidates(nodes, {}, &why).empty());
  EXPECT_NE(why.find("accepting"), std::string::npos) << why;
}

// CPU is shared by time: a node with none left is still a candidate, only ranked lower;
// on equal machines the sandbox count decides.
TEST(PlacerTest, CpuRanksButDoesNotFilterAndSlotsBreakTies) {
  Placer p(3, 7);
  std::vector<NodeLoad> nodes = {Node("busy", 8), Node("idle", 8)};
  nodes[0].free_cpu_millis = 0;
  EXPECT_EQ(p.Candidates(nodes, {.memory_bytes = kGiB, .cpu_millis = 1000}, nullptr),
            (std::vector<std::string>{"idle", "busy"}));
  std::vector<NodeLoad> equal = {Node("x", 8), Node("y", 8)};
  equal[0].sandboxes = 40;
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(p.Candidates(equal, {}, nullptr).front(), "y") << "the emptier of two equal nodes first";
}

// Reservations: placements since the node's last load count against it; a newer load
// (which includes them) clears them; a refusal gives the room back at once.
TEST(PlacerTest, InFlightReservationsUntilTheNextLoad) {
  Placer p(3, 1);
  std::vector<NodeLoad> one = {Node("a", 3, 5)};
  const PlacementRequest gib = {.memory_bytes = kGiB};
  for (int i = 0; i < 3; ++i) {
    auto c = p.Candidates(one, gib, nullptr);
    ASSERT_EQ(c.size(), 1u) << i;
    p.Reserve("a", 5, gib);
  }
  std::string why;
  EXPECT_TRUE(p.Candidates(one, gib, &why).empty()) << "overfilled on stale figures";
  p.Release("a", gib);  // one was refused
  EXPECT_EQ(p.Candidates(one, gib, nullptr).size(), 1u);
  p.Reserve("a", 5, gib);
  one[0].load_seq = 6;  // the node published again, counting what it got
  one[0].free_memory = 2 * kGiB;
  EXPECT_EQ(p.Candidates(one, {.memory_bytes = 2 * kGiB}, nullptr).size(), 1u);
}

TEST(PlacerTest, ReadsANodeRecord) {
  Json rec = {{"free_memory", 5 * kGiB}, {"total_memory", 8 * kGiB}, {"free_cpu_millis", 1500}, {"cpus", 2},
              {"runtimes", {"oci", "gvisor"}}, {"labels", {{"zone", "a"}, {"bad", 3}}}, {"accepting", false},
              {"load_seq", 9}};
  NodeLoad n = NodeLoad::FromRecord("n1", rec);
  EXPECT_EQ(n.free_memory, 5 * kGiB);
  EXPECT_EQ(n.total_memory, 8 * kGiB);
  EXPECT_EQ(n.runtimes, (std::vector<std::string>{"oci", "gvisor"}));
  EXPECT_EQ(n.labels, (std::map<std::string, std::string>{{"zone", "a"}}));
  EXPECT_FALSE(n.accepting);
  EXPECT_EQ(n.load_seq, 9);
  NodeLoad empty = NodeLoad::FromRecord("n2", Json::object());
  EXPECT_EQ(empty.cpus, 1);
  EXPECT_TRUE(empty.accepting);
}

TEST(PlacerTest, NodesWithTheTemplateRankFirstUnlessMuchBusier) {
  Placer p(3, 42);
  NodeLoad a = Node("a", 12), b = Node("b", 10), c = Node("c", 3);
  b.templates = {"py:v1", "sha256:abc"};
  c.templates = {"py:v1"};
  auto want = [](std::string ref) { return PlacementRequest{.memory_bytes = kGiB, .template_ref = std::move(ref)}; };
  // b has it and is nearly as free as a: b first. By digest too.
  EXPECT_EQ(p.Candidates({a, b, c}, want("py:v1"), nullptr).front(), "b");
  EXPECT_EQ(p.Candidates({a, b, c}, want("sha256:abc"), nullptr).front(), "b");
  // A template no node has, or the default: load alone decides.
  EXPECT_EQ(p.Candidates({a, b, c}, want("other:v1"), nullptr).front(), "a");
  EXPECT_EQ(p.Candidates({a, b, c}, want(""), nullptr).front(), "a");
  // c has it but is far busier (13 of 16 GiB used against 4): a pull on a is worth it.
  EXPECT_EQ(p.Candidates({a, c}, want("py:v1"), nullptr).front(), "a");
  // "name" alone means name:latest.
  NodeLoad d = Node("d", 8);
  d.templates = {"py:latest"};
  EXPECT_EQ(p.Candidates({a, d}, want("py"), nullptr).front(), "d");
}

TEST(PlacerTest, TheSampleAlwaysHoldsANodeWithTheTemplate) {
  std::vector<NodeLoad> nodes;
  for (int i = 0; i < 10; ++i) nodes.push_back(Node("n" + std::to_string(i), 8));
  nodes[7].templates = {"py:v1"};
  Placer p(3, 7);
  for (int i = 0; i < 100; ++i) {
    auto c = p.Candidates(nodes, {.memory_bytes = kGiB, .template_ref = "py:v1"}, nullptr);
    ASSERT_EQ(c.size(), 3u);
    EXPECT_EQ(c.front(), "n7") << "round " << i;
  }
}

TEST(PlacerTest, ReadsTheTemplatesOfANodeRecord) {
  auto j = ParseJson(R"({"templates": {"py:v1": {"digest": "sha256:1", "created_ms": 5}}})");
  ASSERT_TRUE(j);
  NodeLoad n = NodeLoad::FromRecord("x", *j);
  EXPECT_TRUE(n.HasTemplate("py:v1"));
  EXPECT_TRUE(n.HasTemplate("sha256:1"));
  EXPECT_TRUE(n.HasTemplate(""));
  EXPECT_FALSE(n.HasTemplate("py"));
  EXPECT_FALSE(n.HasTemplate("py:v2"));
}

}  // namespace
}  // namespace space::cluster
